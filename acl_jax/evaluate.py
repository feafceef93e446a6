"""Evaluation of a model's params on whole splits, and of a finished run's workdir.

Metrics are exact over every example of a split (padding rows masked out), per exit where the
model has several; `evaluate_workdir` rebuilds a finished run from its config and reads its
best (or latest) checkpoint.
"""
import logging
import os

import jax
import numpy as np

from acl_jax import data as data_lib
from acl_jax import metrics as metrics_lib
from acl_jax import provenance
from acl_jax.provenance import is_main
from acl_jax.train import checkpoint as ckpt_lib
from acl_jax.train import step as step_lib
from acl_jax.train.setup import Setup, build, check_splits, subsample

log = logging.getLogger(__name__)


def predict_split(setup: Setup, eval_step, params, ds, with_features: bool = False):
  """Predictions of every exit for every example of `ds`, in dataset order.

  Returns:
    preds: [num_exits, n] int argmax predictions.
    feats: [n, d] last-exit features, or None.
  """
  preds, feats, index = [], [], []
  pad = setup.tokenizer.pad_token_id or 0
  size, pi, pc = setup.config.eval_batch_size, jax.process_index(), jax.process_count()
  batches = (data_lib.packed_eval_batches(ds, size, setup.packing, pi, pc, pad)
             if setup.packing is not None else
             data_lib.eval_batches(ds, size, setup.boundaries, pi, pc, pad))
  for batch in batches:
    batch["index"] = batch["index"].astype(np.int32)
    sharded = step_lib.shard_batch(batch, setup.mesh)
    logits, f = eval_step(params, sharded)
    # Rows come back in global eval-batch order; `index` (-1 = padding) maps them to examples.
    index.append(step_lib.to_host(sharded["index"]))
    preds.append(step_lib.to_host(logits).argmax(-1))
    if with_features:
      feats.append(step_lib.to_host(f)[-1])
  index = np.concatenate(index)
  keep = index >= 0
  n = len(ds)
  if keep.sum() != n or len(np.unique(index[keep])) != n:
    raise RuntimeError(f"Evaluation covered {len(np.unique(index[keep]))} of {n} examples.")
  inv = np.argsort(index[keep])  # eval order -> dataset order
  out_preds = np.concatenate(preds, axis=1)[:, keep][:, inv]
  out_feats = np.concatenate(feats)[keep][inv] if with_features else None
  return out_preds, out_feats


def evaluate(setup: Setup, eval_step, params, split: str, with_features: bool = False,
             dump_path: str | None = None, per_class: bool = False) -> dict:
  """Exact metrics of every exit over a whole split (padding rows masked out).

  Returns a dict with the task's metrics of the last exit, `exit_{m}/{metric}` for every exit
  when there are several, silhouette scores of the last exit's features when asked, and with
  `per_class` the last exit's {label name: precision, recall, f1, support} as "per_class".
  With `dump_path` (needs with_features), process 0 saves the last exit's features, labels,
  predictions and label embeddings there (npz) for plots such as t-SNE.
  """
  ds = setup.tok[split]
  k = setup.task.num_labels
  all_preds, feats = predict_split(setup, eval_step, params, ds, with_features)
  labels = np.asarray(ds["label"], np.int64)
  names = setup.task.metrics
  out = metrics_lib.compute(all_preds[-1], labels, k, names)
  if per_class:
    out["per_class"] = metrics_lib.per_class(all_preds[-1], labels, setup.task.label_names)
  exits = setup.model.cfg.exit_layers
  if len(exits) > 1:
    for e, m in enumerate(exits):
      for name, v in metrics_lib.compute(all_preds[e], labels, k, names).items():
        out[f"exit_{m}/{name}"] = v
    for name in names:  # what multi-exit runs select checkpoints on
      out[f"exit_mean/{name}"] = float(np.mean([out[f"exit_{m}/{name}"] for m in exits]))
  if with_features:
    # pylint: disable-next=import-outside-toplevel
    from acl_jax.losses import silhouette_defined, silhouette_scores
    num_classes = len(np.unique(labels))
    if silhouette_defined(num_classes, len(labels)):
      out.update(silhouette_scores(feats, labels))
    else:  # e.g. a small max_eval_examples: the run's other metrics still count
      log.warning("No silhouette on %s: it needs 2 to N-1 classes, and the split has %d "
                  "classes in %d examples.", split, num_classes, len(labels))
    if dump_path and is_main():
      from acl_jax.models import label_embeddings  # pylint: disable=import-outside-toplevel
      np.savez(dump_path, feats=feats, labels=labels, preds=all_preds[-1],
               label_emb=np.asarray(label_embeddings(jax.device_get(params), exits[-1])),
               label_names=np.asarray(setup.task.label_names))
  out["num_examples"] = len(ds)
  return out


def evaluate_best(setup: Setup, ckpts, target_params, eval_step, splits, dump_dir=None,
                  checkpoint: str = "best", per_class: bool = False) -> dict:
  """Evaluates the best checkpoint (the latest when none is marked best) on `splits`.

  checkpoint="latest" evaluates the last saved checkpoint instead: the run's final weights,
  free of the choice model selection made on dev. With `dump_dir`, each split's features go
  to `dump_dir/features_{split}.npz`.
  """
  restored = ckpts.restore_selected(target_params, checkpoint)
  if restored is None:
    raise FileNotFoundError("No checkpoint to evaluate in this workdir; train first.")
  params, meta = restored
  out = {"checkpoint_step": int(meta["step"])}
  splits = [s.strip() for s in splits]
  check_splits(setup.task, splits)
  for split in splits:
    dump = os.path.join(dump_dir, f"features_{split}.npz") if dump_dir else None
    out[split] = evaluate(setup, eval_step, params, split, with_features=True,
                          dump_path=dump, per_class=per_class)
  return out


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
  the run has one."""
  splits = [s.strip() for s in splits]
  setup, ckpts, target = open_workdir(config, workdir, splits)
  names = provenance.read_labels(workdir)
  # Another label count is a model that does not fit the checkpoint, which the restore names.
  if names not in (None, setup.task.label_names) and len(names) == setup.task.num_labels:
    log.warning("%s was trained with the labels %s; the task's data now names them %s.",
                workdir, names, setup.task.label_names)
    setup.task.label_names = names
  eval_step = step_lib.make_eval_step(setup.model, setup.mesh)
  try:
    return evaluate_best(setup, ckpts, target, eval_step, splits,
                         dump_dir=workdir if dump_features else None, checkpoint=checkpoint,
                         per_class=per_class)
  finally:
    ckpts.close()


def train_features(setup: Setup, eval_step, params, n: int) -> np.ndarray:
  """[<= n, d] the last-exit features of `params` on a seeded sample of train."""
  sub = subsample(setup.tok["train"], n, 0)
  return predict_split(setup, eval_step, params, sub, with_features=True)[1]
