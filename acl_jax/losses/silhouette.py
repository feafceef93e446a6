"""Silhouette scores of exit features, an embedding-quality diagnostic (host-side NumPy)."""
import numpy as np

# Distance entries held at once (float64): 2**22 entries is 32 MiB whatever N is.
_CHUNK_ENTRIES = 1 << 22


def silhouette_defined(num_classes: int, num_samples: int) -> bool:
  """Whether a silhouette exists: it needs 2 <= number of classes <= N - 1."""
  return 2 <= num_classes <= num_samples - 1


def silhouette_scores(feats: np.ndarray, labels: np.ndarray) -> dict:
  """Micro and macro silhouette of L2-normalised features under Euclidean distance.

  Per sample, s = (b - a) / max(a, b) with a the mean distance to the other members of
  its class and b the smallest mean distance to another class; s = 0 for a sample alone
  in its class. This matches `sklearn.metrics.silhouette_samples` on the normalised
  features, computed in row chunks so N = 10k needs no N x N matrix.

  Args:
    feats: [N, hidden] features.
    labels: [N] class labels (any hashable dtype numpy can unique).

  Returns:
    {"silhouette_micro": mean of s over samples,
     "silhouette_macro": mean over classes of the class's mean s}.
  """
  x = np.asarray(feats, np.float64)
  classes, y = np.unique(np.asarray(labels).reshape(-1), return_inverse=True)
  n, num_classes = x.shape[0], classes.size
  if x.ndim != 2 or y.size != n:
    raise ValueError(f"feats must be [N, hidden] with N labels; got {x.shape} and {y.size} labels.")
  if not silhouette_defined(num_classes, n):
    raise ValueError(
        f"silhouette needs 2 <= number of classes <= N - 1; got {num_classes} classes for "
        f"N={n} samples.")
  x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
  sq_norm = np.sum(x * x, axis=1)
  onehot = np.zeros((n, num_classes))
  onehot[np.arange(n), y] = 1.0
  counts = onehot.sum(axis=0)

  scores = np.empty(n)
  step = max(1, _CHUNK_ENTRIES // n)
  for start in range(0, n, step):
    rows = np.arange(start, min(start + step, n))
    sq = sq_norm[rows, None] + sq_norm[None, :] - 2.0 * (x[rows] @ x.T)
    dist = np.sqrt(np.maximum(sq, 0.0))
    # The Gram form leaves ~1e-8 on the diagonal, which sqrt magnifies to ~1e-4.
    dist[np.arange(rows.size), rows] = 0.0
    class_sums = dist @ onehot  # [chunk, classes]
    own = y[rows]
    own_count = counts[own]
    a = class_sums[np.arange(rows.size), own] / np.maximum(own_count - 1, 1)
    mean_other = class_sums / counts[None, :]
    mean_other[np.arange(rows.size), own] = np.inf
    b = mean_other.min(axis=1)
    denom = np.maximum(a, b)
    s = np.where(denom > 0, (b - a) / np.where(denom > 0, denom, 1.0), 0.0)
    scores[rows] = np.where(own_count > 1, s, 0.0)

  per_class = np.bincount(y, weights=scores, minlength=num_classes) / counts
  return {
      "silhouette_micro": float(scores.mean()),
      "silhouette_macro": float(per_class.mean()),
  }
