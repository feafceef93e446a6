"""A finished run's checkpoint evaluated on whole splits (eval.py), and results.json merged.

The run is opened by `run.open` (its config, its label names, its best or latest params) and
its splits scored by `train.scoring`, exactly over every example, per exit where the model has
several.
"""
import logging

from acl_jax import run as run_lib
from acl_jax.data import fingerprint
from acl_jax.train import scoring

log = logging.getLogger(__name__)


def evaluate_workdir(workdir: str, splits, dump_features: bool = False,
                     checkpoint: str = "best", per_class: bool = False) -> dict:
  """Metrics of a finished run's best (or latest) checkpoint on `splits`.

  Classes are named by the run's labels.json (the names its model was trained with), where
  the run has one. With `dump_features`, each split's features go to
  `workdir/features_{split}.npz`.

  Returns:
    {"checkpoint_step": step, split: `scoring.evaluate` of it, with features}.
  """
  splits = [s.strip() for s in splits]
  run = run_lib.open(workdir, checkpoint, splits=splits)
  trained_on = fingerprint.read(workdir)
  for diff in fingerprint.differences(trained_on or {}, run.setup.data):
    log.warning("The data scored here differs from what the run trained and selected on: %s. "
                "The scores are of the data as it is now.", diff)
  return {"checkpoint_step": run.step,
          **scoring.evaluate_splits(run.setup.scorer(), run.params, splits,
                                    dump_dir=workdir if dump_features else None,
                                    per_class=per_class)}


def changed_splits(workdir: str, results: dict) -> list[str]:
  """The splits of `results` (`evaluate_workdir`'s) scored on data other than the run
  trained on (their data_sha256 against the run's data record)."""
  trained_on = fingerprint.read(workdir) or {}
  return [split for split, r in results.items()
          if isinstance(r, dict) and split in trained_on and r.get("data_sha256")
          and r["data_sha256"] != trained_on[split]["sha256"]]


def merge_results(old: dict, new: dict) -> dict:
  """results.json after re-evaluating some splits: `new` replaces its entries, the rest stays.

  When `new` comes from another checkpoint than `old`, the old split metrics are stale and
  only the training record ("train") is kept.
  """
  if old.get("checkpoint_step") != new.get("checkpoint_step"):
    old = {k: v for k, v in old.items() if k == "train"}
  return {**old, **new}
