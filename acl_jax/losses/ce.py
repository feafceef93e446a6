"""Cross-entropy with optional class weights and padding masks (SPEC §2.1)."""
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np


def cross_entropy(
    logits: jax.Array,
    labels: jax.Array,
    class_weights: Optional[jax.Array] = None,
    example_mask: Optional[jax.Array] = None,
    axis_name: Optional[str] = None,
) -> jax.Array:
  """Weighted mean cross-entropy with torch `CrossEntropyLoss(weight=...)` semantics.

  The loss is sum_i w_{y_i} m_i ce_i / sum_i w_{y_i} m_i, where m is the example mask.
  With every weight 1 this is the plain mean over the unmasked examples. A batch whose
  weights all vanish gives 0 (not NaN).

  Args:
    logits: [batch, num_classes] unnormalised scores.
    labels: [batch] int class ids.
    class_weights: optional [num_classes] per-class weights.
    example_mask: optional [batch] bool or float; False/0 drops padding examples.
    axis_name: set when called inside `shard_map` (or a named `vmap`). The local value is
      then normalised by the global denominator, so `lax.pmean(loss, axis_name)` equals
      the loss of the global batch exactly, even with uneven masks or weights.

  Returns:
    Scalar float32 loss.
  """
  # Softmax in at least float32: bf16 logits lose too much in log-sum-exp.
  dtype = jnp.promote_types(logits.dtype, jnp.float32)
  logp = jax.nn.log_softmax(logits.astype(dtype), axis=-1)
  nll = -jnp.take_along_axis(logp, labels[:, None].astype(jnp.int32), axis=-1)[:, 0]
  weights = jnp.ones_like(nll)
  if class_weights is not None:
    weights = jnp.asarray(class_weights, dtype)[labels]
  if example_mask is not None:
    weights = weights * example_mask.astype(dtype)
  return weighted_mean(nll, weights, axis_name)


def weighted_mean(values: jax.Array, weights: Optional[jax.Array] = None,
                  axis_name: Optional[str] = None) -> jax.Array:
  """sum_i w_i v_i / sum_i w_i over the batch (the plain mean without weights); 0 if sum w = 0.

  With `axis_name` (inside `shard_map`), the local value is normalised by the global
  denominator, so `lax.pmean` of it is the global batch's weighted mean, even with uneven
  padding masks across devices.
  """
  weights = jnp.ones_like(values) if weights is None else weights.astype(values.dtype)
  num = jnp.sum(weights * values)
  den = jnp.sum(weights)
  if axis_name is not None:
    # pmean divides by the device count, so scale the global denominator back by it.
    num_devices = jax.lax.psum(1, axis_name)
    den = jax.lax.stop_gradient(jax.lax.psum(den, axis_name)) / num_devices
  safe_den = jnp.where(den > 0, den, 1.0)
  return jnp.where(den > 0, num / safe_den, 0.0)


def balanced_class_weights(labels: np.ndarray, num_classes: int) -> np.ndarray:
  """sklearn's "balanced" class weights, n_samples / (n_present * count_k).

  For every class present in `labels` this equals
  `sklearn.utils.class_weight.compute_class_weight("balanced", classes=np.unique(labels),
  y=labels)`; n_present is the number of distinct classes that occur. A class absent from
  `labels` gets weight 1.0: it cannot affect a loss over these labels, and a neutral
  weight keeps its examples counted if the weights are reused on other data (say a dev
  set), where 0 would silently drop them.

  Args:
    labels: [n] int class ids in [0, num_classes).
    num_classes: K.

  Returns:
    [num_classes] float32 weights.
  """
  labels = np.asarray(labels).astype(np.int64).reshape(-1)
  if labels.size == 0:
    raise ValueError("balanced_class_weights needs at least one label; got an empty array.")
  if labels.min() < 0 or labels.max() >= num_classes:
    raise ValueError(
        f"labels must lie in [0, {num_classes}) for num_classes={num_classes}; got range "
        f"[{labels.min()}, {labels.max()}]. Raise num_classes or fix the label map.")
  counts = np.bincount(labels, minlength=num_classes).astype(np.float64)
  present = counts > 0
  weights = np.ones(num_classes, np.float64)
  weights[present] = labels.size / (present.sum() * counts[present])
  return weights.astype(np.float32)
