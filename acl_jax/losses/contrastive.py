"""Supervised contrastive losses: SCL, ACL-Embed and ACL-CL (SPEC §2.2, §2.3, §2.5).

All three are one masked supervised-contrastive function, `masked_supcon`, applied to
different item sets:

- SCL: the N batch samples.
- ACL-Embed: the N samples plus the K normalised label embeddings (item k has label k).
- ACL-CL: student samples, student label embeddings, teacher samples and teacher label
  embeddings; only student items are anchors and teacher items are under stop-gradient.
"""
from typing import Optional

import jax
import jax.numpy as jnp

from acl_jax.names import check_known

ANCHOR_MODES = ("all", "samples")


def _is_concrete(x) -> bool:
  return not isinstance(x, jax.core.Tracer)


def check_tau(tau) -> None:
  """Raises ValueError unless the temperature is positive (skipped for traced values)."""
  if _is_concrete(tau) and not float(tau) > 0:
    raise ValueError(
        f"tau (the contrastive temperature) must be > 0, got {tau!r}. Use a positive value; "
        "loss.tau's default is SPEC §2.2's, and Gunel et al. tune it in {0.1, ..., 0.9}.")


def check_anchors(anchors: str) -> None:
  """Raises ValueError for an anchor mode other than 'all' or 'samples'."""
  check_known(anchors, ANCHOR_MODES, "anchors")


def at_least_f32(x: jax.Array) -> jax.Array:
  """x in float32, or in its own dtype where that is wider (float64 stays float64).

  Every loss upcasts its features with this before normalising them or forming logits: a
  bfloat16 norm keeps 8 significant bits, so a unit vector normalised in bfloat16 is off by up
  to 2**-8 and the logits z_i.z_j / tau by about that over tau.
  """
  return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def safe_normalize(x: jax.Array, eps: float = 1e-12) -> jax.Array:
  """Rows scaled to unit length; a zero row stays zero with a finite gradient.

  Args:
    x: [n, d].
    eps: norms below eps are treated as eps.

  Returns:
    [n, d], same dtype as x.
  """
  # max() before sqrt: sqrt'(0) is infinite, and 0 * inf would give NaN gradients.
  sq = jnp.sum(jnp.square(x), axis=-1, keepdims=True)
  return x / jnp.sqrt(jnp.maximum(sq, eps * eps))


def masked_mean(values: jax.Array, mask: jax.Array) -> jax.Array:
  """Mean of `values` where `mask`; 0 with zero gradient when nothing is selected."""
  count = jnp.sum(mask)
  total = jnp.sum(jnp.where(mask, values, 0.0))
  return jnp.where(count > 0, total / jnp.maximum(count, 1), 0.0)


def masked_supcon(
    z: jax.Array,
    labels: jax.Array,
    anchor_mask: jax.Array,
    tau: float,
    item_mask: Optional[jax.Array] = None,
    stop_grad_mask: Optional[jax.Array] = None,
) -> jax.Array:
  """Supervised contrastive loss of Khosla et al. / Gunel et al. over a masked item set.

  For each anchor i (anchor_mask[i] and item_mask[i]):
    P(i) = {j != i : y_j = y_i, item_mask[j]},  A(i) = {a != i : item_mask[a]},
    l_i = -1/|P(i)| sum_{p in P(i)} log( exp(z_i.z_p/tau) / sum_{a in A(i)} exp(z_i.z_a/tau) ).
  The loss is the mean of l_i over anchors with |P(i)| > 0. With no such anchor it is 0,
  and its gradient is exactly 0 (never NaN).

  Args:
    z: [n, d] item vectors, expected unit length (not renormalised here).
    labels: [n] int labels.
    anchor_mask: [n] bool; which items act as anchors.
    tau: temperature > 0.
    item_mask: optional [n] bool; False removes an item everywhere (padding).
    stop_grad_mask: optional [n] bool; True items pass no gradient (teachers in ACL-CL).

  Returns:
    Scalar float32 loss.
  """
  n = z.shape[0]
  # Logits are at most 1/tau apart, but their log-sum-exp still wants float32 or better.
  z = at_least_f32(z)
  if stop_grad_mask is not None:
    z = jnp.where(stop_grad_mask[:, None], jax.lax.stop_gradient(z), z)
  if item_mask is None:
    item_mask = jnp.ones((n,), bool)
  item_mask = item_mask.astype(bool)
  anchor_mask = anchor_mask.astype(bool) & item_mask

  not_self = ~jnp.eye(n, dtype=bool)
  contrast = not_self & item_mask[None, :]
  positive = contrast & (labels[:, None] == labels[None, :])

  logits = (z @ z.T) / tau
  # A finite fill, not -inf: an anchor with an empty contrast set would otherwise give
  # -inf - (-inf) = NaN. `where` also routes zero gradient to the filled entries.
  fill = jnp.finfo(logits.dtype).min / 2
  masked_logits = jnp.where(contrast, logits, fill)
  log_denom = jax.nn.logsumexp(masked_logits, axis=-1, keepdims=True)
  log_prob = jnp.where(positive, logits - log_denom, 0.0)

  num_pos = jnp.sum(positive, axis=-1)
  per_anchor = -jnp.sum(log_prob, axis=-1) / jnp.maximum(num_pos, 1)
  return masked_mean(per_anchor, anchor_mask & (num_pos > 0))


