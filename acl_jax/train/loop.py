"""The training loop: train with exact resume, select checkpoints on dev, write results.

Resume order: the workdir's newest intact checkpoint, else the pretrained init. Data order is a
pure function of (seed, epoch) and a step's randomness of (state.rng, state.step), so a resumed
run reproduces the uninterrupted one bit for bit on the same machine. A resume trains the same
run: it may change only provenance.RESUMABLE_FIELDS, and records those changes beside
config.json (provenance.check_same_run, record_config).
"""
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import sys
import time
from typing import Callable

import jax
import numpy as np

from acl_jax import data as data_lib
from acl_jax import logs, provenance
from acl_jax.data import fingerprint
from acl_jax.errors import Diverged, FileError, Preempted, UserError
from acl_jax.models import hf
from acl_jax.provenance import is_main
from acl_jax.train import checkpoint as ckpt_lib
from acl_jax.train import objectives, optim, preempt, scoring, setup as setup_lib, step as step_lib
from acl_jax.train.train_log import DeviceSums, MetricWriter

log = logging.getLogger(__name__)


@dataclasses.dataclass
class LoopState:
  """What the loop carries between steps and across a resume (beside the TrainState)."""
  best_metric: float | None = None
  best_step: int | None = None
  evals_since_best: int = 0
  early_stopped_at: int | None = None
  # The metrics summed over the whole run (step.run_sums), and the steps they cover.
  run_sums: dict = dataclasses.field(default_factory=dict)
  run_sum_steps: int = 0
  calibration: dict | None = None  # the loss family's, once computed (objectives.calibrate)
  code_versions: list = dataclasses.field(default_factory=list)
  # The train-log sums since the last train row, and the steps they cover: a checkpoint
  # between two rows (a stop at SIGTERM) keeps them, so the next row is the uninterrupted
  # run's. Absent from the checkpoints of older code, which wrote them only on a row.
  log_sums: dict = dataclasses.field(default_factory=dict)
  log_steps: int = 0
  OPTIONAL = ("log_sums", "log_steps")

  @classmethod
  def from_meta(cls, meta: dict) -> "LoopState":
    names = [f.name for f in dataclasses.fields(cls)]
    missing = [k for k in names if k not in meta and k not in cls.OPTIONAL]
    if missing:
      raise UserError(f"The checkpoint's metadata lacks {missing}: another version of the "
                      "code wrote it. Resume it with that code, or use a new --workdir.")
    return cls(**{k: meta[k] for k in names if k in meta})

  def meta(self, **extra) -> dict:
    """The checkpoint's JSON metadata: this state plus `extra` (step, data position, ...)."""
    return {**dataclasses.asdict(self), **extra}


def devices_used() -> dict:
  """What this process trained on, for the run's record: the backend's platform ("cpu",
  "gpu", "tpu"), its device kind ("NVIDIA H200"), the device count over all processes, and
  the host threads its arithmetic ran on (`threads`).

  XLA:CPU sizes its intra-op thread pool by the cores the process may run on (its affinity
  mask: a sweep pins each run to its share). The thread count splits a reduction's float32
  sums differently, so runs at two thread counts differ in their params' bits (not in their
  scores to 4 decimals) while their configs, and so their identities, are equal."""
  d = jax.devices()
  threads = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else os.cpu_count())
  return {"platform": d[0].platform, "kind": d[0].device_kind, "count": len(d),
          "threads": threads}


def _last_good(workdir: str) -> str:
  """Where a run that stopped on a non-finite step can go on from: its newest checkpoint (each
  is written after the steps before it were checked finite)."""
  steps = provenance.checkpoint_steps(workdir)
  if not steps:
    return ("Training stopped before its first checkpoint: a re-run starts again from the "
            "pretrained weights.")
  folder = os.path.join(workdir, "ckpt", str(steps[-1]))
  return (f"Training stopped; the last good checkpoint is {folder} (step {steps[-1]}), which a "
          "re-run of the command resumes from (a resume may change the optim.* fields).")


def params_fingerprint(params) -> str:
  """sha256 of this process's replica of the params: equal on every host of a sound run."""
  h = hashlib.sha256()
  for x in jax.tree.leaves(params):
    h.update(np.asarray(x.addressable_data(0)).tobytes())
  return h.hexdigest()[:16]


def train_and_evaluate(config, workdir: str, origin: dict | None = None,
                       on_phase: Callable[[str], None] | None = None) -> dict:
  """Trains per `config` in `workdir` (resuming if it holds a checkpoint); returns results.

  The workdir is locked while the run writes it (a second run on it is refused), its log
  lines (warnings included) are kept in it (`logs.keep_in`), and a run that fails before
  anything is written leaves no new folder behind.

  Args:
    config: the run's config (configs/common.py).
    workdir: the run folder: checkpoints, logs, results.
    origin: the command and config file that started the run, for a fresh run's config.json.
    on_phase: called with "evaluate" before each evaluation or checkpoint save, and with
      "train" once they are done and training goes on. The train steps and the evaluation
      and saves use different memory, so a process can tidy up between the two (train.py
      returns the process's free memory to the system there).
  """
  setup_lib.check_config(config)
  created = not os.path.isdir(workdir)
  try:
    os.makedirs(workdir, exist_ok=True)
  except OSError as e:
    raise FileError(f"--workdir {workdir} cannot be made ({e.strerror}).") from None
  try:
    with provenance.workdir_lock(workdir, take=jax.process_index() == 0), logs.keep_in(
        workdir, jax.process_index()):
      return _train(config, workdir, origin, on_phase or (lambda _: None))
  except BaseException:
    if created and set(os.listdir(workdir)) <= {provenance.LOCK, "train.log"}:
      shutil.rmtree(workdir, ignore_errors=True)
    raise


