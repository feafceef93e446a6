"""Prototype-contrastive loss: each example against its batch's class prototypes.

Not a loss of the two papers; the README's "Adding a loss" walks through it as the example of
a new loss family (this file plus one entry in `acl_jax.train.objectives.LOSSES`).

For the classes present in the batch, the prototype c_k is the normalised mean of the unit
features z_j with y_j = k. Each example's logits are its cosines to the prototypes over a
temperature, z_i . c_k / tau, and its loss is the cross-entropy of its own class:

    l_i = -log( exp(z_i.c_{y_i}/tau) / sum_{k present} exp(z_i.c_k/tau) )

L_proto is the mean of l_i over the real examples. A batch of one class gives 0.
"""
from typing import Optional

import jax
import jax.numpy as jnp

from acl_jax.losses.contrastive import safe_normalize


def prototype_loss(feats: jax.Array, labels: jax.Array, num_classes: int, tau: float,
                   example_mask: Optional[jax.Array] = None) -> jax.Array:
  """Mean prototype-contrastive loss over the batch.

  Args:
    feats: [batch, d] features f (normalised here).
    labels: [batch] int labels in [0, num_classes).
    num_classes: K.
    tau: temperature > 0.
    example_mask: optional [batch] float, 0 for padding rows (they join no prototype and
      contribute no loss).

  Returns:
    A scalar; 0 for a batch without real examples.
  """
  z = safe_normalize(feats.astype(jnp.promote_types(feats.dtype, jnp.float32)))
  m = jnp.ones(z.shape[0], z.dtype) if example_mask is None else example_mask.astype(z.dtype)
  onehot = jax.nn.one_hot(labels, num_classes, dtype=z.dtype) * m[:, None]  # [batch, K]
  protos = safe_normalize(onehot.T @ z)  # [K, d]; absent classes stay 0
  present = jnp.sum(onehot, axis=0) > 0
  logits = jnp.where(present[None], z @ protos.T / tau, -jnp.inf)
  log_p = jax.nn.log_softmax(logits, axis=-1)
  nll = -jnp.sum(jnp.where(onehot > 0, log_p, 0.0), axis=-1)  # 0 for padding rows
  return jnp.sum(nll) / jnp.maximum(jnp.sum(m), 1.0)
