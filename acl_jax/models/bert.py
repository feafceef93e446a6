"""BERT-family encoder with per-layer exit heads (Flax Linen).

One module family serves BERT, RoBERTa, DistilBERT and MiniLM: they share the post-LayerNorm
transformer block and differ only in embeddings (token types, position ids), which
`EncoderConfig.family` selects. Checkpoint names are mapped onto this tree by `models/hf.py`.

Parameter tree (what `model.init` returns under "params"):
  encoder/embeddings/{word_embeddings,position_embeddings,token_type_embeddings?,LayerNorm}
  encoder/layer_{i}/attention/{qkv,out,LayerNorm}        i = 0..M-1
  encoder/layer_{i}/mlp/{fc1,fc2,LayerNorm}
  exit_{m}/{pooler?,classifier}                          m = 1-based layer of the exit
The classifier kernel is [hidden, num_labels]; its transpose is the label-embedding matrix.
"""
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from acl_jax.models.config import EncoderConfig

_INIT = nn.initializers.normal(stddev=0.02)
_NEG_INF = -1e9  # additive mask; finite so fully-masked rows stay NaN-free

ACTIVATIONS = {
    "gelu": functools.partial(jax.nn.gelu, approximate=False),
    "gelu_new": functools.partial(jax.nn.gelu, approximate=True),
    "gelu_pytorch_tanh": functools.partial(jax.nn.gelu, approximate=True),
    "gelu_tanh": functools.partial(jax.nn.gelu, approximate=True),
    "relu": jax.nn.relu,
}


def _dense(cfg: EncoderConfig, features: int, name: str) -> nn.Dense:
  return nn.Dense(features, dtype=cfg.compute_dtype, param_dtype=jnp.float32,
                  kernel_init=_INIT, name=name)


def _layer_norm(cfg: EncoderConfig, name: str = "LayerNorm") -> nn.LayerNorm:
  return nn.LayerNorm(epsilon=cfg.layer_norm_eps, dtype=cfg.compute_dtype,
                      param_dtype=jnp.float32, name=name)


class Dropout(nn.Module):
  """Inverted dropout on 16 random bits per element (flax's draws a 32-bit float).

  The bits are compared with an integer threshold, so no float uniform is built, and a
  kept mask is half the size of a 32-bit one. (With jax's default partitionable threefry,
  16-bit draws still cost one hash per element: drawing one 32-bit hash per 4 elements was
  measured and did not change the step time, see BENCHMARKS.md.) The drop rate is rounded
  to a multiple of 2^-16 (0.1 -> 0.100006); kept values are rescaled by that exact rate.
  """
  rate: float

  @nn.compact
  def __call__(self, x, deterministic: bool):
    if deterministic or self.rate == 0.0:
      return x
    threshold = int(round(self.rate * 65536))
    if threshold >= 65536:
      return jnp.zeros_like(x)
    bits = jax.random.bits(self.make_rng("dropout"), x.shape, jnp.uint16)
    scale = 65536.0 / (65536 - threshold)
    return jnp.where(bits >= threshold, x * jnp.asarray(scale, x.dtype), jnp.zeros((), x.dtype))


def attention_bias(attention_mask: jax.Array) -> jax.Array:
  """[batch, seq] 0/1 mask -> [batch, 1, 1, seq] additive float32 bias."""
  return jnp.where(attention_mask[:, None, None, :] > 0, 0.0, _NEG_INF).astype(jnp.float32)


class Embeddings(nn.Module):
  """Word + position (+ token-type) embeddings, LayerNorm, dropout."""
  cfg: EncoderConfig

  @nn.compact
  def __call__(self, input_ids, token_type_ids, train: bool):
    cfg = self.cfg
    embed = functools.partial(nn.Embed, features=cfg.hidden_size, embedding_init=_INIT,
                              param_dtype=jnp.float32, dtype=cfg.compute_dtype)
    x = embed(cfg.vocab_size, name="word_embeddings")(input_ids)
    if cfg.family == "roberta":
      # RoBERTa counts positions from pad_token_id + 1 over non-pad tokens only.
      not_pad = (input_ids != cfg.pad_token_id).astype(jnp.int32)
      positions = jnp.cumsum(not_pad, axis=1) * not_pad + cfg.pad_token_id
    else:
      positions = jnp.broadcast_to(jnp.arange(input_ids.shape[1]), input_ids.shape)
    x = x + embed(cfg.max_position_embeddings, name="position_embeddings")(positions)
    if cfg.type_vocab_size > 0:
      if token_type_ids is None:
        token_type_ids = jnp.zeros_like(input_ids)
      x = x + embed(cfg.type_vocab_size, name="token_type_embeddings")(token_type_ids)
    x = _layer_norm(cfg)(x)
    return Dropout(cfg.hidden_dropout)(x, deterministic=not train)


