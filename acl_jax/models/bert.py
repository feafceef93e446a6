"""BERT-family encoder with per-layer exit heads (Flax Linen).

One module family serves BERT, RoBERTa, DistilBERT, MiniLM and MPNet: they share the
post-LayerNorm transformer block and differ only in embeddings (token types, position ids) and,
for MPNet, a relative position bias on the attention scores, which `EncoderConfig.family`
selects. Checkpoint names are mapped onto this tree by `models/hf.py`.

Parameter tree (what `model.init` returns under "params"):
  encoder/embeddings/{word_embeddings,position_embeddings?,token_type_embeddings?,LayerNorm}
  encoder/layer_{i}/attention/{qkv,out,LayerNorm}        i = 0..M-1
  encoder/layer_{i}/mlp/{fc1,fc2,LayerNorm}
  encoder/relative_attention_bias/embedding              MPNet: [buckets, heads], all layers
  exit_{m}/{pooler?,classifier}                          m = 1-based layer of the exit
`pooler` is the exit head's hidden dense layer (every head but "linear": BERT's pooler,
RoBERTa's classifier.dense, DistilBERT's pre_classifier). The classifier kernel is
[d, num_labels]; its transpose is the label-embedding matrix. DistilBERT's sinusoidal position
table is a constant (`sinusoidal_table`), not a parameter.
"""
import functools
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from acl_jax.models import dense, relative
from acl_jax.models.config import EncoderConfig
from acl_jax.threefry import threefry2x32

_INIT = nn.initializers.normal(stddev=0.02)
_NEG_INF = -1e9  # additive mask; finite so fully-masked rows stay NaN-free

ACTIVATIONS = {
    "gelu": functools.partial(jax.nn.gelu, approximate=False),
    "gelu_new": functools.partial(jax.nn.gelu, approximate=True),
    "gelu_pytorch_tanh": functools.partial(jax.nn.gelu, approximate=True),
    "gelu_tanh": functools.partial(jax.nn.gelu, approximate=True),
    "relu": jax.nn.relu,
}
# Activations of the exit heads' hidden dense layer (config.HeadSpec.activation).
HEAD_ACTIVATIONS = {"tanh": jnp.tanh, "relu": jax.nn.relu}


def rows_dot_general(lhs, rhs, dimension_numbers, precision=None,
                     preferred_element_type=None):
  """`nn.Dense`'s product of a [..., d] input and a [d, f] kernel, as one [rows, d] x [d, f].

  The values are those of the N-d `lax.dot_general` that `nn.Dense` calls (the gradients up to
  float32 summation order). The difference is in the backward: the transpose of the N-d form
  makes XLA:CPU copy each dense layer's cotangent into a transposed [f, rows] array before the
  kernel-gradient dot, where the 2-D form's kernel gradient reads the row-major activations
  and cotangents in place (BENCHMARKS.md, "The dense layers' kernel gradients").
  """
  (lhs_contract, rhs_contract), batch = dimension_numbers
  if tuple(lhs_contract) != (lhs.ndim - 1,) or tuple(rhs_contract) != (0,) or any(batch):
    raise ValueError(f"rows_dot_general contracts an input's last axis with a kernel's first "
                     f"and has no batch axes; got dimension_numbers={dimension_numbers}")
  y = jax.lax.dot_general(lhs.reshape(-1, lhs.shape[-1]), rhs, (((1,), (0,)), ((), ())),
                          precision=precision, preferred_element_type=preferred_element_type)
  return y.reshape(*lhs.shape[:-1], rhs.shape[-1])


def _dense(cfg: EncoderConfig, features: int, name: str) -> nn.Module:
  if jnp.dtype(cfg.compute_dtype).itemsize < 4:
    return dense.LowPrecisionDense(features, cfg.compute_dtype, _INIT, name=name)
  return nn.Dense(features, dtype=cfg.compute_dtype, param_dtype=jnp.float32,
                  kernel_init=_INIT, name=name, dot_general=rows_dot_general)


