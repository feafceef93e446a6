"""Encoder configuration, read from a Hugging Face `config.json`.

One dataclass covers the BERT, RoBERTa, DistilBERT, MiniLM and MPNet families: they differ only
in field names, in whether token types and a pooler exist, in how position ids are made, and
(MPNet) in a relative position bias added to every layer's attention scores.
"""
import dataclasses
import json
import os
from typing import Any

import jax.numpy as jnp

from acl_jax.errors import FileError, UserError, open_input
from acl_jax.names import check_known

# model_type -> family. MiniLM checkpoints declare model_type "bert".
FAMILIES = {
    "bert": "bert",
    "roberta": "roberta",
    "xlm-roberta": "roberta",
    "distilbert": "distilbert",
    "mpnet": "mpnet",
}
# Families that number positions from pad_token_id + 1 over non-pad tokens (fairseq's rule).
PAD_OFFSET_POSITIONS = ("roberta", "mpnet")

EXIT_MODES = ("last", "all")
EXIT_POOLING = ("cls", "mean")


@dataclasses.dataclass(frozen=True)
class HeadSpec:
  """The layout of an exit head: [dropout] -> dense -> activation = f -> dropout -> linear.

  Attributes:
    activation: of the head's hidden dense layer ("tanh" or "relu"); None for a head without
      one, whose feature f is its input.
    input_dropout: a dropout on the head's input before the dense layer too (RoBERTa's head).
  """
  activation: str | None
  input_dropout: bool = False


# Exit heads. "linear" is acl-jax's (SPEC: f is the layer's [CLS] state); the others are the
# heads of HF's *ForSequenceClassification models, so a fine-tuned one loads exactly.
EXIT_HEADS = {
    "linear": HeadSpec(None),
    "bert_pooler": HeadSpec("tanh"),  # BERT's pooler (dense + tanh), dropout, classifier
    "roberta": HeadSpec("tanh", input_dropout=True),  # classifier.dense, classifier.out_proj
    "distilbert": HeadSpec("relu"),  # pre_classifier + ReLU, dropout, classifier
}


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
  """Static shape and behaviour of the encoder and its exit heads.

  Attributes:
    family: "bert", "roberta", "distilbert" or "mpnet".
    vocab_size, hidden_size, num_layers, num_heads, intermediate_size: transformer shape.
    max_position_embeddings: size of the learned position table.
    type_vocab_size: token-type table size (0 for DistilBERT, which has none).
    sinusoidal_pos_embds: DistilBERT's fixed sinusoidal position table: a constant computed
      from the shape, not a parameter, so training cannot move it (HF freezes it).
    hidden_dropout, attention_dropout: dropout rates used when `train=True`.
    layer_norm_eps: LayerNorm epsilon.
    pad_token_id: used for RoBERTa's and MPNet's position ids.
    relative_attention_num_buckets: rows of MPNet's relative position bias table (one
      [buckets, heads] table shared by every layer, added to the attention scores); 0 for the
      families without one.
    hidden_act: a key of `bert.ACTIVATIONS`: "gelu" (exact erf form, as HF), "gelu_new"/
      "gelu_tanh" or "relu" (`hf.encoder_config` rejects others at load time).
    num_labels: classes of every exit head.
    exits: "last" (one head on layer M) or "all" (a head on every layer 1..M).
    head: every exit's head, a key of `EXIT_HEADS`: "linear" (dropout + linear on the
      layer's state, acl-jax's default), "bert_pooler" (dense + tanh first), "roberta"
      (dropout, dense + tanh, as RobertaClassificationHead) or "distilbert" (dense + ReLU
      first, as DistilBertForSequenceClassification's pre_classifier).
    exit_pooling: what an exit reads from its layer: "cls" (the [CLS] state, SPEC's h, the
      default) or "mean" (the mean over non-padding tokens). "mean" goes beyond the SPEC:
      sentence-embedding checkpoints such as all-MiniLM-L6-v2 were trained with mean pooling
      and their lower-layer [CLS] states carry almost no signal.
    classifier_dropout: dropout in each exit head (defaults to hidden_dropout; DistilBERT's
      config.json gives it as seq_classif_dropout).
    dtype: compute dtype (params stay float32); "bfloat16" on accelerators.
  """
  family: str = "bert"
  vocab_size: int = 30522
  hidden_size: int = 768
  num_layers: int = 12
  num_heads: int = 12
  intermediate_size: int = 3072
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  sinusoidal_pos_embds: bool = False
  hidden_dropout: float = 0.1
  attention_dropout: float = 0.1
  layer_norm_eps: float = 1e-12
  pad_token_id: int = 0
  relative_attention_num_buckets: int = 0
  hidden_act: str = "gelu"
  num_labels: int = 2
  exits: str = "last"
  head: str = "linear"
  exit_pooling: str = "cls"
  classifier_dropout: float | None = None
  dtype: str = "float32"

  def __post_init__(self):
    check_known(self.family, set(FAMILIES.values()), "encoder family")
    check_known(self.exits, EXIT_MODES, "exits")
    check_known(self.head, EXIT_HEADS, "exit head")
    check_known(self.exit_pooling, EXIT_POOLING, "exit_pooling")
    if self.hidden_size % self.num_heads:
      raise UserError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}.")
    if self.relative_attention_num_buckets and self.family != "mpnet":
      raise UserError(f"A relative position bias is MPNet's; family {self.family!r} has none.")
    if self.num_labels < 1:
      raise UserError(f"num_labels must be >= 1, got {self.num_labels}.")

  @property
  def exit_layers(self) -> tuple[int, ...]:
    """1-based layer indices that carry an exit head."""
    if self.exits == "all":
      return tuple(range(1, self.num_layers + 1))
    return (self.num_layers,)

  @property
  def max_length(self) -> int:
    """The longest input, in tokens with the special ones, that the position table covers.

    RoBERTa and MPNet number positions from pad_token_id + 1, so a table of 514 covers 512
    tokens.
    """
    if self.pad_offset_positions:
      return self.max_position_embeddings - self.pad_token_id - 1
    return self.max_position_embeddings

  @property
  def pad_offset_positions(self) -> bool:
    """Whether positions count from pad_token_id + 1 over non-pad tokens (RoBERTa, MPNet)."""
    return self.family in PAD_OFFSET_POSITIONS

  @property
  def head_spec(self) -> HeadSpec:
    return EXIT_HEADS[self.head]

  @property
  def compute_dtype(self) -> Any:
    return jnp.dtype(self.dtype)

  def replace(self, **kw) -> "EncoderConfig":
    return dataclasses.replace(self, **kw)


