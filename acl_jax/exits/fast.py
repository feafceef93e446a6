"""Early-exit inference that really skips layers, for any number of examples.

The examples run layer by layer, all of them at one layer before any goes on to the next.
Their hidden states, masks and patience states stay on the device in one pool. At each layer
the examples still running are taken from the pool in blocks of up to `block` rows (the
largest bucket), run through the layer, exit m's head and the policy rule, and written back;
then one host sync reads which of them leave. A block with fewer live examples is padded to
the smallest bucket that holds them (default: powers of two up to the block, then multiples
of max(8, block // 8)) with copies of a live row, so jit meets a bounded number of shapes:
one compiled layer per (policy, bucket, pool size, seq_len) serves every layer, since all
transformer layers have the same parameter shapes.

`early_exit_predict` runs one pool (a batch, or more rows). `early_exit_batches` pools the
rows of many batches of one sequence length, so that the blocks of the later layers stay
full however few examples of each batch are left: the compute run follows the layers the
examples need, and a dev set costs one host sync per layer and pool, not per batch.

The result equals `select_exit` on a full forward pass (dropout is off), up to float rounding
of values that land exactly on a threshold.
"""
import collections
import functools
from typing import Any, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from acl_jax.exits import policies
from acl_jax.models.bert import Embeddings, ExitHead, TransformerLayer, attention_bias, pool
from acl_jax.models.config import EncoderConfig

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


def _check_buckets(buckets: Optional[Sequence[int]], rows: int) -> tuple[int, ...]:
  if buckets is None:
    return default_buckets(rows)
  out = sorted(set(buckets))
  if not out or any(not isinstance(b, (int, np.integer)) or b < 1 for b in out):
    raise ValueError(f"buckets must be positive ints, got {buckets!r}.")
  return tuple(int(b) for b in out)


def _fit(buckets: tuple[int, ...], n: int) -> int:
  return next(b for b in buckets if b >= n)


@functools.lru_cache(maxsize=None)
def _embed_fn(cfg: EncoderConfig):
  @jax.jit
  def embed(emb_params, input_ids, token_type_ids):
    return Embeddings(cfg).apply({"params": emb_params}, input_ids, token_type_ids, False)
  return embed


@functools.lru_cache(maxsize=None)
def _block_fn(cfg: EncoderConfig, policy: str):
  """Jitted (layer_params, head_params, x, state, mask, idx, threshold) -> (x, state, done,
  pred, logits): pool rows `idx` [b] through one layer and its exit, written back in place.

  x: [pool, seq, hidden] and state (ExitState of [pool]) are donated; mask: [pool, seq].
  Rows repeated in `idx` (the padding of a short block) compute the same values, so which
  copy the scatter keeps does not matter. done, pred: [b]; logits: [b, K].
  """
  @functools.partial(jax.jit, donate_argnums=(2, 3))
  def block(layer_params, head_params, x_pool, state_pool, mask_pool, idx, threshold):
    take = lambda a: jnp.take(a, idx, axis=0)
    x, mask, state = take(x_pool), take(mask_pool), jax.tree.map(take, state_pool)
    x = TransformerLayer(cfg).apply({"params": layer_params}, x, attention_bias(mask))
    logits, _ = ExitHead(cfg).apply({"params": head_params}, pool(x, mask, cfg.exit_pooling))
    done, pred, state = policies.policy_step(logits, state, policy, threshold)
    put = lambda whole, part: whole.at[idx].set(part)
    return put(x_pool, x), jax.tree.map(put, state_pool, state), done, pred, logits
  return block


def _exit_params(cfg: EncoderConfig, params: Any):
  if cfg.exits != "all":
    raise ValueError(f"{policies.ONE_EXIT_MSG}; cfg.exits={cfg.exits!r}.")
  policies.check_num_exits(cfg.num_layers)
  missing = [m for m in range(1, cfg.num_layers + 1) if f"exit_{m}" not in params]
  if missing:
    raise ValueError(f"params lack exit heads for layers {missing}; {policies.ONE_EXIT_MSG}.")
  layers = [params["encoder"][f"layer_{i}"] for i in range(cfg.num_layers)]
  heads = [params[f"exit_{m}"] for m in range(1, cfg.num_layers + 1)]
  return params["encoder"]["embeddings"], layers, heads


