"""Exit heads: HF's fine-tuned sequence-classification heads load exactly, or fail loudly."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import torch  # requirements-test.txt: the equivalence tests must not be skipped
import transformers

import acl_jax
from acl_jax.models import bert, label_embeddings
from acl_jax.models import hf as hf_lib
from acl_jax.models.config import EXIT_HEADS, EncoderConfig

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=37, max_position_embeddings=64)
TINY_DISTIL = dict(vocab_size=99, dim=32, n_layers=2, n_heads=4, hidden_dim=37,
                   max_position_embeddings=64)
CLASSES = {"bert": (transformers.BertConfig, transformers.BertForSequenceClassification),
           "roberta": (transformers.RobertaConfig, transformers.RobertaForSequenceClassification),
           "distilbert": (transformers.DistilBertConfig,
                          transformers.DistilBertForSequenceClassification)}


def hf_classifier(family, num_labels=3, **overrides):
  """A tiny random HF sequence classifier (eval mode) whose head weights are far from their
  near-zero init, so a dropped or misplaced head part shows in the logits."""
  config_cls, model_cls = CLASSES[family]
  kw = dict(TINY_DISTIL) if family == "distilbert" else dict(TINY)
  if family == "roberta":
    kw.update(max_position_embeddings=66, type_vocab_size=1, pad_token_id=1)
  torch.manual_seed(0)
  model = model_cls(config_cls(**kw, num_labels=num_labels, **overrides)).eval()
  head = [p for n, p in model.named_parameters()
          if n.startswith(("classifier", "pre_classifier", "bert.pooler"))]
  with torch.no_grad():
    for p in head:
      p.normal_(0.0, 0.5)
  return model


def inputs(family, seed=0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, 99, size=(4, 11)).astype(np.int64)
  mask = np.ones_like(ids)
  mask[1, 7:] = 0
  mask[2, 4:] = 0
  ids = np.where(mask > 0, ids, 1 if family == "roberta" else 0)
  types = np.zeros_like(ids)
  if family == "bert":
    types[:, 5:] = 1
  return ids, mask, types


def hf_logits(model, family, ids, mask, types):
  kw = {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}
  if family == "bert":
    kw["token_type_ids"] = torch.tensor(types)
  with torch.no_grad():
    return model(**kw).logits.numpy()


def our_logits(model, params, family, ids, mask, types):
  logits, aux = model.apply({"params": params}, jnp.asarray(ids), jnp.asarray(mask),
                            jnp.asarray(types) if family == "bert" else None)
  return np.asarray(logits[-1]), aux


@pytest.mark.parametrize("family,head", [("bert", "bert_pooler"), ("roberta", "roberta"),
                                         ("distilbert", "distilbert")])
def test_fine_tuned_head_loads_exactly(family, head, tmp_path):
  ref = hf_classifier(family)
  ref.save_pretrained(str(tmp_path), safe_serialization=True)
  model, params, _ = acl_jax.load_pretrained(str(tmp_path), 3, with_tokenizer=False)
  assert model.cfg.head == head  # the checkpoint's head, by default
  ids, mask, types = inputs(family)
  want = hf_logits(ref, family, ids, mask, types)
  got, aux = our_logits(model, params, family, ids, mask, types)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  assert np.abs(want).max() > 0.5  # the head is far from a no-op
  # Asking for the same head explicitly is the same model; f feeds the final linear layer,
  # whose transposed kernel is the label embedding.
  model2, params2, _ = acl_jax.load_pretrained(str(tmp_path), 3, head=head, with_tokenizer=False)
  np.testing.assert_array_equal(our_logits(model2, params2, family, ids, mask, types)[0], got)
  last = params["exit_2"]
  np.testing.assert_allclose(aux["feats"][-1] @ last["classifier"]["kernel"]
                             + last["classifier"]["bias"], got, rtol=1e-5, atol=1e-5)
  assert label_embeddings(params, 2).shape == (3, 32)


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert"])
def test_a_head_that_cannot_be_held_is_an_error_naming_ignore_head(family, tmp_path):
  hf_classifier(family, num_labels=4).save_pretrained(str(tmp_path), safe_serialization=True)
  folder = str(tmp_path)
  for kw in ({"head": "linear"}, {"num_labels": 2}, {"exit_pooling": "mean"}):
    with pytest.raises(ValueError, match="ignore_head=True"):
      acl_jax.load_pretrained(folder, **{"num_labels": 4, **kw}, with_tokenizer=False)
  other = "roberta" if family != "roberta" else "bert_pooler"
  with pytest.raises(ValueError, match=f"fine-tuned .* exit head .*{other!r} head cannot"):
    acl_jax.load_pretrained(folder, 4, head=other, with_tokenizer=False)
  # ignore_head starts a fresh head of the asked-for layout.
  model, params, _ = acl_jax.load_pretrained(folder, 2, ignore_head=True, with_tokenizer=False)
  assert model.cfg.head == "linear" and set(params["exit_2"]) == {"classifier"}
  assert params["exit_2"]["classifier"]["kernel"].shape == (32, 2)
  with pytest.raises(ValueError, match="Unknown exit head 'tanh'; known"):
    acl_jax.load_pretrained(folder, 4, head="tanh", with_tokenizer=False)


def test_pretrained_bert_pooler_seeds_a_bert_pooler_head(tmp_path):
  """A pretrained encoder has no head: "linear" by default, and a requested "bert_pooler"
  head starts from the checkpoint's pooler (as today's pooler=True did)."""
  torch.manual_seed(0)
  transformers.BertModel(transformers.BertConfig(**TINY)).save_pretrained(str(tmp_path))
  model, params, _ = acl_jax.load_pretrained(str(tmp_path), 2, with_tokenizer=False)
  assert model.cfg.head == "linear" and set(params["exit_2"]) == {"classifier"}
  _, params, _ = acl_jax.load_pretrained(str(tmp_path), 2, head="bert_pooler",
                                         with_tokenizer=False)
  sd = hf_lib.read_state_dict(str(tmp_path))
  np.testing.assert_array_equal(params["exit_2"]["pooler"]["kernel"], sd["pooler.dense.weight"].T)


def test_new_heads_are_the_seeded_init_and_the_encoder_the_checkpoint(tmp_path):
  """Loading initialises only what the checkpoint lacks (every exit head here), with the
  values `bert.init_params` gives for the seed; every encoder leaf is the checkpoint's."""
  torch.manual_seed(0)
  transformers.BertModel(transformers.BertConfig(**TINY)).save_pretrained(str(tmp_path))
  model, params, _ = acl_jax.load_pretrained(str(tmp_path), 3, exits="all", seed=7,
                                             with_tokenizer=False)
  init = bert.init_params(model.cfg, jax.random.key(7))
  for exit_name in ("exit_1", "exit_2"):
    jax.tree.map(np.testing.assert_array_equal, params[exit_name], init[exit_name])
  sd = hf_lib.read_state_dict(str(tmp_path))
  np.testing.assert_array_equal(params["encoder"]["layer_1"]["mlp"]["fc2"]["kernel"],
                                sd["encoder.layer.1.output.dense.weight"].T)
  assert not np.array_equal(params["encoder"]["layer_1"]["mlp"]["fc2"]["kernel"],
                            init["encoder"]["layer_1"]["mlp"]["fc2"]["kernel"])


