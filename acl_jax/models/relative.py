"""MPNet's relative position bias: one [buckets, heads] table, shared by every layer.

Every attention score (q, k) of every layer gets the table's row for the bucket of the
relative position k - q (as T5 buckets it: exact up to a distance of 8 in each direction,
logarithmic up to 128, one bucket beyond). Positions are those inside each example, so a
packed row, whose examples restart at 0, gets each example's own bias.
"""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

# HF's MPNetEncoder.compute_position_bias always buckets with its default of 32 buckets and a
# maximum distance of 128, whatever the config's relative_attention_num_buckets (which sizes
# the table only); acl-jax does the same so that a checkpoint's table means what it meant.
NUM_BUCKETS = 32
MAX_DISTANCE = 128


def relative_bucket(relative_position: np.ndarray) -> np.ndarray:
  """int32 bucket of each relative position (key minus query), as HF's
  `MPNetEncoder.relative_position_bucket` computes it (tests/test_mpnet.py compares the two)."""
  n = -np.asarray(relative_position, np.int64)
  half = NUM_BUCKETS // 2
  ret = (n < 0).astype(np.int64) * half
  n = np.abs(n)
  max_exact = half // 2
  # HF's float32 arithmetic, reproduced; n = 0 (a small distance) is kept away from log(0).
  scaled = (np.log(np.maximum(n, 1).astype(np.float32) / np.float32(max_exact))
            / np.float32(math.log(MAX_DISTANCE / max_exact)) * np.float32(half - max_exact))
  large = np.minimum(max_exact + scaled.astype(np.int64), half - 1)
  return (ret + np.where(n < max_exact, n, large)).astype(np.int32)


@functools.lru_cache(maxsize=1)
def _bucket_lookup() -> np.ndarray:
  """[2 * MAX_DISTANCE + 1] buckets of the relative positions -MAX_DISTANCE..MAX_DISTANCE
  (beyond them the bucket no longer changes)."""
  table = relative_bucket(np.arange(-MAX_DISTANCE, MAX_DISTANCE + 1))
  table.flags.writeable = False
  return table


def buckets(positions: jax.Array | np.ndarray) -> jax.Array | np.ndarray:
  """[rows, seq] positions -> [rows, seq, seq] int32 bucket of each (query, key) pair.

  Integer arithmetic and a lookup only, so the buckets are the same on every backend; a numpy
  input (unpacked rows, whose positions are static) gives a numpy constant.
  """
  xp = np if isinstance(positions, np.ndarray) else jnp
  rel = positions[:, None, :] - positions[:, :, None]  # key minus query
  idx = xp.clip(rel, -MAX_DISTANCE, MAX_DISTANCE) + MAX_DISTANCE
  return xp.asarray(_bucket_lookup())[idx]