def _check_inputs(input_ids, attention_mask, where: str = "early_exit_predict"
                  ) -> tuple[np.ndarray, np.ndarray]:
  """The inputs as arrays; `where` (the caller, and which batch) goes into the messages."""
  input_ids = np.asarray(input_ids)
  attention_mask = np.asarray(attention_mask)
  if input_ids.ndim != 2 or attention_mask.shape != input_ids.shape:
    raise ValueError(f"{where}: input_ids and attention_mask must both be [batch, seq]; got "
                     f"{input_ids.shape} and {attention_mask.shape}.")
  if input_ids.shape[0] == 0:
    raise ValueError(f"{where} got an empty batch; leave it out.")
  return input_ids, attention_mask


def _run_pool(cfg, exit_params, input_ids, attention_mask, token_type_ids, policy, threshold,
              buckets, num_live, with_logits):
  """Early exit of pool rows [0, num_live); rows after them are fillers that never run.

  Returns (exit_layer [num_live], preds [num_live], logits [num_live, K] or None, row_layers).
  """
  embeddings, layers, heads = exit_params
  block = buckets[-1]
  step = _block_fn(cfg, policy)
  size = input_ids.shape[0]
  x = _embed_fn(cfg)(embeddings, input_ids, token_type_ids)
  mask = jnp.asarray(attention_mask)
  state = policies.init_state(size)
  exit_layer = np.zeros((num_live,), np.int32)
  preds = np.zeros((num_live,), np.int32)
  out_logits = None
  row_layers = 0
  live = np.arange(num_live)
  for m in range(1, cfg.num_layers + 1):
    runs = []
    for start in range(0, live.size, block):
      rows = live[start:start + block]
      b = _fit(buckets, rows.size)
      idx = np.concatenate([rows, np.full((b - rows.size,), rows[0])]).astype(np.int32)
      x, state, done, pred, logits = step(layers[m - 1], heads[m - 1], x, state, mask,
                                          jnp.asarray(idx), threshold)
      runs.append((rows, done, pred, logits if with_logits else None))
      row_layers += b
    # One host sync per layer: every block's decisions, fetched together.
    fetched = jax.device_get([r[1:] for r in runs])
    still = []
    for (rows, _, _, _), (done, pred, logits) in zip(runs, fetched):
      k = rows.size
      leaving = np.asarray(done[:k]) | (m == cfg.num_layers)
      exit_layer[rows[leaving]] = m
      preds[rows[leaving]] = pred[:k][leaving]
      if with_logits:  # fetched only when asked: the timed sweeps do without the transfer
        if out_logits is None:
          out_logits = np.zeros((num_live, logits.shape[-1]), np.float32)
        out_logits[rows[leaving]] = np.asarray(logits[:k], np.float32)[leaving]
      still.append(rows[~leaving])
    live = np.concatenate(still)
    if live.size == 0:
      break
  return exit_layer, preds, out_logits, row_layers


def _add_stats(stats: Optional[dict], row_layers: int, exit_layer: np.ndarray) -> None:
  if stats is not None:
    stats["row_layers"] = stats.get("row_layers", 0) + row_layers
    stats["example_layers"] = stats.get("example_layers", 0) + int(exit_layer.sum())


def early_exit_predict(cfg: EncoderConfig, params: Any, input_ids, attention_mask,
                       token_type_ids, policy: str, threshold: Any,
                       buckets: Optional[Sequence[int]] = None,
                       stats: Optional[dict] = None, with_logits: bool = False
                       ) -> tuple[np.ndarray, ...]:
  """Early-exit predictions, running each example only up to the layer it leaves at.

  Args:
    cfg: encoder config with `exits="all"`.
    params: `Classifier(cfg)` params.
    input_ids: [n, seq] int, the pool of examples (a batch, or more rows).
    attention_mask: [n, seq] 0/1.
    token_type_ids: [n, seq] int, or None.
    policy: a key of `POLICIES`.
    threshold: the policy's threshold (see `select_exit`).
    buckets: the row counts one layer call may run; the largest is the block, the most rows
      one call takes. None for `default_buckets(n)`: the whole pool in one call per layer.
    stats: if a dict, "row_layers" (rows run, padding copies included, summed over layers)
      and "example_layers" (the layers each of the n input rows needed, summed) are added to
      it: their ratio is the compute the bucketing wastes.
    with_logits: also return the logits of the exit each example left at.

  Returns:
    exit_layer: [n] int32 numpy, 1-based layer each example left at.
    preds: [n] int32 numpy, the argmax of that exit.
    logits: [n, K] float32 numpy, that exit's logits (with_logits only).
  """
  threshold = policies.check_threshold(policy, threshold)
  exit_params = _exit_params(cfg, params)
  input_ids, attention_mask = _check_inputs(input_ids, attention_mask)
  n = input_ids.shape[0]
  tt = None if token_type_ids is None else np.asarray(token_type_ids)
  exit_layer, preds, logits, row_layers = _run_pool(
      cfg, exit_params, input_ids, attention_mask, tt, policy, threshold,
      _check_buckets(buckets, n), n, with_logits)
  _add_stats(stats, row_layers, exit_layer)
  return (exit_layer, preds, logits) if with_logits else (exit_layer, preds)