class SelfAttention(nn.Module):
  """Multi-head self-attention with one fused QKV projection, then residual + LayerNorm."""
  cfg: EncoderConfig

  @nn.compact
  def __call__(self, x, bias, train: bool):
    cfg = self.cfg
    b, s, h = x.shape
    heads, head_dim = cfg.num_heads, h // cfg.num_heads
    qkv = _dense(cfg, 3 * h, "qkv")(x).reshape(b, s, 3, heads, head_dim)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32)
    probs = jax.nn.softmax(scores * (head_dim ** -0.5) + bias, axis=-1)
    probs = Dropout(cfg.attention_dropout)(probs, deterministic=not train)
    ctx = jnp.einsum("bhqk,bkhd->bqhd", probs.astype(v.dtype), v).reshape(b, s, h)
    out = Dropout(cfg.hidden_dropout)(_dense(cfg, h, "out")(ctx), deterministic=not train)
    return _layer_norm(cfg)(x + out)


class MLP(nn.Module):
  """Position-wise feed-forward block, then residual + LayerNorm."""
  cfg: EncoderConfig

  @nn.compact
  def __call__(self, x, train: bool):
    cfg = self.cfg
    y = ACTIVATIONS[cfg.hidden_act](_dense(cfg, cfg.intermediate_size, "fc1")(x))
    y = Dropout(cfg.hidden_dropout)(_dense(cfg, cfg.hidden_size, "fc2")(y),
                                       deterministic=not train)
    return _layer_norm(cfg)(x + y)


class TransformerLayer(nn.Module):
  cfg: EncoderConfig

  @nn.compact
  def __call__(self, x, bias, train: bool = False):
    x = SelfAttention(self.cfg, name="attention")(x, bias, train)
    return MLP(self.cfg, name="mlp")(x, train)


class ExitHead(nn.Module):
  """Exit classifier on a layer's [CLS] state (or token mean): optional pooler, dropout, linear.

  Returns (logits [batch, num_labels] float32, feature [batch, d]); the feature is the
  dropout-free input of the dropout + linear layer (SPEC's f).
  """
  cfg: EncoderConfig

  @nn.compact
  def __call__(self, cls, train: bool = False):
    cfg = self.cfg
    feat = cls
    if cfg.pooler:
      feat = jnp.tanh(_dense(cfg, cfg.hidden_size, "pooler")(feat))
    rate = cfg.hidden_dropout if cfg.classifier_dropout is None else cfg.classifier_dropout
    x = Dropout(rate)(feat, deterministic=not train)
    logits = _dense(cfg, cfg.num_labels, "classifier")(x)
    return logits.astype(jnp.float32), feat


class Encoder(nn.Module):
  """Embeddings plus M transformer layers, callable in two parts (see `Classifier.lower`)."""
  cfg: EncoderConfig

  def setup(self):
    self.embeddings = Embeddings(self.cfg)
    for i in range(self.cfg.num_layers):
      setattr(self, f"layer_{i}", TransformerLayer(self.cfg))

  def __call__(self, input_ids, attention_mask, token_type_ids=None, train: bool = False,
               stop: int | None = None):
    """Runs embeddings and layers 0..stop-1 (all by default).

    Returns:
      x: [batch, seq, hidden] hidden states after layer `stop`.
      states: {"cls": [stop, batch, hidden]} the [CLS] state after each layer run, plus
        "mean" (the masked token mean after each layer) when `cfg.exit_pooling == "mean"`.
    """
    x = self.embeddings(input_ids, token_type_ids, train)
    return self.run_layers(x, attention_mask, 0, self.cfg.num_layers if stop is None else stop,
                           train)

  def run_layers(self, x, attention_mask, start: int, stop: int, train: bool = False):
    bias = attention_bias(attention_mask)
    keys = ("cls",) if self.cfg.exit_pooling == "cls" else ("cls", self.cfg.exit_pooling)
    states = {k: [] for k in keys}
    for i in range(start, stop):
      x = getattr(self, f"layer_{i}")(x, bias, train)
      for k in keys:
        states[k].append(pool(x, attention_mask, k))
    return x, {k: jnp.stack(v) if v else jnp.zeros((0,) + x[:, 0].shape, x.dtype)
               for k, v in states.items()}