def scl_loss(
    feats: jax.Array,
    labels: jax.Array,
    tau: float,
    example_mask: Optional[jax.Array] = None,
) -> jax.Array:
  """SCL of Gunel et al. 2021 on the batch (SPEC §2.2).

  Args:
    feats: [batch, hidden] exit features f, normalised here.
    labels: [batch] int labels.
    tau: temperature > 0.
    example_mask: optional [batch] bool; False marks padding examples.

  Returns:
    Scalar loss; 0 with zero gradient when no example has a same-class partner.
  """
  check_tau(tau)
  z = safe_normalize(at_least_f32(feats))
  anchors = jnp.ones(labels.shape, bool)
  return masked_supcon(z, labels, anchors, tau, item_mask=example_mask)


def acl_embed_loss(
    feats: jax.Array,
    labels: jax.Array,
    label_emb: jax.Array,
    tau: float,
    anchors: str = "all",
    example_mask: Optional[jax.Array] = None,
) -> jax.Array:
  """ACL-Embed: SCL over the batch extended by the K label embeddings (SPEC §2.3).

  Item B + k is the normalised label embedding l_k carrying label k. Gradients reach the
  classifier weights through l_k. A sample always has its class's embedding as a
  positive; a label embedding is an anchor with a positive only when its class occurs in
  the batch, so classes absent from the batch add negatives but no anchor terms.

  Args:
    feats: [batch, hidden] exit features f, normalised here.
    labels: [batch] int labels in [0, K).
    label_emb: [K, hidden] label embeddings l_k (columns of the exit's kernel, transposed).
    tau: temperature > 0.
    anchors: "all" (samples and label embeddings, the default) or "samples".
    example_mask: optional [batch] bool; False marks padding examples.

  Returns:
    Scalar loss.
  """
  check_tau(tau)
  check_anchors(anchors)
  batch, num_classes = feats.shape[0], label_emb.shape[0]
  z = jnp.concatenate([safe_normalize(at_least_f32(feats)),
                       safe_normalize(at_least_f32(label_emb))])
  classes = jnp.arange(num_classes, dtype=jnp.int32)
  item_labels = jnp.concatenate([labels.astype(jnp.int32), classes])
  anchor_mask = jnp.concatenate([
      jnp.ones((batch,), bool),
      jnp.full((num_classes,), anchors == "all"),
  ])
  item_mask = None
  if example_mask is not None:
    item_mask = jnp.concatenate([example_mask.astype(bool), jnp.ones((num_classes,), bool)])
  return masked_supcon(z, item_labels, anchor_mask, tau, item_mask=item_mask)


def acl_cl_loss(
    student_feats: jax.Array,
    student_label_emb: jax.Array,
    teacher_feats: jax.Array,
    teacher_label_emb: jax.Array,
    labels: jax.Array,
    tau: float,
    teacher_grad: bool = False,
    example_mask: Optional[jax.Array] = None,
) -> jax.Array:
  """ACL-CL: cross-layer contrastive distillation for one student exit (SPEC §2.5).

  The item set is [student samples, student label embeddings, teacher samples, teacher
  label embeddings], 2B + 2K items. Anchors are the student items only; teacher items
  act as positives and negatives under stop-gradient unless `teacher_grad`.

  Args:
    student_feats: [batch, hidden] exit-m features.
    student_label_emb: [K, hidden] exit-m label embeddings.
    teacher_feats: [batch, hidden] last-exit features.
    teacher_label_emb: [K, hidden] last-exit label embeddings.
    labels: [batch] int labels in [0, K).
    tau: temperature > 0.
    teacher_grad: let gradients flow into the teacher items too.
    example_mask: optional [batch] bool; False marks padding examples (both copies).

  Returns:
    Scalar loss.
  """
  check_tau(tau)
  batch, num_classes = student_feats.shape[0], student_label_emb.shape[0]
  parts = [student_feats, student_label_emb, teacher_feats, teacher_label_emb]
  z = jnp.concatenate([safe_normalize(at_least_f32(p)) for p in parts])
  classes = jnp.arange(num_classes, dtype=jnp.int32)
  labels = labels.astype(jnp.int32)
  item_labels = jnp.concatenate([labels, classes, labels, classes])
  is_student = jnp.concatenate([
      jnp.ones((batch + num_classes,), bool),
      jnp.zeros((batch + num_classes,), bool),
  ])
  item_mask = None
  if example_mask is not None:
    ones = jnp.ones((num_classes,), bool)
    example_mask = example_mask.astype(bool)
    item_mask = jnp.concatenate([example_mask, ones, example_mask, ones])
  stop_grad_mask = None if teacher_grad else ~is_student
  return masked_supcon(
      z, item_labels, is_student, tau, item_mask=item_mask, stop_grad_mask=stop_grad_mask)
