"""Subprocess entry points for the fault tests (a fresh process to kill).

  python -m tests.fault_workers pause_in_save STEP MARKER TRAIN_ARGS...
  python -m tests.fault_workers bug_in_eval TRAIN_ARGS...
  python -m tests.fault_workers nan_from STEP TRAIN_ARGS...
  python -m tests.fault_workers sigterm_at STEP TRAIN_ARGS...
"""
import os
import runpy
import sys
import time

from tests.helpers import REPO


def pause_in_save(step, marker, *train_args):
  """Runs train.py with TRAIN_ARGS, pausing inside the save of latest checkpoint STEP: its
  arrays are written into Orbax's temporary folder, not yet renamed into place. MARKER gets
  that folder's path once there."""
  import orbax.checkpoint as ocp
  save = ocp.CompositeCheckpointHandler.save

  def paused(self, directory, *args, **kwargs):
    save(self, directory, *args, **kwargs)
    path = str(directory)
    if (os.path.basename(os.path.dirname(path)) == "ckpt"
        and os.path.basename(path).startswith(f"{step}.")):
      with open(marker, "w") as f:
        f.write(path)
      time.sleep(600)  # until the test kills the process
  ocp.CompositeCheckpointHandler.save = paused
  _train(train_args)


def bug_in_eval(*train_args):
  """Runs train.py with TRAIN_ARGS; the first dev evaluation raises a ValueError, as a bug in
  the code (or in a library under it) would, hours into a run."""
  from acl_jax.train import scoring

  def broken(*args, **kwargs):
    raise ValueError("operands could not be broadcast together (a bug in the loop)")
  scoring.evaluate = broken
  _train(train_args)


def after_each_step(fn):
  """Makes every trainer's train step pass its (state, metrics) through `fn(state, m) -> m`
  (in the process that trains next)."""
  from acl_jax.train import setup as setup_lib
  make = setup_lib.make_trainer

  def making(*args, **kwargs):
    trainer = make(*args, **kwargs)
    train_step = trainer.train_step

    def step_then_fn(state, batch):
      state, m = train_step(state, batch)
      return state, fn(state, m)
    trainer.train_step = step_then_fn
    return trainer
  setup_lib.make_trainer = making


def nan_from(step, *train_args):
  """Runs train.py with TRAIN_ARGS; from step STEP on (1-based: the steps done), the train
  step's loss is NaN, as a diverged run's would be."""
  after_each_step(lambda state, m: {**m, "loss": m["loss"] * float("nan")}
                  if int(state.step) >= int(step) else m)
  _train(train_args)


def sigterm_at(step, *train_args):
  """Runs train.py with TRAIN_ARGS; the process sends itself SIGTERM during step STEP (1-based:
  the steps done once it returns; 0: during set-up, as the trainer is made), as a scheduler
  preempting it would."""
  if int(step) == 0:
    from acl_jax.train import setup as setup_lib
    make = setup_lib.make_trainer
    setup_lib.make_trainer = lambda *a, **kw: sigterm_self(make(*a, **kw))
  after_each_step(lambda state, m: sigterm_self(m) if int(state.step) == int(step) else m)
  _train(train_args)


def sigterm_self(x):
  """SIGTERM to this process; returns `x`."""
  import signal
  os.kill(os.getpid(), signal.SIGTERM)
  return x


def _train(train_args):
  sys.argv = ["train.py", *train_args]
  runpy.run_path(os.path.join(REPO, "train.py"), run_name="__main__")


if __name__ == "__main__":
  {"pause_in_save": pause_in_save, "bug_in_eval": bug_in_eval,
   "nan_from": nan_from, "sigterm_at": sigterm_at}[sys.argv[1]](*sys.argv[2:])