def pool(x: jax.Array, attention_mask: jax.Array, how: str) -> jax.Array:
  """[batch, seq, hidden] -> [batch, hidden]: the [CLS] row ("cls") or the masked token mean."""
  if how == "cls":
    return x[:, 0]
  m = (attention_mask > 0).astype(jnp.float32)[..., None]  # same test as attention_bias
  mean = (x.astype(jnp.float32) * m).sum(1) / jnp.maximum(m.sum(1), 1.0)  # float32 even in bf16
  return mean.astype(x.dtype)


class Classifier(nn.Module):
  """Encoder with exit heads.

  `apply({"params": p}, input_ids, attention_mask, token_type_ids=None, train=False)` returns
  `(logits, aux)`:
    logits: [num_exits, batch, num_labels] float32, one slice per exit (last = final layer).
    aux["cls"]: [num_layers, batch, hidden], every layer's [CLS] state.
    aux["feats"]: [num_exits, batch, d], every exit's feature f.
    aux["last_hidden"]: [batch, seq, hidden], the final layer's hidden states.
  Dropout needs `rngs={"dropout": key}` when `train=True`.

  The forward also splits in two, `lower` then `upper` (with `method=`), so a step can stop
  gradients below the top layers (ACL-Grad's `angle_params="top"`); their composition is
  exactly `__call__`.
  """
  cfg: EncoderConfig

  def setup(self):
    self.encoder = Encoder(self.cfg)
    for m in self.cfg.exit_layers:
      setattr(self, f"exit_{m}", ExitHead(self.cfg))

  def __call__(self, input_ids, attention_mask, token_type_ids=None, train: bool = False):
    x, states = self.lower(input_ids, attention_mask, token_type_ids, train)
    return self.upper(x, attention_mask, states, train)

  def lower(self, input_ids, attention_mask, token_type_ids=None, train: bool = False,
            top_layers: int = 1):
    """Embeddings and all but the top `top_layers` layers -> (x, per-layer states).

    The states are a dict of [M - top_layers, batch, hidden] arrays (see `Encoder`).
    """
    return self.encoder(input_ids, attention_mask, token_type_ids, train,
                        stop=self.cfg.num_layers - top_layers)

  def upper(self, x, attention_mask, states_lower, train: bool = False):
    """The remaining top layers and every exit head -> (logits, aux) as `__call__`."""
    start = states_lower["cls"].shape[0]
    x, states_top = self.encoder.run_layers(x, attention_mask, start, self.cfg.num_layers, train)
    states = (jax.tree.map(lambda a, b: jnp.concatenate([a, b]), states_lower, states_top)
              if start else states_top)
    exit_in = states[self.cfg.exit_pooling]
    logits, feats = [], []
    for m in self.cfg.exit_layers:
      lg, f = getattr(self, f"exit_{m}")(exit_in[m - 1], train)
      logits.append(lg)
      feats.append(f)
    aux = {"cls": states["cls"], "feats": jnp.stack(feats), "last_hidden": x}
    return jnp.stack(logits), aux


def label_embeddings(params: Any, exit_layer: int) -> jax.Array:
  """[num_labels, d] label embeddings of an exit: the transposed classifier kernel."""
  name = f"exit_{exit_layer}"
  if name not in params or "classifier" not in params[name]:
    raise ValueError(
        f"No linear classifier at {name}; label embeddings need an exit head on layer "
        f"{exit_layer}. Exits present: {sorted(k for k in params if k.startswith('exit_'))}.")
  return params[name]["classifier"]["kernel"].T


def init_params(cfg: EncoderConfig, key: jax.Array, seq_len: int = 8) -> Any:
  """Randomly initialised params for `Classifier(cfg)`."""
  ids = jnp.zeros((1, seq_len), jnp.int32)
  return Classifier(cfg).init(key, ids, jnp.ones_like(ids))["params"]
