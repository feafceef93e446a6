"""Params scored on whole splits: every exit's predictions from an eval step and batches, and
exact metrics over every example of a split (padding slots masked out).

A `Scorer` holds what every evaluation of one model on one task shares: the eval step, the
tokenised splits and how they are batched (`Setup.scorer` builds it). The training loop scores
dev with it and its best checkpoint on the eval splits; `acl_jax.evaluate` scores a finished
run's checkpoint. Nothing here builds a model or reads a workdir.
"""
import dataclasses
import logging
import os
from typing import Any, Callable, Iterator, Optional, Sequence

import jax
import numpy as np

from acl_jax import data as data_lib
from acl_jax import metrics as metrics_lib
from acl_jax.train import step as step_lib

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Scorer:
  """What scoring a model's params on a task's splits needs besides the params.

  Attributes:
    eval_step: `step.make_eval_step`'s `(params, batch) -> (logits [exits, B, K],
      feats [exits, B, d])`.
    mesh: the data mesh the eval step runs on.
    task: the task (its label count, metric names and label names).
    splits: split name -> tokenised dataset.
    exit_layers: the model's exit layers, one per row of the eval step's outputs.
    batch_size: global examples per eval batch.
    pad_id: the tokenizer's pad token id.
    boundaries: the padded lengths of length-bucketed batches.
    packing: how batches are packed (`data.Packing`), or None for one example a row.
    data: split name -> its counts and content hash (`data.fingerprint.split_record`).
    class_weights: the run's loss.class_weights ("" or "balanced"): what the warning for a
      class never predicted can still suggest.
  """
  eval_step: Callable
  mesh: Any
  task: data_lib.TaskData
  splits: dict
  exit_layers: tuple[int, ...]
  batch_size: int
  pad_id: int = 0
  boundaries: tuple[int, ...] = ()
  packing: Optional[data_lib.Packing] = None
  data: dict = dataclasses.field(default_factory=dict)
  class_weights: str = ""

  def batches(self, ds) -> Iterator[data_lib.batching.Batch]:
    """This process's eval batches of `ds`, covering each example once (example_id -1 marks
    a padding slot)."""
    pi, pc = jax.process_index(), jax.process_count()
    if self.packing is not None:
      return data_lib.packed_eval_batches(ds, self.batch_size, self.packing, pi, pc,
                                          self.pad_id)
    return data_lib.eval_batches(ds, self.batch_size, self.boundaries, pi, pc, self.pad_id)


def predict_split(sc: Scorer, params, ds, with_features: bool = False):
  """Predictions of every exit for every example of `ds`, in dataset order.

  Returns:
    preds: [num_exits, n] int argmax predictions.
    feats: [n, d] last-exit features, or None.
  """
  preds, feats, ids = [], [], []
  for batch in sc.batches(ds):
    sharded = step_lib.shard_batch(batch, sc.mesh)
    logits, f = sc.eval_step(params, sharded)
    # Rows come back in global eval-batch order; example_id (-1 = padding) maps them to
    # examples.
    ids.append(step_lib.to_host(sharded["example_id"]))
    preds.append(step_lib.to_host(logits).argmax(-1))
    if with_features:
      feats.append(step_lib.to_host(f)[-1])
  ids = np.concatenate(ids)
  keep = ids >= 0
  n = len(ds)
  if keep.sum() != n or len(np.unique(ids[keep])) != n:
    raise RuntimeError(f"Evaluation covered {len(np.unique(ids[keep]))} of {n} examples.")
  inv = np.argsort(ids[keep])  # eval order -> dataset order
  out_preds = np.concatenate(preds, axis=1)[:, keep][:, inv]
  out_feats = np.concatenate(feats)[keep][inv] if with_features else None
  return out_preds, out_feats