def test_non_sequence_classifier_weights_are_not_a_head(tmp_path, caplog):
  torch.manual_seed(0)
  model = transformers.BertForTokenClassification(transformers.BertConfig(**TINY, num_labels=5))
  model.save_pretrained(str(tmp_path))
  m, params, _ = acl_jax.load_pretrained(str(tmp_path), 2, with_tokenizer=False)
  assert m.cfg.head == "linear" and params["exit_2"]["classifier"]["kernel"].shape == (32, 2)
  assert "not a sequence-classification head" in caplog.text


@pytest.mark.parametrize("head", sorted(EXIT_HEADS))
def test_head_features_dropout_and_label_embeddings(head):
  """f is the final linear layer's dropout-free input; in training the head's dropout masks
  are keyed by example ids (not rows) and f does not see them."""
  cfg = EncoderConfig(vocab_size=99, hidden_size=16, num_layers=2, num_heads=2,
                      intermediate_size=32, max_position_embeddings=32, num_labels=3,
                      exits="all", head=head, classifier_dropout=0.3)
  params = bert.init_params(cfg, jax.random.key(0))
  assert ("pooler" in params["exit_1"]) == (head != "linear")
  assert label_embeddings(params, 1).shape == (3, 16)
  h = jax.random.normal(jax.random.key(1), (5, 16))
  ex = jnp.arange(5) + 40
  apply = lambda x, e, train: bert.ExitHead(cfg).apply(
      {"params": params["exit_1"]}, x, train, e, rngs={"dropout": jax.random.key(2)})
  lg_eval, f_eval = apply(h, ex, False)
  lg, f = apply(h, ex, True)
  np.testing.assert_allclose(f, f_eval, rtol=1e-6, atol=1e-6)
  k = params["exit_1"]["classifier"]
  np.testing.assert_allclose(f_eval @ k["kernel"] + k["bias"], lg_eval, rtol=1e-5, atol=1e-5)
  assert not np.allclose(lg, lg_eval, atol=1e-3)
  rows = jnp.array([3, 1, 4, 0, 2])
  np.testing.assert_allclose(apply(h[rows], ex[rows], True)[0], lg[rows], rtol=1e-5, atol=1e-6)


