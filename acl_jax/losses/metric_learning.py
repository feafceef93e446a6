"""Metric-learning baselines from the G-Loss comparison: triplet and cosine (SPEC §2.7).

Unlike the contrastive and graph losses, the triplet loss works on the raw features f by
default: its margin of 5 (the sentence-transformers default the G-Loss comparison uses)
is meaningless on unit vectors, whose distances are at most 2, so every triplet would be
active and the loss would reduce to mean(d_ap - d_an) + 5. Pass `normalize=True` to use
z = f / ||f|| instead. The cosine loss is scale-invariant, so the choice does not arise.
"""
from typing import Optional

import jax
import jax.numpy as jnp

from acl_jax.losses.contrastive import masked_mean, safe_normalize


def _pairwise_distance(x: jax.Array) -> jax.Array:
  """[n, n] Euclidean distances with a zero diagonal and zero gradient at distance 0."""
  sq_norm = jnp.sum(x * x, axis=-1)
  sq = jnp.maximum(sq_norm[:, None] + sq_norm[None, :] - 2.0 * (x @ x.T), 0.0)
  sq = jnp.where(jnp.eye(x.shape[0], dtype=bool), 0.0, sq)
  # sqrt'(0) is infinite: take the sqrt of a dummy 1 at zero distance instead.
  positive = sq > 0
  return jnp.where(positive, jnp.sqrt(jnp.where(positive, sq, 1.0)), 0.0)


def triplet_loss(
    feats: jax.Array,
    labels: jax.Array,
    margin: float = 5.0,
    normalize: bool = False,
    example_mask: Optional[jax.Array] = None,
) -> jax.Array:
  """Batch-all triplet loss with Euclidean distance.

  Over all triplets (a, p, n) of distinct valid items with y_a = y_p != y_n,
  l = max(d(a, p) - d(a, n) + margin, 0). The loss is the mean of l over the active
  triplets (l > 0), and 0 with zero gradient when none is active.

  Args:
    feats: [batch, hidden] features f.
    labels: [batch] int labels.
    margin: triplet margin (5, as in the G-Loss comparison).
    normalize: use unit-normalised features (see the module docstring).
    example_mask: optional [batch] bool; False marks padding examples.

  Returns:
    Scalar float32 loss.
  """
  if float(margin) < 0:
    raise ValueError(f"triplet margin must be >= 0, got {margin!r}.")
  x = feats.astype(jnp.promote_types(feats.dtype, jnp.float32))
  if normalize:
    x = safe_normalize(x)
  n = x.shape[0]
  valid = jnp.ones((n,), bool) if example_mask is None else example_mask.astype(bool)
  dist = _pairwise_distance(x)
  same = labels[:, None] == labels[None, :]
  distinct = ~jnp.eye(n, dtype=bool)
  pair_ok = distinct & valid[:, None] & valid[None, :]
  pos_pair = pair_ok & same  # [a, p]
  neg_pair = pair_ok & ~same  # [a, n]; y_p = y_a != y_n also makes p != n.
  triplet_ok = pos_pair[:, :, None] & neg_pair[:, None, :]
  raw = dist[:, :, None] - dist[:, None, :] + margin
  return masked_mean(raw, triplet_ok & (raw > 0))


def cosine_loss(
    feats: jax.Array,
    labels: jax.Array,
    example_mask: Optional[jax.Array] = None,
) -> jax.Array:
  """MSE between cos(x_i, x_j) and 1[y_i = y_j] over all pairs i != j.

  The diagonal is left out: cos(x_i, x_i) = 1 always matches its target, so keeping it
  would only dilute the mean by a batch-size dependent factor. The mean over ordered
  pairs i != j equals the mean over unordered pairs. Zero vectors have cosine 0 with
  everything.

  Args:
    feats: [batch, hidden] features f.
    labels: [batch] int labels.
    example_mask: optional [batch] bool; False marks padding examples.

  Returns:
    Scalar float32 loss; 0 when fewer than two valid examples.
  """
  z = safe_normalize(feats.astype(jnp.promote_types(feats.dtype, jnp.float32)))
  n = z.shape[0]
  valid = jnp.ones((n,), bool) if example_mask is None else example_mask.astype(bool)
  pair_ok = ~jnp.eye(n, dtype=bool) & valid[:, None] & valid[None, :]
  target = (labels[:, None] == labels[None, :]).astype(z.dtype)
  err = jnp.square(z @ z.T - target)
  num_pairs = jnp.sum(pair_ok)
  total = jnp.sum(jnp.where(pair_ok, err, 0.0))
  return jnp.where(num_pairs > 0, total / jnp.maximum(num_pairs, 1), 0.0)
