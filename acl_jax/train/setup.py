"""From a config to the pieces of a run: the one place they are built and the config checked.

- `check_config(cfg)`: every config error that needs no data or model, raised before loading.
- `build(cfg, splits)`: the task, tokenizer, model, pretrained params and tokenised splits;
  `Setup.scorer()` scores params on them.
- `make_trainer(cfg, model, params, mesh, ...)`: objective (`make_objective`) -> optimizer ->
  state -> step.

The training loop, eval.py, the scripts, the benchmarks and the tests all build through these.
"""
import dataclasses
import os
from typing import Any, Callable

import jax
import numpy as np
import optax

from acl_jax import data as data_lib
from acl_jax.data import fingerprint
from acl_jax.errors import UserError
from acl_jax.models import hf
from acl_jax.train import objectives, optim, scoring, step as step_lib, strategies
from acl_jax.train.state import TrainState

# The fields that count something, and their least value; the seeds (numpy's and jax's
# generators take no negative seed).
_COUNTS = (("batch_size", 1), ("eval_batch_size", 1), ("num_steps", 0), ("eval_every", 0),
           ("checkpoint_every", 0), ("early_stop_patience", 0), ("log_every", 1), ("seed", 0),
           ("task.split_seed", 0), ("task.max_length", 3))
# Why a least value is what it is, where the field's name does not say.
_WHY = {"task.max_length": " (room for [CLS], [SEP] and at least one token of text)"}


def check_config(cfg) -> None:
  """Raises UserError naming the field and the fix for any config error that needs no data
  or model: counts and seeds, divisibility by the device count, the loss (each loss family
  and strategy validates its own fields, on stand-in sizes) and the optimizer."""
  for key, low in _COUNTS:
    section, _, name = key.rpartition(".")
    value = (cfg[section] if section else cfg)[name]
    if value < low:
      raise UserError(f"{key} must be >= {low}{_WHY.get(key, '')}, got {value}: set "
                      f"--config.{key}.")
  if cfg.num_steps == 0 and cfg.num_epochs < 1:
    raise UserError(f"num_epochs must be >= 1 when num_steps is 0, got {cfg.num_epochs}: set "
                    "--config.num_epochs or --config.num_steps.")
  for key in ("batch_size", "eval_batch_size"):
    if cfg[key] % jax.device_count():
      raise UserError(f"{key} {cfg[key]} must be divisible by the device count "
                      f"{jax.device_count()}: set --config.{key} to a multiple of it.")
  exit_layers = (1, 2) if cfg.model.exits == "all" else (1,)
  try:
    multi = strategies.multi_exit_from_config(cfg.multi_exit, exit_layers, total_steps=2)
    objectives.build_objective(cfg.loss, num_labels=2, last_exit=exit_layers[-1],
                               multi_exit=multi)
    optim.lr_groups(**_lr_args(cfg, total_steps=2, multi=multi))
  except ValueError as e:
    # The loss functions check their own arguments; on these stand-in sizes, what they
    # refuse is a config field.
    if isinstance(e, UserError):
      raise
    raise UserError(str(e)) from e


def _cache_dir() -> str:
  return os.environ.get("ACL_JAX_CACHE", os.path.join(os.path.expanduser("~"), ".cache",
                                                      "acl_jax", "tokens"))


@dataclasses.dataclass
class Setup:
  """What a config loads before the first step."""
  config: Any
  task: data_lib.TaskData
  tokenizer: Any
  model: Any
  params: Any  # the pretrained params (host)
  tok: dict  # split name -> tokenised dataset
  boundaries: tuple
  mesh: Any
  # task.packing: how batches are packed (data.Packing), or None for one example a row.
  packing: Any = None
  # split name -> its counts and content hash (data.fingerprint.split_record)
  data: dict = dataclasses.field(default_factory=dict)

  def scorer(self) -> scoring.Scorer:
    """The model's eval step over the task's splits, batched as the config says."""
    return scoring.Scorer(
        step_lib.make_eval_step(self.model, self.mesh), self.mesh, self.task, self.tok,
        tuple(self.model.cfg.exit_layers), int(self.config.eval_batch_size),
        self.tokenizer.pad_token_id or 0, self.boundaries, self.packing, self.data,
        str(self.config.loss.class_weights))

  def train_batches(self, start: int):
    """The run's endless (step, batch) stream from global step `start`, this process's rows
    of each global batch: packed as task.packing says, else length-bucketed."""
    cfg, pad = self.config, self.tokenizer.pad_token_id or 0
    pi, pc = jax.process_index(), jax.process_count()
    if self.packing is not None:
      # Uniformly random batches of the epoch's permutation, each device's share packed.
      return data_lib.packed_train_batches(self.tok["train"], cfg.batch_size, cfg.seed, start,
                                           self.packing, pi, pc, pad)
    # Length-bucketed batches. Each batch's rows are shuffled, so a device's shard is a random
    # draw of the batch, not a length stratum, and the row order is the same on every device
    # count.
    return data_lib.train_batches(self.tok["train"], cfg.batch_size, cfg.seed, start,
                                  self.boundaries, pi, pc, pad, shuffle_within=True)


def check_splits(task, splits) -> None:
  missing = [s for s in splits if s not in task.splits]
  if missing:
    raise UserError(f"Split {missing[0]!r} not in task {task.name}; it has "
                    f"{sorted(task.splits)} (check eval_splits or --split).")


