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


def nan_from(step, *train_args):
  """Runs train.py with TRAIN_ARGS; from step STEP on (1-based: the steps done), the train
  step's loss is NaN, as a diverged run's would be."""
  from acl_jax.train import setup as setup_lib
  make = setup_lib.make_trainer

  def making(*args, **kwargs):
    trainer = make(*args, **kwargs)
    train_step = trainer.train_step

    def nan_step(state, batch):
      state, m = train_step(state, batch)
      if int(state.step) >= int(step):
        m = {**m, "loss": m["loss"] * float("nan")}
      return state, m
    trainer.train_step = nan_step
    return trainer
  setup_lib.make_trainer = making
  _train(train_args)


def sigterm_at(step, *train_args):
  """Runs train.py with TRAIN_ARGS; the process sends itself SIGTERM during step STEP (1-based:
  the steps done once it returns), as a scheduler preempting it would."""
  import signal
  from acl_jax.train import setup as setup_lib
  make = setup_lib.make_trainer

  def making(*args, **kwargs):
    trainer = make(*args, **kwargs)
    train_step = trainer.train_step

    def signalled_step(state, batch):
      state, m = train_step(state, batch)
      if int(state.step) == int(step):
        os.kill(os.getpid(), signal.SIGTERM)
      return state, m
    trainer.train_step = signalled_step
    return trainer
  setup_lib.make_trainer = making
  _train(train_args)


def _train(train_args):
  sys.argv = ["train.py", *train_args]
  runpy.run_path(os.path.join(REPO, "train.py"), run_name="__main__")


if __name__ == "__main__":
  {"pause_in_save": pause_in_save, "bug_in_eval": bug_in_eval,
   "nan_from": nan_from, "sigterm_at": sigterm_at}[sys.argv[1]](*sys.argv[2:])
