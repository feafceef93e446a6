"""Subprocess entry points for the fault tests (a fresh process to kill).

  python -m tests.fault_workers pause_in_save STEP MARKER TRAIN_ARGS...
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
  sys.argv = ["train.py", *train_args]
  runpy.run_path(os.path.join(REPO, "train.py"), run_name="__main__")


if __name__ == "__main__":
  {"pause_in_save": pause_in_save}[sys.argv[1]](*sys.argv[2:])