def evaluate(sc: Scorer, params, split: str, with_features: bool = False,
             dump_path: str | None = None, per_class: bool = False,
             missed: dict | None = None) -> dict:
  """Exact metrics of every exit over a whole split (padding slots masked out).

  Returns a dict with the task's metrics of the last exit, `exit_{m}/{metric}` for every exit
  when there are several, silhouette scores of the last exit's features when asked, and with
  `per_class` the last exit's {label name: precision, recall, f1, support} as "per_class".
  With `dump_path` (needs with_features), process 0 saves the last exit's features, labels,
  predictions and label embeddings there (npz) for plots such as t-SNE. `missed`, a dict,
  receives {label name: examples} of each class of the split the last exit never predicts.
  """
  ds = sc.splits[split]
  k = sc.task.num_labels
  all_preds, feats = predict_split(sc, params, ds, with_features)
  labels = np.asarray(ds["label"], np.int64)
  names = sc.task.metrics
  out = metrics_lib.compute(all_preds[-1], labels, k, names)
  if per_class:
    out["per_class"] = metrics_lib.per_class(all_preds[-1], labels, sc.task.label_names)
  if missed is not None:
    support = np.bincount(labels, minlength=k)
    predicted = np.bincount(all_preds[-1], minlength=k)
    missed.update({str(sc.task.label_names[c]): int(support[c]) for c in range(k)
                   if support[c] and not predicted[c]})
  exits = sc.exit_layers
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
    if dump_path and jax.process_index() == 0:
      from acl_jax.models import label_embeddings  # pylint: disable=import-outside-toplevel
      np.savez(dump_path, feats=feats, labels=labels, preds=all_preds[-1],
               label_emb=np.asarray(label_embeddings(jax.device_get(params), exits[-1])),
               label_names=np.asarray(sc.task.label_names))
  out["num_examples"] = len(ds)
  return out


def evaluate_splits(sc: Scorer, params, splits: Sequence[str], dump_dir: str | None = None,
                    per_class: bool = False) -> dict:
  """What results.json says of `params`: {split: `evaluate` with features} for each of
  `splits`, each with the hash of the data it scored ("data_sha256", as the run's data.json
  writes it), and "warnings" (logged too) where the model never predicts a class the split has
  examples of. With `dump_dir`, each split's features go to `dump_dir/features_{split}.npz`.
  """
  out = {}
  for split in splits:
    dump = os.path.join(dump_dir, f"features_{split}.npz") if dump_dir else None
    missed = {}
    out[split] = evaluate(sc, params, split, with_features=True, dump_path=dump,
                          per_class=per_class, missed=missed)
    if split in sc.data:
      out[split]["data_sha256"] = sc.data[split]["sha256"]
    if missed:
      out[split]["warnings"] = [never_predicted(split, missed, len(sc.splits[split]),
                                                sc.class_weights)]
      log.warning("%s", out[split]["warnings"][0])
  return out


def never_predicted(split: str, missed: dict, n: int, class_weights: str = "") -> str:
  """The warning for the classes of `split` a model never predicts ({name: examples}), with
  what the run can still do: weigh its classes where it does not yet, train longer."""
  one = len(missed) == 1
  classes = ", ".join(f"{name!r} ({count} example{'' if count == 1 else 's'})"
                      for name, count in missed.items())
  fix = ("Its loss already weighs the classes by frequency (loss.class_weights=balanced): "
         "train longer (more epochs or steps), or give the rare classes more training "
         "examples." if class_weights == "balanced" else
         "Weight the loss by class frequency (--config.loss.class_weights=balanced), or "
         "train longer.")
  return (f"The model never predicts {'class' if one else 'classes'} {classes} on {split} "
          f"({n} examples in all): its {split} metrics are those of a model blind to "
          f"{'it' if one else 'them'}. {fix}")


def train_features(sc: Scorer, params, n: int) -> np.ndarray:
  """[<= n, d] the last-exit features of `params` on a seeded sample of train."""
  sub = data_lib.subsample(sc.splits["train"], n, 0)
  return predict_split(sc, params, sub, with_features=True)[1]