def _layer_norm(cfg: EncoderConfig, name: str = "LayerNorm") -> nn.LayerNorm:
  return nn.LayerNorm(epsilon=cfg.layer_norm_eps, dtype=cfg.compute_dtype,
                      param_dtype=jnp.float32, name=name)


class DropoutIndex(NamedTuple):
  """What every token of a batch is, for dropout keying: example id and position in it.

  example: [batch, seq] uint32 global example id of each token (the dataset index in
    training, so a mask never depends on the device, the shard or the row a token sits in).
  position: [batch, seq] uint32 position of each token inside its example.
  """
  example: jax.Array
  position: jax.Array

  @classmethod
  def rows(cls, example_ids: jax.Array | None, batch: int, seq: int) -> "DropoutIndex":
    """One example per row: row r is example `example_ids[r]` (default r), positions 0..seq-1."""
    ids = jnp.arange(batch) if example_ids is None else example_ids
    example = jnp.broadcast_to(ids.astype(jnp.uint32)[:, None], (batch, seq))
    return cls(example, jnp.broadcast_to(jnp.arange(seq, dtype=jnp.uint32), (batch, seq)))


class Packed(NamedTuple):
  """How the examples of a packed batch sit in its rows (several examples per row).

  A packed batch holds N examples in R rows of `seq` tokens; each example is a contiguous run
  of its tokens inside one row, starting with its [CLS] token. The model then attends only
  within an example (block-diagonal attention), numbers positions from 0 in every example, and
  reads every exit's input per example, so its outputs are those of the unpacked batch.

  segment_ids: [R, seq] int32: 0 for padding, j >= 1 for the row's j-th example.
  position_ids: [R, seq] int32 position of each token inside its example (0 at its [CLS]).
  token_example: [R, seq] int32 which of the N examples each token belongs to, N for padding.
  cls_index: [N] int32 flat index (row * seq + position in the row) of each example's first
    token; an example slot without an example (example_mask 0) may point anywhere.
  """
  segment_ids: jax.Array
  position_ids: jax.Array
  token_example: jax.Array
  cls_index: jax.Array

  @property
  def num_examples(self) -> int:
    return self.cls_index.shape[0]

  @classmethod
  def from_batch(cls, batch) -> "Packed":
    """The packing arrays of a batch dict from `data.batching.make_packed_batch`."""
    return cls(*(batch[k] for k in PACKED_KEYS))


# The batch keys that make a batch packed (`Packed`'s fields, in order).
PACKED_KEYS = Packed._fields


def is_packed(batch) -> bool:
  """Whether a batch dict is packed (`data.batching.make_packed_batch`) or one example a row."""
  return "cls_index" in batch


def packed_dropout_index(packed: Packed, example_ids: jax.Array | None) -> DropoutIndex:
  """Each token's global example id and its position inside the example.

  example_ids: [N] the examples' global ids (default 0..N-1, as `DropoutIndex.rows`'s rows).
  """
  n = packed.num_examples
  ids = jnp.arange(n) if example_ids is None else example_ids
  example = jnp.take(ids.astype(jnp.uint32), packed.token_example, mode="clip")
  return DropoutIndex(example, packed.position_ids.astype(jnp.uint32))


def token_counters(index: DropoutIndex, width: int) -> tuple[jax.Array, jax.Array]:
  """Threefry counter words of a [batch, seq, width] activation: (example, pos * width + j)."""
  col = jnp.arange(width, dtype=jnp.uint32)
  return index.example[..., None], index.position[..., None] * jnp.uint32(width) + col


def attention_counters(index: DropoutIndex, heads: int, stride: int
                       ) -> tuple[jax.Array, jax.Array]:
  """Counter words of [batch, heads, q, k] attention probabilities.

  The element (h, q, k) of an example is (example of q, (h * stride + pos_q) * stride + pos_k),
  with `stride` = max_position_embeddings, so an entry's counter names the query and key
  positions inside the example wherever the example sits. (An entry whose key belongs to
  another example has probability 0, so its draw does not matter.)
  """
  h = jnp.arange(heads, dtype=jnp.uint32)[None, :, None, None]
  pos_q = index.position[:, None, :, None]
  pos_k = index.position[:, None, None, :]
  return index.example[:, None, :, None], (h * stride + pos_q) * jnp.uint32(stride) + pos_k


