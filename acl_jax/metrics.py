"""Exact evaluation metrics over a whole split, computed on the host from gathered predictions."""
import numpy as np


def confusion(preds: np.ndarray, labels: np.ndarray, num_labels: int) -> np.ndarray:
  """[num_labels, num_labels] counts, rows = true label, columns = prediction."""
  return np.bincount(labels * num_labels + preds, minlength=num_labels ** 2).reshape(
      num_labels, num_labels).astype(np.float64)


def accuracy(cm):
  return float(np.trace(cm) / max(cm.sum(), 1))


def macro_f1(cm):
  tp = np.diag(cm)
  denom = cm.sum(0) + cm.sum(1)
  f1 = np.where(denom > 0, 2 * tp / np.where(denom > 0, denom, 1), 0.0)
  # sklearn's macro average runs over labels present in truth or predictions.
  present = denom > 0
  return float(f1[present].mean()) if present.any() else 0.0


def binary_f1(cm):
  """F1 of the positive class (label 1), as GLUE reports for MRPC and QQP."""
  tp, fp, fn = cm[1, 1], cm[0, 1], cm[1, 0]
  return float(2 * tp / (2 * tp + fp + fn)) if tp > 0 else 0.0


def mcc(cm):
  """Matthews correlation (multi-class form, equal to sklearn's)."""
  t, p, c, s = cm.sum(1), cm.sum(0), np.trace(cm), cm.sum()
  cov_yy = s * s - np.dot(t, t)
  cov_pp = s * s - np.dot(p, p)
  if cov_yy == 0 or cov_pp == 0:
    return 0.0
  return float((c * s - np.dot(t, p)) / np.sqrt(cov_yy * cov_pp))


METRICS = {"accuracy": accuracy, "macro_f1": macro_f1, "f1": binary_f1, "mcc": mcc}


def compute(preds: np.ndarray, labels: np.ndarray, num_labels: int, names) -> dict[str, float]:
  """Named metrics of integer predictions against labels."""
  unknown = [n for n in names if n not in METRICS]
  if unknown:
    raise ValueError(f"Unknown metrics {unknown}; known: {sorted(METRICS)}.")
  cm = confusion(np.asarray(preds, np.int64), np.asarray(labels, np.int64), num_labels)
  return {n: METRICS[n](cm) for n in names}


def per_class(preds: np.ndarray, labels: np.ndarray, names) -> dict[str, dict[str, float]]:
  """{label name: {"precision", "recall", "f1", "support"}} for every class, in id order;
  a class never predicted (or never present) gets 0 where its ratio is undefined."""
  k = len(names)
  cm = confusion(np.asarray(preds, np.int64), np.asarray(labels, np.int64), k)
  tp, pred_n, true_n = np.diag(cm), cm.sum(0), cm.sum(1)
  safe = lambda a, b: float(a / b) if b > 0 else 0.0
  return {str(n): {"precision": safe(tp[i], pred_n[i]), "recall": safe(tp[i], true_n[i]),
                   "f1": safe(2 * tp[i], pred_n[i] + true_n[i]), "support": int(true_n[i])}
          for i, n in enumerate(names)}
