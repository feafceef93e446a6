"""Centre loss with EMA class centres: each example pulled towards its class's running centre.

Not a loss of the two papers; the README's "Adding a loss" walks through it as the example of
a loss family with state between steps (this file plus one entry in
`acl_jax.train.objectives.LOSSES`). Gated like ACL-Embed with `loss.gate=True`.

The state holds, per class k, the centre c_k (an exponential moving average of the unit
features z_j with y_j = k over the steps) and how many examples it has seen. A step first
moves the centres of the classes in its global batch, then scores each real example by its
squared distance to its class's moved centre, which carries no gradient:

    c_k <- momentum * c_k + (1 - momentum) * mean_{j: y_j = k} z_j   (c_k = the mean when new)
    L_center = mean_i || z_i - sg(c_{y_i}) ||^2

The centres are updated from the global batch's sums (a psum over the data axis), so every
device holds the same state and the run does not depend on the device count.
"""
from typing import Any, Optional

import jax
import jax.numpy as jnp

from acl_jax.losses.ce import weighted_mean
from acl_jax.losses.contrastive import safe_normalize
from acl_jax.models import label_embeddings

MOMENTUM = 0.9


def init_state(cfg, ctx, params) -> dict[str, jax.Array]:
  """No centres yet: {"centres": [K, d] zeros, "seen": [K] zeros}; d is the final exit's
  feature width (its classifier kernel's)."""
  d = label_embeddings(params, ctx.last_exit).shape[-1]
  return {"centres": jnp.zeros((ctx.num_labels, d), jnp.float32),
          "seen": jnp.zeros((ctx.num_labels,), jnp.float32)}


def update_centres(state: dict[str, jax.Array], feats: jax.Array, labels: jax.Array,
                   example_mask: Optional[jax.Array] = None, momentum: float = MOMENTUM,
                   axis_name: Optional[str] = None) -> dict[str, jax.Array]:
  """The state after one batch.

  Args:
    state: {"centres": [K, d], "seen": [K]}.
    feats: [batch, d] features (normalised here).
    labels: [batch] int labels in [0, K).
    example_mask: optional [batch] float, 0 for padding rows (they move no centre).
    momentum: the EMA's weight on the old centre.
    axis_name: inside `shard_map`, the data axis: the centres move by the global batch.

  Returns:
    The new state, without gradient.
  """
  z = safe_normalize(jax.lax.stop_gradient(feats).astype(jnp.float32))
  m = jnp.ones(z.shape[0], z.dtype) if example_mask is None else example_mask.astype(z.dtype)
  onehot = jax.nn.one_hot(labels, state["seen"].shape[0], dtype=z.dtype) * m[:, None]
  sums, counts = onehot.T @ z, jnp.sum(onehot, axis=0)  # [K, d], [K]
  if axis_name is not None:
    sums, counts = jax.lax.psum((sums, counts), axis_name)
  mean = sums / jnp.maximum(counts, 1.0)[:, None]
  old = state["centres"]
  moved = jnp.where((state["seen"] > 0)[:, None], momentum * old + (1 - momentum) * mean, mean)
  return {"centres": jnp.where((counts > 0)[:, None], moved, old),
          "seen": state["seen"] + counts}


def center_loss(feats: jax.Array, labels: jax.Array, centres: jax.Array,
                example_mask: Optional[jax.Array] = None,
                axis_name: Optional[str] = None) -> jax.Array:
  """Mean squared distance of the unit features to their class centres (no gradient to them).

  Args:
    feats: [batch, d] features (normalised here).
    labels: [batch] int labels.
    centres: [K, d] class centres.
    example_mask: optional [batch] float, 0 for padding rows.
    axis_name: inside `shard_map`, normalise by the global batch (`weighted_mean`).
  """
  z = safe_normalize(feats.astype(jnp.promote_types(feats.dtype, jnp.float32)))
  dist = jnp.sum(jnp.square(z - jax.lax.stop_gradient(centres)[labels]), axis=-1)
  return weighted_mean(dist, example_mask, axis_name)


def build(cfg, ctx):
  """The loss of a step (`objectives.AuxInputs` -> (loss, metrics, new state))."""
  def fn(x) -> tuple[jax.Array, dict[str, Any], dict[str, jax.Array]]:
    state = update_centres(x.state, x.feats, x.labels, x.mask, axis_name=ctx.axis_name)
    loss = center_loss(x.feats, x.labels, state["centres"], x.mask, axis_name=ctx.axis_name)
    return loss, {}, state
  return fn
