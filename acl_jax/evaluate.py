"""A finished run's checkpoints evaluated on whole splits (eval.py), and results.json merged.

`evaluate_workdir` rebuilds a finished run from its config, reads its best (or latest)
checkpoint and scores its splits with `train.scoring`.
"""
import logging

from acl_jax import provenance
from acl_jax.train import checkpoint as ckpt_lib
from acl_jax.train import scoring, step as step_lib
from acl_jax.train.setup import build

log = logging.getLogger(__name__)


def open_workdir(config, workdir: str, splits=()):
  """(setup, checkpoints, params restore target) of a finished run, rebuilt from its config.

  Evaluation restores the params alone, so a run whose optimizer state this code no longer
  builds (an optimizer change since) still evaluates.
  """
  # Checked before the model and data load: a run restored from the records archive, or one
  # whose checkpoints were pruned, fails at once.
  if not (provenance.checkpoint_steps(workdir, "best") or provenance.checkpoint_steps(workdir)):
    raise FileNotFoundError(
        f"No checkpoint in {workdir}: train it first (a run restored from a records archive, "
        "or pruned, keeps its results but not its weights).")
  setup = build(config, splits)
  ckpts = ckpt_lib.Checkpoints(workdir, create=False)
  if not ckpts.has_checkpoint():
    ckpts.close()
    raise FileNotFoundError(f"No checkpoint in {workdir}; train first.")
  return setup, ckpts, step_lib.replicate(setup.params, setup.mesh)


def merge_results(old: dict, new: dict) -> dict:
  """results.json after re-evaluating some splits: `new` replaces its entries, the rest stays.

  When `new` comes from another checkpoint than `old`, the old split metrics are stale and
  only the training record ("train") is kept.
  """
  if old.get("checkpoint_step") != new.get("checkpoint_step"):
    old = {k: v for k, v in old.items() if k == "train"}
  return {**old, **new}


def evaluate_workdir(config, workdir: str, splits, dump_features: bool = False,
                     checkpoint: str = "best", per_class: bool = False) -> dict:
  """Rebuilds the model of a finished run and evaluates its best (or latest) checkpoint.

  Classes are named by the run's labels.json (the names its model was trained with), where
  the run has one. With `dump_features`, each split's features go to
  `workdir/features_{split}.npz`."""
  splits = [s.strip() for s in splits]
  setup, ckpts, target = open_workdir(config, workdir, splits)
  names = provenance.read_labels(workdir)
  # Another label count is a model that does not fit the checkpoint, which the restore names.
  if names not in (None, setup.task.label_names) and len(names) == setup.task.num_labels:
    log.warning("%s was trained with the labels %s; the task's data now names them %s.",
                workdir, names, setup.task.label_names)
    setup.task.label_names = names
  try:
    restored = ckpts.restore_selected(target, checkpoint)
  finally:
    ckpts.close()
  if restored is None:
    raise FileNotFoundError("No checkpoint to evaluate in this workdir; train first.")
  params, meta = restored
  return {"checkpoint_step": int(meta["step"]),
          **scoring.evaluate_splits(setup.scorer(), params, splits,
                                    dump_dir=workdir if dump_features else None,
                                    per_class=per_class)}
