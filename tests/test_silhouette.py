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


def test_defined_from_two_classes_to_n_minus_one():
  assert silhouette_lib.silhouette_defined(2, 3) and silhouette_lib.silhouette_defined(4, 5)
  assert not silhouette_lib.silhouette_defined(1, 5)
  assert not silhouette_lib.silhouette_defined(5, 5) and not silhouette_lib.silhouette_defined(2, 2)
  x, _ = _data(4, n=4)
  with pytest.raises(ValueError, match="got 4 classes for N=4"):
    silhouette_scores(x, np.arange(4))
  got = silhouette_scores(x[:3], np.array([0, 0, 1]))  # K = N - 1: defined
  assert np.isfinite(got["silhouette_micro"])


def test_pairs_short_rows_and_float32_match_sklearn_in_float64():
  """Classes of two members (a's divisor is 1), features of norm well below 1 and float32
  input, computed in float64."""
  x, y = _data(5, n=30, k=3)
  y[:2] = 7  # a class of exactly two members
  small = (0.01 * x).astype(np.float32)
  micro, macro = _sklearn_scores(small.astype(np.float64), y)
  got = silhouette_scores(small, y)
  assert got["silhouette_micro"] == pytest.approx(micro, abs=1e-12)
  assert got["silhouette_macro"] == pytest.approx(macro, abs=1e-12)


def test_features_and_labels_that_do_not_pair_are_refused():
  with pytest.raises(ValueError, match=r"feats must be \[N, hidden\] with N labels; got \(6,\)"):
    silhouette_scores(np.ones(6), np.array([0, 1, 0, 1, 0, 1]))
  with pytest.raises(ValueError, match="got \\(6, 2\\) and 5 labels"):
    silhouette_scores(np.ones((6, 2)), np.array([0, 1, 0, 1, 0]))
