"""Early-exit inference that really skips layers, for any batch size.

The batch runs layer by layer. After layer m, exit m's head and the policy rule decide which
examples leave; the rest go on. To keep jit to a bounded number of shapes, the examples still
running sit in a padded batch whose size is one of a few static buckets (default: powers of
two up to the batch size, plus the batch size). When the live examples fit a smaller bucket,
their rows (hidden states, mask, patience state) are gathered into it and the rest is filled
with copies of a live row; rows that exited but still sit in the current bucket keep computing
and are ignored. Every transformer layer has the same parameter shapes, so one compiled step
per (policy, bucket, seq_len) serves all layers.

The result equals `select_exit` on a full forward pass (dropout is off), up to float rounding
of values that land exactly on a threshold.
"""
import collections
import functools
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from acl_jax.exits import policies
from acl_jax.models.bert import Embeddings, ExitHead, TransformerLayer, attention_bias, pool
from acl_jax.models.config import EncoderConfig

# How many times each compiled shape was traced, keyed by ("embed", batch, seq),
# ("step", policy, batch, seq) or ("gather", batch_from, batch_to, seq). Tests read it to
# check that the number of compiled shapes stays bounded and that nothing re-traces.
TRACES: collections.Counter = collections.Counter()


def default_buckets(batch_size: int) -> tuple[int, ...]:
  """Powers of two below `step`, multiples of `step` = max(8, batch_size // 8), the batch size.

  7 -> (1, 2, 4, 7); 32 -> (1, 2, 4, 8, 16, 24, 32); 128 -> (1, 2, 4, 8, 16, 32, 48, ..., 128).
  Power-of-two buckets alone would run up to twice the live rows (17 live -> 32); linear steps
  keep the padding under one step, for about 11 + log2(B / 64) compiled sizes.
  """
  step = max(8, batch_size // 8)
  sizes = [2 ** i for i in range(step.bit_length()) if 2 ** i < min(step, batch_size)]
  sizes += list(range(step, batch_size, step))
  return tuple(sizes) + (batch_size,)


def _check_buckets(buckets: Optional[Sequence[int]], batch_size: int) -> tuple[int, ...]:
  if buckets is None:
    return default_buckets(batch_size)
  out = sorted(set(buckets))
  if not out or any(not isinstance(b, (int, np.integer)) or b < 1 for b in out):
    raise ValueError(f"buckets must be positive ints, got {buckets!r}.")
  if out[-1] < batch_size:
    raise ValueError(
        f"The largest bucket ({out[-1]}) is smaller than the batch size ({batch_size}); "
        "add the batch size to buckets or pass buckets=None.")
  return tuple(int(b) for b in out)


def _fit(buckets: tuple[int, ...], n: int) -> int:
  return next(b for b in buckets if b >= n)


@functools.lru_cache(maxsize=None)
def _embed_fn(cfg: EncoderConfig):
  @jax.jit
  def embed(emb_params, input_ids, token_type_ids):
    TRACES["embed", *input_ids.shape] += 1
    return Embeddings(cfg).apply({"params": emb_params}, input_ids, token_type_ids, False)
  return embed


@functools.lru_cache(maxsize=None)
def _step_fn(cfg: EncoderConfig, policy: str):
  """Jitted (layer_params, head_params, x, mask, state, threshold) -> (x, done, pred, state,
  logits)."""
  @jax.jit
  def step(layer_params, head_params, x, mask, state, threshold):
    """x: [b, seq, hidden]; mask: [b, seq]; state: ExitState of [b]; logits: [b, K]."""
    TRACES["step", policy, *mask.shape] += 1
    x = TransformerLayer(cfg).apply({"params": layer_params}, x, attention_bias(mask))
    logits, _ = ExitHead(cfg).apply({"params": head_params}, pool(x, mask, cfg.exit_pooling))
    done, pred, state = policies.policy_step(logits, state, policy, threshold)
    return x, done, pred, state, logits
  return step


@jax.jit
def _gather(tree, idx):
  """Rows `idx` [b_new] of every leaf of `tree` (leaves [b_old, ...])."""
  first = jax.tree.leaves(tree)[0]
  TRACES["gather", first.shape[0], idx.shape[0], first.shape[1]] += 1
  return jax.tree.map(lambda a: jnp.take(a, idx, axis=0), tree)


def _exit_params(cfg: EncoderConfig, params: Any):
  if cfg.exits != "all":
    raise ValueError(f"{policies.ONE_EXIT_MSG}; cfg.exits={cfg.exits!r}.")
  policies.check_num_exits(cfg.num_layers)
  missing = [m for m in range(1, cfg.num_layers + 1) if f"exit_{m}" not in params]
  if missing:
    raise ValueError(f"params lack exit heads for layers {missing}; {policies.ONE_EXIT_MSG}.")
  layers = [params["encoder"][f"layer_{i}"] for i in range(cfg.num_layers)]
  heads = [params[f"exit_{m}"] for m in range(1, cfg.num_layers + 1)]
  return layers, heads


def early_exit_predict(cfg: EncoderConfig, params: Any, input_ids, attention_mask,
                       token_type_ids, policy: str, threshold: Any,
                       buckets: Optional[Sequence[int]] = None,
                       stats: Optional[dict] = None, with_logits: bool = False
                       ) -> tuple[np.ndarray, ...]:
  """Early-exit predictions, running each example only up to the layer it leaves at.

  Args:
    cfg: encoder config with `exits="all"`.
    params: `Classifier(cfg)` params.
    input_ids: [batch, seq] int.
    attention_mask: [batch, seq] 0/1.
    token_type_ids: [batch, seq] int, or None.
    policy: a key of `POLICIES`.
    threshold: the policy's threshold (see `select_exit`).
    buckets: padded batch sizes the live examples are packed into; None for
      `default_buckets(batch)`. The largest must be >= batch.
    stats: if a dict, "row_layers" (padded rows run, summed over layers) and "example_layers"
      (the layers each of the `batch` input rows needed, summed) are added to it: their
      ratio is the compute the bucketing wastes.
    with_logits: also return the logits of the exit each example left at.

  Returns:
    exit_layer: [batch] int32 numpy, 1-based layer each example left at.
    preds: [batch] int32 numpy, the argmax of that exit.
    logits: [batch, K] float32 numpy, that exit's logits (with_logits only).
  """
  threshold = policies.check_threshold(policy, threshold)
  layers, heads = _exit_params(cfg, params)
  input_ids = np.asarray(input_ids)
  attention_mask = np.asarray(attention_mask)
  if input_ids.ndim != 2 or attention_mask.shape != input_ids.shape:
    raise ValueError(f"input_ids and attention_mask must both be [batch, seq]; got "
                     f"{input_ids.shape} and {attention_mask.shape}.")
  batch = input_ids.shape[0]
  if batch == 0:
    raise ValueError("early_exit_predict got an empty batch.")
  buckets = _check_buckets(buckets, batch)
  step = _step_fn(cfg, policy)

  # slots[i]: the example held in row i of the padded batch, -1 for a filler or exited row.
  size = _fit(buckets, batch)
  slots = np.full((size,), -1, np.int64)
  slots[:batch] = np.arange(batch)
  rows = np.maximum(slots, 0)  # fillers copy example 0
  tt = None if token_type_ids is None else np.asarray(token_type_ids)[rows]
  x = _embed_fn(cfg)(params["encoder"]["embeddings"], input_ids[rows], tt)
  carry = (x, jnp.asarray(attention_mask[rows]), policies.init_state(size))

  exit_layer = np.zeros((batch,), np.int32)
  preds = np.zeros((batch,), np.int32)
  out_logits = None
  row_layers = 0
  for m in range(1, cfg.num_layers + 1):
    x, mask, state = carry
    x, done, pred, state, logits = step(layers[m - 1], heads[m - 1], x, mask, state, threshold)
    row_layers += slots.size
    done, pred = jax.device_get((done, pred))
    leaving = (slots >= 0) & (done | (m == cfg.num_layers))
    exit_layer[slots[leaving]] = m
    preds[slots[leaving]] = pred[leaving]
    if with_logits:  # fetched only when asked: the timed sweeps do without the transfer
      logits = np.asarray(jax.device_get(logits), np.float32)
      if out_logits is None:
        out_logits = np.zeros((batch, logits.shape[-1]), np.float32)
      out_logits[slots[leaving]] = logits[leaving]
    slots = np.where(leaving, -1, slots)
    live = np.flatnonzero(slots >= 0)
    if live.size == 0:
      break
    carry = (x, mask, state)
    new_size = _fit(buckets, live.size)
    if new_size < slots.size:
      idx = np.concatenate([live, np.full((new_size - live.size,), live[0])])
      carry = _gather(carry, jnp.asarray(idx, jnp.int32))
      slots = np.concatenate([slots[live], np.full((new_size - live.size,), -1)])
  if stats is not None:
    stats["row_layers"] = stats.get("row_layers", 0) + row_layers
    stats["example_layers"] = stats.get("example_layers", 0) + int(exit_layer.sum())
  return (exit_layer, preds, out_logits) if with_logits else (exit_layer, preds)