def _train(config, workdir: str, origin: dict | None, on_phase: Callable[[str], None]) -> dict:
  # From the start: a SIGTERM during set-up (data, model, compile) stops the run before its
  # first step; one during the final evaluation lets it finish (preempt.py).
  with preempt.watch() as stop:
    return _train_watched(config, workdir, origin, on_phase, stop)


def _train_watched(config, workdir: str, origin: dict | None, on_phase: Callable[[str], None],
                   stop: preempt.Watch) -> dict:
  cfg = config
  provenance.check_not_pruned(workdir)
  provenance.check_same_run(workdir, cfg)
  hf.check_max_length(cfg.model.name, cfg.task.max_length)  # from config.json, before data
  # Every split the run will score, checked before the model loads, not after training.
  eval_splits = [x.strip() for x in cfg.eval_splits.split(",") if x.strip()]
  s = setup_lib.build(cfg, ["dev", *eval_splits])
  resuming = bool(provenance.checkpoint_steps(workdir))
  if resuming:
    fingerprint.check_same(workdir, s.data)
  if is_main() and (not resuming or fingerprint.read(workdir) is None):
    provenance.write_atomic(os.path.join(workdir, fingerprint.DATA), json.dumps(s.data, indent=2))
  n_train = len(s.tok["train"])
  steps_per_epoch = data_lib.num_train_batches(n_train, cfg.batch_size)
  if steps_per_epoch < 1:
    raise UserError(f"{n_train} training examples make no batch of {cfg.batch_size}.")
  total = cfg.num_steps if cfg.num_steps > 0 else cfg.num_epochs * steps_per_epoch
  eval_every = cfg.eval_every or steps_per_epoch
  ckpt_every = cfg.checkpoint_every or eval_every
  sc = s.scorer()
  s.params = step_lib.replicate(s.params, s.mesh)
  ckpts = ckpt_lib.Checkpoints(workdir)
  # The loop state of the newest intact checkpoint, before the objective: a resume builds the
  # loss with the calibration its run started with.
  prior = ckpts.latest_meta()
  ls = LoopState() if prior is None else LoopState.from_meta(prior)
  train_labels = np.asarray(s.tok["train"]["label"])
  class_weights = setup_lib.class_weights(cfg, train_labels, s.task.num_labels)
  if ls.calibration is None:
    ls.calibration = objectives.calibrate(
        cfg.loss, lambda n: scoring.train_features(sc, s.params, n), cfg.batch_size,
        jax.device_count(), train_labels, s.task.num_labels, class_weights)
  tr = setup_lib.make_trainer(
      cfg, s.model, s.params, s.mesh, num_labels=s.task.num_labels, total_steps=total,
      class_weights=class_weights, calibration=ls.calibration)
  state = tr.state
  restored = ckpts.restore(state)
  if restored is not None:
    state, meta = restored
    ls = LoopState.from_meta(meta)
    log.info("Resumed from %s at step %d.", workdir, int(state.step))
  start = int(state.step)
  if stop.requested(start) and start < total:  # during set-up: nothing new to save
    ckpts.close()
    raise Preempted(f"{stop.signal} before step {start + 1} of {total}: the run is where its "
                    "last checkpoint left it; the same command resumes it.")
  fixed = dict(param_shapes=ckpt_lib.param_shapes(state.params),
               num_labels=s.task.num_labels, total_steps=total)
  ls = LoopState.from_meta(ckpts.sync_best(state, ls.meta(**fixed)))
  # Every code revision that trained this run (a resume may come from newer code): results
  # that mix revisions can be told apart later.
  rev = provenance.git_revision()
  if ls.code_versions and rev not in ls.code_versions:
    log.warning("%s was trained by code %s and resumes with %s.", workdir,
                ls.code_versions[-1], rev)
  if rev not in ls.code_versions:
    ls.code_versions.append(rev)
  # A multi-exit model is selected on the mean over its exits: the last exit alone would,
  # e.g., keep a 2ST checkpoint from before stage 2 trained the lower exits.
  main_metric = (f"exit_mean/{s.task.main_metric}" if tr.multi_exit else s.task.main_metric)
  writer = MetricWriter(workdir, start)
  if is_main():
    provenance.record_config(workdir, cfg, start, resumed=restored is not None, origin=origin)
    provenance.write_labels(workdir, s.task.label_names)
    log.info("%s: %d train examples, %d steps/epoch, %d steps, objective %s, %d device(s).",
             s.task.name, n_train, steps_per_epoch, total, tr.objective.name,
             jax.device_count())

  batches = s.train_batches(start)
  bar = None
  if cfg.progress and is_main():
    from tqdm import tqdm  # pylint: disable=import-outside-toplevel
    # Redirected output (nohup, CI) gets a line every 30 s instead of a redraw per step.
    bar = tqdm(total=total, initial=start, desc="train", dynamic_ncols=True,
               mininterval=0.1 if sys.stderr.isatty() else 30.0)
  sums, logged, since = DeviceSums(), dict(ls.log_sums), ls.log_steps
  run_sums = step_lib.run_sums(tr.objective)
  t0, stopped = time.time(), ls.early_stopped_at is not None

  def save_latest(state, done):
    epoch, pos = divmod(done, steps_per_epoch)
    ls.log_sums, ls.log_steps = dict(logged), since
    ckpts.save(state, ls.meta(**fixed, step=done, data_position={"epoch": epoch, "batch": pos}))

  halted = None
  for step, batch in batches:
    if step >= total or stopped:
      break
    state, m = tr.train_step(state, step_lib.shard_batch(batch, s.mesh))
    done = step + 1
    sums.add(m, done)
    if bar is not None:
      bar.update(1)
    # Asked to stop (SIGTERM): this step is checkpointed, then the loop ends.
    halt = stop.requested(done) and done < total
    log_now = done % cfg.log_every == 0 or done == total
    eval_now = done % eval_every == 0 or done == total
    if not (log_now or eval_now or done % ckpt_every == 0 or halt):
      continue
    heavy = eval_now or done % ckpt_every == 0 or halt
    if heavy:
      on_phase("evaluate")
    # Host sync: raises on a non-finite step before anything is evaluated or saved.
    try:
      new, count = sums.fetch()
    except Diverged as e:
      raise Diverged(f"{e} {_last_good(workdir)}") from None
    logged = {k: logged.get(k, 0.0) + v for k, v in new.items()}
    since += count
    if run_sums:  # in the loop state, so the run's sums survive a resume
      ls.run_sum_steps += count
      ls.run_sums = {k: ls.run_sums.get(k, 0.0) + new[k] for k in run_sums}
    if log_now:
      rec = {k: v / since for k, v in logged.items()}
      rec["steps_per_s"] = (done - start) / max(time.time() - t0, 1e-9)
      rec.update(optim.learning_rates(tr.lr_groups, step))  # what this step's update used
      writer.write(done, "train", rec)
      if bar is not None:
        bar.set_postfix(loss=f"{rec['loss']:.4f}")
      logged, since = {}, 0
    if eval_now:
      res = scoring.evaluate(sc, state.params, "dev")
      writer.write(done, "dev", res)
      cur = res[main_metric]
      if ls.best_metric is None or cur > ls.best_metric:
        ls.best_metric, ls.best_step, ls.evals_since_best = cur, done, 0
        # Latest first: a crash between the two saves is mended on resume (sync_best).
        save_latest(state, done)
        ckpts.save(state, ls.meta(**fixed, step=done), best=True)
      else:
        ls.evals_since_best += 1
      msg = f"step {done}: dev " + " ".join(f"{k}={v:.4f}" for k, v in res.items()
                                             if k in s.task.metrics)
      if bar is not None:
        bar.write(msg)
      elif is_main():
        log.info(msg)
      if cfg.early_stop_patience and ls.evals_since_best >= cfg.early_stop_patience:
        stopped = True
        ls.early_stopped_at = done
    if done % ckpt_every == 0 or done == total or stopped or halt:
      save_latest(state, done)
    if halt and not stopped:  # an early stop here ends the run instead
      halted = done
      break
    if heavy:
      on_phase("train")
  if bar is not None:
    bar.close()
  writer.close()
  if halted is not None:
    ckpts.close()
    raise Preempted(f"{stop.signal} at step {halted} of {total}: step {halted} is checkpointed "
                    f"in {workdir}; the same command resumes the run there.")
  summary = {"final_step": int(state.step), "best_step": ls.best_step,
             "best_dev": ls.best_metric, "main_metric": main_metric,
             "params_sha256": params_fingerprint(state.params),
             "code_versions": ls.code_versions, "devices": devices_used()}
  summary.update(step_lib.run_summary(ls.run_sums, ls.run_sum_steps))
  if ls.early_stopped_at is not None:
    summary["early_stopped_at"] = ls.early_stopped_at
  summary["data"] = s.data  # counts (dropped, subsampled, at max length) and hash per split
  params, meta = ckpts.restore_selected(state.params, "best")
  results = {"checkpoint_step": int(meta["step"]),
             **scoring.evaluate_splits(sc, params, eval_splits), "train": summary}
  ckpts.close()
  if is_main():
    provenance.write_atomic(os.path.join(workdir, "results.json"), json.dumps(results, indent=2))
  if not cfg.checkpoint.keep_train_state:  # after results.json: the run is finished
    ckpt_lib.drop_train_state(workdir)
  return results
