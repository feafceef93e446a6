"""Metrics against sklearn."""
import numpy as np
import pytest
from sklearn import metrics as skm

from acl_jax import metrics


@pytest.mark.parametrize("k", [2, 5])
def test_metrics_match_sklearn(k):
  rng = np.random.default_rng(k)
  y = rng.integers(0, k, 300)
  p = np.where(rng.random(300) < 0.6, y, rng.integers(0, k, 300))
  got = metrics.compute(p, y, k, ["accuracy", "macro_f1", "mcc"])
  assert got["accuracy"] == pytest.approx(skm.accuracy_score(y, p))
  assert got["macro_f1"] == pytest.approx(skm.f1_score(y, p, average="macro"))
  assert got["mcc"] == pytest.approx(skm.matthews_corrcoef(y, p))
  if k == 2:
    assert metrics.compute(p, y, k, ["f1"])["f1"] == pytest.approx(skm.f1_score(y, p))


def test_absent_class_and_degenerate():
  y = np.array([0, 0, 1, 1])
  p = np.array([0, 0, 0, 0])
  got = metrics.compute(p, y, 3, ["macro_f1", "mcc", "f1"])
  assert got["macro_f1"] == pytest.approx(skm.f1_score(y, p, average="macro"))
  assert got["mcc"] == 0.0 and got["f1"] == 0.0
  with pytest.raises(ValueError, match="Unknown metrics"):
    metrics.compute(p, y, 2, ["auc"])


def test_per_class_matches_sklearn():
  rng = np.random.default_rng(0)
  y = rng.integers(0, 3, 200)
  p = np.where(rng.random(200) < 0.6, y, rng.integers(0, 2, 200))  # class 2 rarely predicted
  got = metrics.per_class(p, y, ["a", "b", "c"])
  prec, rec, f1, sup = skm.precision_recall_fscore_support(y, p, labels=[0, 1, 2],
                                                           zero_division=0)
  assert list(got) == ["a", "b", "c"]
  for i, name in enumerate(got):
    assert got[name]["precision"] == pytest.approx(prec[i])
    assert got[name]["recall"] == pytest.approx(rec[i])
    assert got[name]["f1"] == pytest.approx(f1[i])
    assert got[name]["support"] == sup[i]
  assert metrics.per_class(np.array([0]), np.array([0]), ["x", "y"])["y"] == {
      "precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}


def test_small_and_empty_splits():
  """Counts of 0 and 1 at every guard: one example, a class seen once, nothing at all."""
  one = lambda n: metrics.compute(np.array([1]), np.array([1]), 2, [n])[n]
  assert one("accuracy") == 1.0 and one("f1") == 1.0
  # A class that occurs once in truth and is never predicted still counts in the average.
  y, p = np.array([0, 0, 1]), np.array([0, 0, 0])
  assert metrics.compute(p, y, 2, ["macro_f1"])["macro_f1"] == pytest.approx(
      skm.f1_score(y, p, average="macro"))
  # No positive anywhere: F1 is 0, not 0/0.
  assert metrics.compute(np.array([0, 0]), np.array([0, 0]), 2, ["f1"])["f1"] == 0.0
  # One true class, varied predictions: MCC is 0 (sklearn's convention), not a division by 0.
  y, p = np.array([0, 0, 0]), np.array([0, 1, 0])
  assert metrics.compute(p, y, 2, ["mcc"])["mcc"] == skm.matthews_corrcoef(y, p) == 0.0
  empty = metrics.compute(np.array([], np.int64), np.array([], np.int64), 2,
                          ["accuracy", "macro_f1", "f1", "mcc"])
  assert empty == {"accuracy": 0.0, "macro_f1": 0.0, "f1": 0.0, "mcc": 0.0}
  got = metrics.per_class(np.array([0, 1]), np.array([0, 1]), ["a", "b"])
  assert got["b"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1}


def test_narrow_integer_inputs_do_not_overflow():
  """Labels stored as uint8 (20 classes): label * num_labels + pred exceeds 255."""
  rng = np.random.default_rng(1)
  y = rng.integers(0, 20, 400).astype(np.uint8)
  p = np.where(rng.random(400) < 0.5, y, rng.integers(0, 20, 400)).astype(np.uint8)
  got = metrics.compute(p, y, 20, ["accuracy", "macro_f1"])
  assert got["accuracy"] == pytest.approx(skm.accuracy_score(y, p))
  assert got["macro_f1"] == pytest.approx(skm.f1_score(y, p, average="macro"))
  rec = skm.recall_score(y, p, labels=range(20), average=None, zero_division=0)
  per = metrics.per_class(p, y, [str(i) for i in range(20)])
  assert [per[str(i)]["recall"] for i in range(20)] == pytest.approx(list(rec))