def test_roberta_head_drops_its_input_too():
  """RoBERTa's head drops out its input and its hidden layer (HF's placement), the BERT
  pooler head its hidden layer only: with identity dense layers on a constant input 0.5, a
  logit is 0 or 2 tanh(1.0) (the input element survived, doubled) for the first, and 0 or
  2 tanh(0.5) for the second."""
  eye = {"kernel": jnp.eye(16), "bias": jnp.zeros(16)}
  h = jnp.full((64, 16), 0.5)
  for head, survivor in (("roberta", np.tanh(1.0)), ("bert_pooler", np.tanh(0.5))):
    cfg = EncoderConfig(vocab_size=99, hidden_size=16, num_layers=1, num_heads=2,
                        intermediate_size=32, max_position_embeddings=32, num_labels=16,
                        head=head, classifier_dropout=0.5)
    lg, f = bert.ExitHead(cfg).apply({"params": {"pooler": eye, "classifier": eye}}, h, True,
                                     jnp.arange(64), rngs={"dropout": jax.random.key(3)})
    np.testing.assert_allclose(f, np.tanh(0.5), rtol=1e-6)
    np.testing.assert_allclose(np.unique(np.round(np.asarray(lg), 5)),
                               np.round([0.0, 2 * survivor], 5), atol=1e-5)


def test_distilbert_sinusoidal_positions_are_a_frozen_constant(tmp_path):
  """DistilBERT with sinusoidal_pos_embds: the table is a constant of the model, not a
  parameter, so no optimizer step, gate angle or clipping sees it; a checkpoint whose table
  was trained anyway is refused, with the way to load it as a learned table."""
  ref = hf_classifier("distilbert", sinusoidal_pos_embds=True)
  ref.save_pretrained(str(tmp_path), safe_serialization=True)
  model, params, _ = acl_jax.load_pretrained(str(tmp_path), 3, with_tokenizer=False)
  assert model.cfg.sinusoidal_pos_embds
  assert "position_embeddings" not in params["encoder"]["embeddings"]
  sd = hf_lib.read_state_dict(str(tmp_path))
  np.testing.assert_array_equal(bert.sinusoidal_table(64, 32),
                                sd["embeddings.position_embeddings.weight"])
  ids, mask, types = inputs("distilbert")
  np.testing.assert_allclose(our_logits(model, params, "distilbert", ids, mask, types)[0],
                             hf_logits(ref, "distilbert", ids, mask, types), rtol=1e-4, atol=1e-4)
  # Gradients (hence the optimizer, the gate angle, clipping) have no leaf for the table.
  def loss(p):
    lg, _ = model.apply({"params": p}, ids, mask, train=True, rngs={"dropout": jax.random.key(0)})
    return -jax.nn.log_softmax(lg[-1])[:, 0].mean()
  g = jax.jit(jax.grad(loss))(params)  # one compile, not one per op
  assert set(g["encoder"]["embeddings"]) == {"word_embeddings", "LayerNorm"}
  # A trained (drifted) table.
  with torch.no_grad():
    ref.distilbert.embeddings.position_embeddings.weight.add_(0.01)
  drifted = str(tmp_path / "drifted")
  ref.save_pretrained(drifted, safe_serialization=True)
  with pytest.raises(ValueError, match="sinusoidal_pos_embds=False"):
    acl_jax.load_pretrained(drifted, 3, with_tokenizer=False)
  model, params, _ = acl_jax.load_pretrained(drifted, 3, sinusoidal_pos_embds=False,
                                             with_tokenizer=False)
  assert "position_embeddings" in params["encoder"]["embeddings"]
  np.testing.assert_allclose(our_logits(model, params, "distilbert", ids, mask, types)[0],
                             hf_logits(ref, "distilbert", ids, mask, types), rtol=1e-4, atol=1e-4)


def test_distilbert_classifier_dropout_is_seq_classif_dropout():
  cfg = hf_lib.config_from_hf({"model_type": "distilbert", **TINY_DISTIL,
                               "seq_classif_dropout": 0.3})
  assert cfg.classifier_dropout == 0.3
