"""A finished train.py run, read back one way: `open(workdir, checkpoint, splits)` -> `Run`.

A workdir holds config.json (the config the run started with) and config_history.jsonl (what
resumes changed), labels.json (the class names in label-id order), metrics.jsonl (the train
and dev records), results.json, and the checkpoints: best/ (the dev-selected params) and ckpt/
(the latest train states, deleted after training with checkpoint.keep_train_state=False).

eval.py, predict.py, export.py and the early-exit sweep open runs here. `open` fails before
any model or data loads when the workdir has no config or no checkpoint of the kind asked for,
and it reads exactly that checkpoint's step (`Checkpoints.restore_selected`).
"""
import dataclasses
import logging
import os
from typing import Any, Callable, Optional, Sequence

import ml_collections

from acl_jax import provenance
from acl_jax.errors import FileError, UserError
from acl_jax.train import checkpoint as ckpt_lib
from acl_jax.train import setup as setup_lib, step as step_lib

log = logging.getLogger(__name__)

CHECKPOINTS = ckpt_lib.CHECKPOINTS
METRICS = "metrics.jsonl"


@dataclasses.dataclass
class Run:
  """A finished train.py run, read back.

  Attributes:
    workdir: its folder.
    config: its config (config.json with config_history.jsonl applied), a ConfigDict.
    label_names: class names in label-id order: labels.json's, else the task's when opened
      with splits, else LABEL_i.
    model: the `Classifier`.
    params: the checkpoint's params, replicated over `mesh`.
    tokenizer: the model's HF tokenizer.
    mesh: the devices the params live on.
    checkpoint: "best" or "latest".
    step: the training step the checkpoint holds.
    setup: opened with splits, the task and its tokenised splits (`Setup.scorer()` scores
      them), whose params are the checkpoint's; else None.
  """
  workdir: str
  config: ml_collections.ConfigDict
  label_names: list[str]
  model: Any
  params: Any
  tokenizer: Any
  mesh: Any
  checkpoint: str
  step: int
  setup: Optional[setup_lib.Setup] = None

  @property
  def history(self) -> list[dict]:
    """The run's metrics.jsonl records, oldest first: {"step", "kind" ("train" or "dev"),
    metric: value}."""
    return provenance.read_jsonl(os.path.join(self.workdir, METRICS))


def read_config(workdir: str) -> ml_collections.ConfigDict:
  """The config the run trains with now: config.json with config_history.jsonl applied."""
  cfg = provenance.run_config(workdir)
  if cfg is None and not os.path.isdir(workdir):
    raise FileError(f"--workdir {workdir} does not exist: it must be a folder written "
                    "by train.py.")
  if cfg is None:
    raise FileError(f"{os.path.join(workdir, 'config.json')} not found: --workdir must "
                    "be a folder written by train.py.")
  return ml_collections.ConfigDict(cfg)


def label_names_or_default(names: Optional[list[str]], num_labels: int,
                           source: str) -> list[str]:
  """`names`, checked against the label count; LABEL_i names (with a warning) without them."""
  if names is None:
    log.warning("%s records no label names; the classes are named LABEL_0..LABEL_%d.", source,
                num_labels - 1)
    return [f"LABEL_{i}" for i in range(num_labels)]
  if len(names) != num_labels or len(set(names)) != len(names):
    raise UserError(f"{source}: the label names {names} are not {num_labels} distinct names, "
                    "one per class of the model.")
  return list(names)


def _task_label_names(task, names: Optional[list[str]], workdir: str) -> list[str]:
  """The names the task's data is scored under: the run's labels.json (the names its model
  was trained with) where it has as many, else the data's own."""
  # Another label count is a model that does not fit the checkpoint, which the restore names.
  if names not in (None, task.label_names) and len(names) == task.num_labels:
    log.warning("%s was trained with the labels %s; the task's data now names them %s.",
                workdir, names, task.label_names)
    task.label_names = names
  return list(task.label_names)


def check(workdir: str, checkpoint: str = "best") -> ml_collections.ConfigDict:
  """The config of `workdir` once it is known to hold a checkpoint of the kind asked for: what
  `open` checks before anything loads, for a caller to check its own input before then."""
  config = read_config(workdir)
  ckpt_lib.check_selected(workdir, checkpoint)
  return config


def open(workdir: str, checkpoint: str = "best",  # pylint: disable=redefined-builtin
         splits: Optional[Sequence[str]] = None,
         check_model: Optional[Callable[[Any], None]] = None) -> Run:
  """Opens a train.py workdir: its config, label names, model and best (or latest) params.

  Args:
    workdir: a folder written by train.py.
    checkpoint: "best" (the dev-selected params; the latest when none is marked best) or
      "latest" (the final weights, in ckpt/).
    splits: splits to score: the task's data is loaded and tokenised (`Run.setup`), these
      splits checked to exist before the model loads, and the model's head sized by the data.
      None: the model alone (prediction, export), sized by labels.json or the checkpoint.
    check_model: called with the model before the checkpoint is read (export refuses the
      heads it cannot write).

  Returns:
    The run, its params replicated over all devices.

  Raises:
    FileError: no config.json, no checkpoint of the kind asked for, or one whose files cannot
      be read (the message names its step).
    UserError: a split the task lacks, or a checkpoint that does not fit the model.
  """
  config = check(workdir, checkpoint)
  names = provenance.read_labels(workdir)
  setup = None
  if splits is not None:
    setup = setup_lib.build(config, splits)
    names = _task_label_names(setup.task, names, workdir)
  ckpts = ckpt_lib.Checkpoints(workdir, create=False)
  try:
    if setup is None:
      num_labels = len(names) if names is not None else int(
          (ckpts.read_meta(best=checkpoint == "best") or ckpts.read_meta())["num_labels"])
      model, target, tokenizer = setup_lib.load_model(config, num_labels)
      mesh = step_lib.make_mesh()
    else:
      model, target, tokenizer, mesh = setup.model, setup.params, setup.tokenizer, setup.mesh
      num_labels = setup.task.num_labels
    if check_model is not None:
      check_model(model)
    params, meta = ckpts.restore_selected(step_lib.replicate(target, mesh), checkpoint)
  finally:
    ckpts.close()
  if setup is not None:
    setup.params = params  # not the pretrained init it was built with
  return Run(workdir, config, label_names_or_default(names, num_labels, workdir), model,
             params, tokenizer, mesh, checkpoint, int(meta["step"]), setup)
