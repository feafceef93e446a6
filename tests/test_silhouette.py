"""Silhouette scores against sklearn on normalised features."""
import numpy as np
import pytest
from sklearn.metrics import silhouette_samples

import acl_jax.losses.silhouette as silhouette_lib
from acl_jax.losses import silhouette_scores


def _sklearn_scores(x, labels):
  unit = x / np.linalg.norm(x, axis=1, keepdims=True)
  s = silhouette_samples(unit, labels, metric="euclidean")
  classes = np.unique(labels)
  return s.mean(), np.mean([s[labels == c].mean() for c in classes])


def _data(seed, n=60, hidden=8, k=4):
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, k, n)
  centres = rng.normal(size=(k, hidden))
  return centres[labels] + 0.8 * rng.normal(size=(n, hidden)), labels


def test_matches_sklearn():
  x, y = _data(0)
  micro, macro = _sklearn_scores(x, y)
  got = silhouette_scores(x, y)
  assert got["silhouette_micro"] == pytest.approx(micro, abs=1e-9)
  assert got["silhouette_macro"] == pytest.approx(macro, abs=1e-9)


def test_chunked_with_singleton_class_and_string_labels(monkeypatch):
  monkeypatch.setattr(silhouette_lib, "_CHUNK_ENTRIES", 37)  # forces many small chunks
  x, y = _data(1, n=40, k=3)
  y = np.array(["neg", "pos", "neu"])[y]
  y[5] = "rare"  # a class with a single member scores 0, as in sklearn
  micro, macro = _sklearn_scores(x, y)
  got = silhouette_scores(x, y)
  assert got["silhouette_micro"] == pytest.approx(micro, abs=1e-9)
  assert got["silhouette_macro"] == pytest.approx(macro, abs=1e-9)


def test_one_class_raises():
  x, _ = _data(2, n=10)
  with pytest.raises(ValueError, match="2 <= number of classes <= N - 1"):
    silhouette_scores(x, np.zeros(10, int))