def load_model(config, num_labels: int, with_tokenizer: bool = True):
  """(model, pretrained params, tokenizer) that a run's config trains (hf.load_pretrained)."""
  overrides = {"exit_pooling": config.model.exit_pooling}
  if config.model.dropout >= 0:
    overrides.update(hidden_dropout=config.model.dropout, attention_dropout=config.model.dropout)
  return hf.load_pretrained(
      config.model.name, num_labels, exits=config.model.exits, head=config.model.head or None,
      dtype=config.model.dtype, seed=config.seed, ignore_head=config.model.ignore_head,
      with_tokenizer=with_tokenizer, **overrides)


def build(config, splits=()) -> Setup:
  """Loads the task, model and tokenised splits named by the config; `splits` the caller will
  read must exist (checked before the model loads)."""
  t = config.task
  files = {k: v for k, v in (("train", t.train_file), ("dev", t.dev_file),
                              ("test", t.test_file)) if v}
  task = data_lib.load_task(
      t.name, t.data_dir or None, text=t.text, val_fraction=t.val_fraction,
      split_seed=t.split_seed, on_empty=t.on_empty, text_column=t.text_column,
      text_pair_column=t.text_pair_column or None, label_column=t.label_column,
      files=files or None, main_metric=t.main_metric or None, hub_id=t.hub_id,
      hub_config=t.hub_config, hub_splits=dict(t.splits))
  check_splits(task, splits)
  model, params, tokenizer = load_model(config, task.num_labels)
  tok, record = {}, {}
  for split, ds in task.splits.items():
    n = t.max_train_examples if split == "train" else t.max_eval_examples
    rows = len(ds)
    ds = data_lib.subsample(ds, n, config.seed if split == "train" else 0)
    tok[split] = data_lib.tokenize_dataset(ds, tokenizer, t.max_length, cache_dir=_cache_dir())
    record[split] = fingerprint.split_record(tok[split], rows, task.num_dropped.get(split, 0),
                                             t.max_length)
  boundaries = data_lib.bucket_boundaries(t.max_length, t.num_buckets)
  mesh = step_lib.make_mesh()
  packing = data_lib.Packing(t.max_length, mesh.size) if t.packing else None
  return Setup(config, task, tokenizer, model, params, tok, boundaries, mesh, packing, record)


def class_weights(config, labels: np.ndarray, num_labels: int) -> np.ndarray | None:
  """loss.class_weights="balanced": sklearn's class-balanced CE weights of the train labels."""
  if config.loss.class_weights != "balanced":
    return None
  from acl_jax.losses import balanced_class_weights  # pylint: disable=import-outside-toplevel
  return balanced_class_weights(np.asarray(labels), num_labels)


def _lr_args(cfg, total_steps: int, multi=None) -> dict:
  o = cfg.optim
  return dict(lr=o.lr, total_steps=total_steps, warmup_ratio=o.warmup_ratio,
              strategy=multi.strategy if multi else "",
              stage1_steps=multi.stage1_steps if multi else 0, head_lr_mult=o.head_lr_mult)


@dataclasses.dataclass
class Trainer:
  """Objective -> optimizer -> state -> step, as `make_trainer` assembles them."""
  objective: objectives.Objective
  multi_exit: strategies.MultiExit | None
  tx: optax.GradientTransformation
  lr_groups: dict  # the optimizer's learning rates, for the train log (optim.learning_rates)
  state: TrainState  # the initial state, replicated on the mesh
  train_step: Callable


def make_objective(cfg, model, *, num_labels: int, total_steps: int, class_weights=None,
                   calibration: dict | None = None
                   ) -> tuple[objectives.Objective, strategies.MultiExit | None]:
  """The objective a config trains with, and its multi-exit strategy (None: one exit).

  Args as `make_trainer`'s.
  """
  multi = strategies.multi_exit_from_config(cfg.multi_exit, model.cfg.exit_layers,
                                            total_steps)
  objective = objectives.build_objective(cfg.loss, num_labels=num_labels,
                                         last_exit=model.cfg.exit_layers[-1],
                                         class_weights=class_weights,
                                         calibration=calibration,
                                         multi_exit=multi)
  return objective, multi


def make_trainer(cfg, model, params, mesh, *, num_labels: int, total_steps: int,
                 class_weights=None, calibration: dict | None = None,
                 tx: optax.GradientTransformation | None = None, donate: bool = True
                 ) -> Trainer:
  """The objective, optimizer, initial state and jitted train step of a config.

  Args:
    cfg: the run's config (its loss, multi_exit, optim blocks and seed are read).
    model: the `Classifier`; params: its (host or replicated) params.
    mesh: the data mesh (`step.make_mesh`).
    num_labels: K.
    total_steps: the optimizer's steps (its schedule, 2ST's stages).
    class_weights: optional [K] CE class weights (`class_weights`).
    calibration: the loss family's calibration for this run (`objectives.calibrate`).
    tx: an optax transformation instead of the config's AdamW (tests capture gradients).
    donate: donate the state buffers to the step.
  """
  objective, multi = make_objective(cfg, model, num_labels=num_labels, total_steps=total_steps,
                                    class_weights=class_weights, calibration=calibration)
  lr_args = _lr_args(cfg, total_steps, multi)
  if tx is None:
    tx = optim.make_optimizer(weight_decay=cfg.optim.weight_decay,
                              clip_norm=cfg.optim.clip_norm, exit_layers=model.cfg.exit_layers,
                              **lr_args)
  state = step_lib.replicate(
      TrainState.create(params, tx, cfg.seed, objective.init_state(params)), mesh)
  train_step = step_lib.make_train_step(model, objective, tx, mesh, donate=donate)
  return Trainer(objective, multi, tx, optim.lr_groups(**lr_args), state, train_step)