def pool_size(n: int, block: int, max_rows: int) -> int:
  """Rows of the device pool that holds n examples: `block` times a power of two, capped at
  max_rows rounded up to a block, so each sequence length meets a few pool shapes."""
  blocks = -(-n // block)
  return block * min(1 << (blocks - 1).bit_length(), -(-max_rows // block))


def early_exit_batches(cfg: EncoderConfig, params: Any,
                       batches: Sequence[Mapping[str, np.ndarray]], policy: str,
                       threshold: Any, block: Optional[int] = None, max_pool_rows: int = 1024,
                       stats: Optional[dict] = None, with_logits: bool = False
                       ) -> list[tuple[np.ndarray, ...]]:
  """`early_exit_predict` over many batches, with their rows pooled by sequence length.

  The rows of all batches of one sequence length run as pools of up to `max_pool_rows`, in
  layer calls of at most `block` rows (default: the largest batch), so a later layer's calls
  stay full however few examples of each batch are left. Every row runs, a batch's padding
  rows included, as in the full model.

  Args:
    batches: dicts with input_ids and attention_mask [b, seq], and token_type_ids (or None).
    block: rows per layer call; None for the largest batch.
    max_pool_rows: the most rows held on the device at once.
    the rest: as for `early_exit_predict`.

  Returns:
    For each batch, what `early_exit_predict` gives for it alone: (exit_layer, preds) or
    (exit_layer, preds, logits), each [b, ...].
  """
  threshold = policies.check_threshold(policy, threshold)
  exit_params = _exit_params(cfg, params)
  checked = [_check_inputs(b["input_ids"], b["attention_mask"], f"early_exit_batches (batch {i})")
             for i, b in enumerate(batches)]
  if not checked:
    return []
  block = block or max(ids.shape[0] for ids, _ in checked)
  buckets = default_buckets(block)
  sizes = [ids.shape[0] for ids, _ in checked]
  layer_out = [np.zeros((b,), np.int32) for b in sizes]
  pred_out = [np.zeros((b,), np.int32) for b in sizes]
  logit_out: list[Optional[np.ndarray]] = [None] * len(sizes)
  by_seq = collections.defaultdict(list)
  for i, (ids, _) in enumerate(checked):
    by_seq[ids.shape[1]].append(i)
  for group in by_seq.values():
    ids = np.concatenate([checked[i][0] for i in group])
    mask = np.concatenate([checked[i][1] for i in group])
    tt = np.concatenate([np.zeros_like(checked[i][0]) if batches[i].get("token_type_ids") is None
                         else np.asarray(batches[i]["token_type_ids"]) for i in group])
    owner = np.concatenate([np.full((sizes[i],), i) for i in group])
    row = np.concatenate([np.arange(sizes[i]) for i in group])
    for start in range(0, len(ids), max_pool_rows):
      n = min(max_pool_rows, len(ids) - start)
      rows = start + np.arange(pool_size(n, block, max_pool_rows)) % n  # fillers never run
      layer, preds, logits, row_layers = _run_pool(
          cfg, exit_params, ids[rows], mask[rows], tt[rows], policy, threshold, buckets, n,
          with_logits)
      _add_stats(stats, row_layers, layer)
      for i in group:
        mine = owner[start:start + n] == i
        at = row[start:start + n][mine]
        layer_out[i][at], pred_out[i][at] = layer[mine], preds[mine]
        if with_logits and mine.any():
          if logit_out[i] is None:
            logit_out[i] = np.zeros((sizes[i], logits.shape[-1]), np.float32)
          logit_out[i][at] = logits[mine]
  if with_logits:
    return list(zip(layer_out, pred_out, logit_out))
  return list(zip(layer_out, pred_out))