def example_counters(example: jax.Array, width: int) -> tuple[jax.Array, jax.Array]:
  """Counter words of a [batch, width] per-example activation (an exit head's input)."""
  return example.astype(jnp.uint32)[:, None], jnp.arange(width, dtype=jnp.uint32)[None, :]


def _counters(drop: DropoutIndex | None, fn, *args):
  return None if drop is None else fn(drop, *args)


class Dropout(nn.Module):
  """Inverted dropout whose mask is a counter-based hash of what each element belongs to.

  Each element's 32 random bits are threefry2x32(site key, (c0, c1)): the site key is
  flax's `make_rng("dropout")` for this module (a function of the step's key, the layer and
  the site, never of the device), and the counter words (c0, c1) name the element: its global
  example id and its place inside the example (see `token_counters`). So the mask of an
  example is the same on any device count, in any row, and packed or not. One hash per
  element, as `jax.random.bits` costs; the kept test is `bits >= round(rate * 2^32)`.
  """
  rate: float

  @nn.compact
  def __call__(self, x, counters: tuple[jax.Array, jax.Array] | None, deterministic: bool):
    """x: any shape; counters: two uint32 arrays broadcastable to x.shape."""
    if deterministic or self.rate == 0.0:
      return x
    if self.rate >= 1.0:
      return jnp.zeros_like(x)
    if counters is None:
      raise ValueError("Dropout in training needs counter words naming each element; pass a "
                       "DropoutIndex to the model (Classifier builds one from example_ids).")
    key = jax.random.key_data(self.make_rng("dropout")).reshape(-1)
    c0, c1 = (jnp.broadcast_to(c, x.shape) for c in counters)
    bits = threefry2x32(key[0], key[1], c0, c1)
    threshold = min(int(round(self.rate * 2.0 ** 32)), 2 ** 32 - 1)
    scale = 2.0 ** 32 / (2.0 ** 32 - threshold)
    return jnp.where(bits >= jnp.uint32(threshold), x * jnp.asarray(scale, x.dtype),
                     jnp.zeros((), x.dtype))