def config_from_hf(hf: dict, **overrides) -> EncoderConfig:
  """Maps a Hugging Face config dict onto `EncoderConfig`.

  Args:
    hf: the parsed `config.json`.
    **overrides: EncoderConfig fields to set (num_labels, exits, head, dtype, ...).
  """
  model_type = hf.get("model_type", "bert")
  if model_type not in FAMILIES:
    raise UserError(
        f"Unsupported model_type {model_type!r} in config.json; supported: {sorted(FAMILIES)}.")
  family = FAMILIES[model_type]
  try:
    kw = _hf_fields(hf, family)
  except KeyError as e:
    raise UserError(f"config.json lacks {e.args[0]!r}, which a {model_type} model's config "
                    "holds; is its model_type right?") from None
  kw["family"] = family
  if hf.get("classifier_dropout") is not None:
    kw["classifier_dropout"] = hf["classifier_dropout"]
  kw.update(overrides)
  return EncoderConfig(**kw)


def _hf_fields(hf: dict, family: str) -> dict:
  """The EncoderConfig fields an HF config dict of `family` states."""
  if family == "distilbert":
    kw = dict(
        vocab_size=hf["vocab_size"], hidden_size=hf["dim"], num_layers=hf["n_layers"],
        num_heads=hf["n_heads"], intermediate_size=hf["hidden_dim"],
        max_position_embeddings=hf["max_position_embeddings"], type_vocab_size=0,
        hidden_dropout=hf.get("dropout", 0.1), attention_dropout=hf.get("attention_dropout", 0.1),
        layer_norm_eps=1e-12, pad_token_id=hf.get("pad_token_id", 0),
        hidden_act=hf.get("activation", "gelu"),
        sinusoidal_pos_embds=bool(hf.get("sinusoidal_pos_embds", False)),
        classifier_dropout=hf.get("seq_classif_dropout", 0.2))
  elif family == "mpnet":
    # MPNetEmbeddings fixes padding_idx to 1 whatever pad_token_id says, and has no token types.
    kw = dict(
        vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
        num_layers=hf["num_hidden_layers"], num_heads=hf["num_attention_heads"],
        intermediate_size=hf["intermediate_size"],
        max_position_embeddings=hf["max_position_embeddings"], type_vocab_size=0,
        hidden_dropout=hf.get("hidden_dropout_prob", 0.1),
        attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
        layer_norm_eps=hf.get("layer_norm_eps", 1e-12), pad_token_id=1,
        relative_attention_num_buckets=hf.get("relative_attention_num_buckets", 32),
        hidden_act=hf.get("hidden_act", "gelu"))
  else:
    kw = dict(
        vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
        num_layers=hf["num_hidden_layers"], num_heads=hf["num_attention_heads"],
        intermediate_size=hf["intermediate_size"],
        max_position_embeddings=hf["max_position_embeddings"],
        type_vocab_size=hf.get("type_vocab_size", 2),
        hidden_dropout=hf.get("hidden_dropout_prob", 0.1),
        attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
        layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
        pad_token_id=hf.get("pad_token_id", 1 if family == "roberta" else 0) or 0,
        hidden_act=hf.get("hidden_act", "gelu"))
    pet = hf.get("position_embedding_type", "absolute")
    if pet != "absolute":
      raise UserError(f"position_embedding_type {pet!r} is not supported (only 'absolute').")
  return kw


def read_hf_config(folder: str) -> dict:
  path = os.path.join(folder, "config.json")
  if not os.path.isfile(path):
    raise FileError(
        f"No config.json in {folder!r}. A model folder needs config.json, model.safetensors "
        "(or pytorch_model.bin) and tokenizer files, as saved by `save_pretrained`.")
  with open_input(path) as f:
    try:
      return json.load(f)
    except ValueError as e:
      raise UserError(f"{path} is not valid JSON ({e}).") from None