@functools.lru_cache(maxsize=8)
def sinusoidal_table(n_pos: int, dim: int) -> np.ndarray:
  """[n_pos, dim] float32 DistilBERT position table: sin on even columns, cos on odd ones.

  Computed in float64 and rounded once, as HF's `create_sinusoidal_embeddings`, so it equals
  the table HF writes into a checkpoint bit for bit.
  """
  pos = np.arange(n_pos, dtype=np.float64)[:, None]
  j = np.arange(dim)
  angle = pos / np.power(10000, 2 * (j // 2) / dim)
  table = np.where(j % 2 == 0, np.sin(angle), np.cos(angle)).astype(np.float32)
  table.flags.writeable = False
  return table


def attention_bias(attention_mask: jax.Array) -> jax.Array:
  """[batch, seq] 0/1 mask -> [batch, 1, 1, seq] additive float32 bias."""
  return jnp.where(attention_mask[:, None, None, :] > 0, 0.0, _NEG_INF).astype(jnp.float32)


def segment_bias(segment_ids: jax.Array) -> jax.Array:
  """[rows, seq] segment ids -> [rows, 1, seq, seq] additive float32 bias, block-diagonal.

  A token attends to the tokens of its own segment only: an example to itself, padding (0)
  to padding, so no attention row is fully masked.
  """
  same = segment_ids[:, None, :, None] == segment_ids[:, None, None, :]
  return jnp.where(same, 0.0, _NEG_INF).astype(jnp.float32)


class Embeddings(nn.Module):
  """Word + position (+ token-type) embeddings, LayerNorm, dropout."""
  cfg: EncoderConfig

  @nn.compact
  def __call__(self, input_ids, token_type_ids, train: bool, drop: DropoutIndex | None = None,
               position_ids: jax.Array | None = None):
    """position_ids: [batch, seq] positions inside each example (packed rows); by default
    each row is one example starting at 0."""
    cfg = self.cfg
    embed = functools.partial(nn.Embed, features=cfg.hidden_size, embedding_init=_INIT,
                              param_dtype=jnp.float32, dtype=cfg.compute_dtype)
    x = embed(cfg.vocab_size, name="word_embeddings")(input_ids)
    if position_ids is not None:
      positions = position_ids
      if cfg.pad_offset_positions:  # as below: non-pad tokens count from pad_token_id + 1
        positions = jnp.where(input_ids != cfg.pad_token_id, position_ids + cfg.pad_token_id + 1,
                              cfg.pad_token_id)
    elif cfg.pad_offset_positions:
      # RoBERTa and MPNet count positions from pad_token_id + 1 over non-pad tokens only.
      not_pad = (input_ids != cfg.pad_token_id).astype(jnp.int32)
      positions = jnp.cumsum(not_pad, axis=1) * not_pad + cfg.pad_token_id
    else:
      positions = jnp.broadcast_to(jnp.arange(input_ids.shape[1]), input_ids.shape)
    if cfg.sinusoidal_pos_embds:
      # A constant, not a parameter: nothing (optimizer, gate angle, clipping) can move it.
      table = sinusoidal_table(cfg.max_position_embeddings, cfg.hidden_size)
      x = x + jnp.asarray(table, cfg.compute_dtype)[positions]
    else:
      x = x + embed(cfg.max_position_embeddings, name="position_embeddings")(positions)
    if cfg.type_vocab_size > 0:
      if token_type_ids is None:
        token_type_ids = jnp.zeros_like(input_ids)
      x = x + embed(cfg.type_vocab_size, name="token_type_embeddings")(token_type_ids)
    x = _layer_norm(cfg)(x)
    return Dropout(cfg.hidden_dropout)(x, _counters(drop, token_counters, cfg.hidden_size),
                                       deterministic=not train)


class SelfAttention(nn.Module):
  """Multi-head self-attention with one fused QKV projection, then residual + LayerNorm."""
  cfg: EncoderConfig

  @nn.compact
  def __call__(self, x, bias, train: bool, drop: DropoutIndex | None = None):
    cfg = self.cfg
    b, s, h = x.shape
    heads, head_dim = cfg.num_heads, h // cfg.num_heads
    qkv = _dense(cfg, 3 * h, "qkv")(x).reshape(b, s, 3, heads, head_dim)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    # float32 scores straight from the dot (no bf16 rounding of the logits), as softmax wants.
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)
    probs = jax.nn.softmax(scores * (head_dim ** -0.5) + bias, axis=-1)
    probs = Dropout(cfg.attention_dropout)(
        probs, _counters(drop, attention_counters, heads, cfg.max_position_embeddings),
        deterministic=not train)
    ctx = jnp.einsum("bhqk,bkhd->bqhd", probs.astype(v.dtype), v).reshape(b, s, h)
    out = Dropout(cfg.hidden_dropout)(_dense(cfg, h, "out")(ctx),
                                      _counters(drop, token_counters, h), deterministic=not train)
    return _layer_norm(cfg)(x + out)


class MLP(nn.Module):
  """Position-wise feed-forward block, then residual + LayerNorm."""
  cfg: EncoderConfig

  @nn.compact
  def __call__(self, x, train: bool, drop: DropoutIndex | None = None):
    cfg = self.cfg
    y = ACTIVATIONS[cfg.hidden_act](_dense(cfg, cfg.intermediate_size, "fc1")(x))
    y = Dropout(cfg.hidden_dropout)(_dense(cfg, cfg.hidden_size, "fc2")(y),
                                    _counters(drop, token_counters, cfg.hidden_size),
                                    deterministic=not train)
    return _layer_norm(cfg)(x + y)


class TransformerLayer(nn.Module):
  cfg: EncoderConfig

  @nn.compact
  def __call__(self, x, bias, train: bool = False, drop: DropoutIndex | None = None):
    x = SelfAttention(self.cfg, name="attention")(x, bias, train, drop)
    return MLP(self.cfg, name="mlp")(x, train, drop)


class ExitHead(nn.Module):
  """Exit classifier on a layer's [CLS] state (or token mean), laid out as `cfg.head` says.

  Every head (config.EXIT_HEADS) ends in dropout + linear ("classifier"); all but "linear"
  first run a dense layer ("pooler") and its activation, the "roberta" head with a dropout
  before the dense too (RobertaClassificationHead's placement). One rate,
  `classifier_dropout` (default hidden_dropout), serves every dropout of the head.

  Returns (logits [batch, num_labels] float32, feature [batch, d]); the feature is SPEC's f,
  the input of the final dropout + linear layer computed without the head's dropout. (With
  the "roberta" head in training the logits see the dense layer on the dropped input, and f
  the same layer on the undropped one.)
  """
  cfg: EncoderConfig

  @nn.compact
  def __call__(self, cls, train: bool = False, example: jax.Array | None = None):
    """cls: [batch, hidden]; example: [batch] global example ids (dropout keying)."""
    cfg = self.cfg
    spec = cfg.head_spec
    rate = cfg.hidden_dropout if cfg.classifier_dropout is None else cfg.classifier_dropout
    if example is None:
      example = jnp.arange(cls.shape[0])
    x = feat = cls
    if spec.activation is not None:
      act = HEAD_ACTIVATIONS[spec.activation]
      dense = _dense(cfg, cfg.hidden_size, "pooler")
      feat = act(dense(cls))
      if spec.input_dropout:
        dropped = Dropout(rate, name="input_dropout")(
            cls, example_counters(example, cls.shape[-1]), deterministic=not train)
        # Dropout hands its input back when it is off (eval, rate 0): one dense pass then.
        x = feat if dropped is cls else act(dense(dropped))
      else:
        x = feat
    x = Dropout(rate)(x, example_counters(example, x.shape[-1]), deterministic=not train)
    logits = _dense(cfg, cfg.num_labels, "classifier")(x)
    return logits.astype(jnp.float32), feat


class Encoder(nn.Module):
  """Embeddings plus M transformer layers (and MPNet's shared relative position bias)."""
  cfg: EncoderConfig

  def setup(self):
    self.embeddings = Embeddings(self.cfg)
    for i in range(self.cfg.num_layers):
      setattr(self, f"layer_{i}", TransformerLayer(self.cfg))
    if self.cfg.relative_attention_num_buckets:
      self.relative_attention_bias = nn.Embed(
          self.cfg.relative_attention_num_buckets, self.cfg.num_heads, embedding_init=_INIT,
          param_dtype=jnp.float32, dtype=jnp.float32)

  def position_bias(self, seq: int, positions: jax.Array | None) -> jax.Array:
    """[rows or 1, heads, seq, seq] float32 MPNet bias of every score; `positions` [rows,
    seq] inside each example (packed rows), or None for one example a row from position 0."""
    if positions is None:
      idx = relative.buckets(np.arange(seq)[None])
    else:
      idx = relative.buckets(positions)
    return jnp.transpose(self.relative_attention_bias(idx), (0, 3, 1, 2))

  def __call__(self, input_ids, attention_mask, token_type_ids=None, train: bool = False,
               drop: DropoutIndex | None = None, packed: Packed | None = None):
    """Runs embeddings and every layer; `drop` keys dropout.

    With `packed` (several examples per row, see `Packed`) `attention_mask` is unused: the
    attention is block-diagonal by segment, positions restart in every example, and the
    states are per example.

    Returns:
      x: [batch, seq, hidden] hidden states after the last layer (packed: [rows, seq,
        hidden]).
      states: {"cls": [num_layers, batch, hidden]} the [CLS] state after each layer, plus
        "mean" (the masked token mean after each layer) when `cfg.exit_pooling == "mean"`
        (packed: [num_layers, N, hidden], one per example).
    """
    x = self.embeddings(input_ids, token_type_ids, train, drop,
                        None if packed is None else packed.position_ids)
    return self.run_layers(x, attention_mask, 0, self.cfg.num_layers, train, drop, packed)

  def run_layers(self, x, attention_mask, start: int, stop: int, train: bool = False,
                 drop: DropoutIndex | None = None, packed: Packed | None = None):
    if packed is None:
      bias = attention_bias(attention_mask)
      pool_fn = lambda x, k: pool(x, attention_mask, k)
      rows = x.shape[0]
    else:
      bias = segment_bias(packed.segment_ids)
      pool_fn = lambda x, k: pool_packed(x, packed, k)
      rows = packed.num_examples
    if self.cfg.relative_attention_num_buckets:
      # One [heads, q, k] bias for all layers, added where the mask's 0s are: the sum equals
      # HF's scores + position bias + mask at every unmasked score.
      bias = bias + self.position_bias(x.shape[1], None if packed is None
                                       else packed.position_ids)
    keys = ("cls",) if self.cfg.exit_pooling == "cls" else ("cls", self.cfg.exit_pooling)
    states = {k: [] for k in keys}
    for i in range(start, stop):
      x = getattr(self, f"layer_{i}")(x, bias, train, drop)
      for k in keys:
        states[k].append(pool_fn(x, k))
    return x, {k: jnp.stack(v) if v else jnp.zeros((0, rows, x.shape[-1]), x.dtype)
               for k, v in states.items()}


def pool(x: jax.Array, attention_mask: jax.Array, how: str) -> jax.Array:
  """[batch, seq, hidden] -> [batch, hidden]: the [CLS] row ("cls") or the masked token mean."""
  if how == "cls":
    return x[:, 0]
  m = (attention_mask > 0).astype(jnp.float32)[..., None]  # same test as attention_bias
  mean = (x.astype(jnp.float32) * m).sum(1) / jnp.maximum(m.sum(1), 1.0)  # float32 even in bf16
  return mean.astype(x.dtype)


def pool_packed(x: jax.Array, packed: Packed, how: str) -> jax.Array:
  """[rows, seq, hidden] packed states -> [N, hidden], one per example, as `pool` unpacked:
  each example's [CLS] state ("cls") or the mean over its tokens ("mean")."""
  flat = x.reshape(-1, x.shape[-1])
  if how == "cls":
    return jnp.take(flat, packed.cls_index, axis=0, mode="clip")
  n = packed.num_examples
  seg = packed.token_example.reshape(-1)  # padding is N: segment_sum drops it
  total = jax.ops.segment_sum(flat.astype(jnp.float32), seg, num_segments=n)
  count = jax.ops.segment_sum(jnp.ones(seg.shape, jnp.float32), seg, num_segments=n)
  return (total / jnp.maximum(count, 1.0)[:, None]).astype(x.dtype)


class Classifier(nn.Module):
  """Encoder with exit heads.

  `apply({"params": p}, input_ids, attention_mask, token_type_ids=None, train=False)` returns
  `(logits, aux)`:
    logits: [num_exits, batch, num_labels] float32, one slice per exit (last = final layer).
    aux["cls"]: [num_layers, batch, hidden], every layer's [CLS] state.
    aux["feats"]: [num_exits, batch, d], every exit's feature f.
    aux["last_hidden"]: [batch, seq, hidden], the final layer's hidden states.
  Dropout needs `rngs={"dropout": key}` when `train=True`; `example_ids` ([batch] ints, the
  examples' global ids, by default the row numbers) key each example's dropout masks, so a
  mask depends on (key, example, token position, layer, site) and not on where the example
  sits (see `Dropout`).

  Packed batches (several examples per row): `apply({"params": p}, input_ids, None,
  token_type_ids, train=..., example_ids=ids, packed=Packed(...))` with input_ids and
  token_type_ids [rows, seq] and example_ids [N]. The outputs are laid out by example as
  above (batch = N), equal to the unpacked call's on the same N examples up to float
  round-off, dropout masks included: every layer's [CLS] state (or token mean) is read per
  example, so every exit, loss and multi-exit strategy sees the same N examples.
  `apply_batch` calls either form from a batch dict.
  """
  cfg: EncoderConfig

  def setup(self):
    self.encoder = Encoder(self.cfg)
    for m in self.cfg.exit_layers:
      setattr(self, f"exit_{m}", ExitHead(self.cfg))

  def __call__(self, input_ids, attention_mask=None, token_type_ids=None, train: bool = False,
               example_ids=None, packed: Packed | None = None):
    if packed is not None:
      return self._packed(input_ids, token_type_ids, train, example_ids, packed)
    if attention_mask is None:
      raise ValueError("Classifier needs an attention_mask ([batch, seq], 1 for real tokens), "
                       "or `packed` for a packed batch.")
    drop = DropoutIndex.rows(example_ids, *input_ids.shape)
    x, states = self.encoder(input_ids, attention_mask, token_type_ids, train, drop=drop)
    return self._heads(x, states, train, drop.example[:, 0])

  def _packed(self, input_ids, token_type_ids, train: bool, example_ids, packed: Packed):
    """The forward of a packed batch: (logits, aux) laid out as for its N examples unpacked
    (aux["last_hidden"] stays in the packed [rows, seq, hidden] layout)."""
    drop = packed_dropout_index(packed, example_ids)
    x, states = self.encoder(input_ids, None, token_type_ids, train, drop=drop, packed=packed)
    eids = jnp.arange(packed.num_examples) if example_ids is None else example_ids
    return self._heads(x, states, train, eids)

  def _heads(self, x, states, train: bool, example_ids):
    exit_in = states[self.cfg.exit_pooling]
    logits, feats = [], []
    for m in self.cfg.exit_layers:
      lg, f = getattr(self, f"exit_{m}")(exit_in[m - 1], train, example_ids)
      logits.append(lg)
      feats.append(f)
    aux = {"cls": states["cls"], "feats": jnp.stack(feats), "last_hidden": x}
    return jnp.stack(logits), aux


def apply_batch(model: Classifier, params: Any, batch, *, train: bool = False, rngs=None,
                example_ids: jax.Array | None = None):
  """`model.apply` on a batch dict, packed (`is_packed`) or one example a row.

  Args:
    model: the Classifier.
    params: its params.
    batch: input_ids, token_type_ids (optional) and attention_mask [batch, seq], or for a
      packed batch input_ids, token_type_ids and the `PACKED_KEYS` arrays.
    train: dropout on.
    rngs: {"dropout": key} when training.
    example_ids: [N] global example ids keying dropout (None: 0..N-1).

  Returns:
    (logits [exits, N, K], aux), as `Classifier`.
  """
  if is_packed(batch):
    return model.apply({"params": params}, batch["input_ids"], None, batch.get("token_type_ids"),
                       train=train, rngs=rngs, example_ids=example_ids,
                       packed=Packed.from_batch(batch))
  return model.apply({"params": params}, batch["input_ids"], batch["attention_mask"],
                     batch.get("token_type_ids"), train=train, rngs=rngs, example_ids=example_ids)


def label_embeddings(params: Any, exit_layer: int) -> jax.Array:
  """[num_labels, d] label embeddings of an exit: the transposed classifier kernel."""
  name = f"exit_{exit_layer}"
  if name not in params or "classifier" not in params[name]:
    raise ValueError(
        f"No linear classifier at {name}; label embeddings need an exit head on layer "
        f"{exit_layer}. Exits present: {sorted(k for k in params if k.startswith('exit_'))}.")
  return params[name]["classifier"]["kernel"].T


def init_params(cfg: EncoderConfig, key: jax.Array, seq_len: int = 8) -> Any:
  """Randomly initialised params for `Classifier(cfg)` (one jitted program per config)."""
  return _jitted_init(cfg, seq_len)(key)


@functools.lru_cache(maxsize=16)
def _jitted_init(cfg: EncoderConfig, seq_len: int):
  def init(key):
    ids = jnp.zeros((1, seq_len), jnp.int32)
    return Classifier(cfg).init(key, ids, jnp.ones_like(ids))["params"]
  return jax.jit(init)
