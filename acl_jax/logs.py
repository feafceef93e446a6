"""Logging for the command-line tools: our INFO lines, the libraries' warnings only.

Orbax logs every checkpoint manager it opens and every restore at INFO through absl (about 40
lines before eval.py's result), and datasets and jax announce themselves; none of it says
anything about the run.
"""
import contextlib
import logging
import os
import sys

from acl_jax import errors

# Loggers kept at WARNING. Orbax logs through absl's logger, so "absl" covers it.
NOISY = ("absl", "orbax", "jax", "datasets", "httpx", "urllib3", "filelock")


def setup(stream=sys.stdout, level: int = logging.INFO) -> None:
  """INFO (by default) for acl_jax on `stream`, WARNING for the NOISY libraries.

  Under absl's `app.run` (train.py, eval.py) the root logger already holds absl's handler, and
  absl's verbosity sets the root level: this handler replaces it (`force`), and the root level
  is set after absl's, so that INFO lines such as "Resumed from ..." are shown.
  """
  logging.basicConfig(level=level, stream=stream,
                      format="%(asctime)s %(levelname)s %(message)s", force=True)
  for name in NOISY:
    logging.getLogger(name).setLevel(logging.WARNING)
  logging.getLogger("absl").addFilter(_drop_reraised)
  try:
    from absl import logging as absl_logging  # pylint: disable=import-outside-toplevel
    absl_logging.set_verbosity(absl_logging.WARNING)
  except ImportError:
    pass
  logging.getLogger().setLevel(level)


def _drop_reraised(record: logging.LogRecord) -> bool:
  """Orbax logs each failed write thread's traceback (tens of lines per thread, hundreds on
  a full disk) and then raises the same error to its caller, which reports it in one line."""
  return "raised an exception" not in record.getMessage()


@contextlib.contextmanager
def keep_in(workdir: str, process: int = 0):
  """Appends the log lines (INFO of acl_jax, the libraries' and Python's warnings) to the
  workdir's train.log (train.p<I>.log on process I > 0) while the block runs, and what ended
  it when an exception did (`record_end`)."""
  name = "train.log" if process == 0 else f"train.p{process}.log"
  handler = logging.FileHandler(os.path.join(workdir, name), delay=True)
  handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
  root, ours = logging.getLogger(), logging.getLogger("acl_jax")
  level = ours.level
  if not ours.isEnabledFor(logging.INFO):  # our INFO lines reach the file in any host program
    ours.setLevel(logging.INFO)
  root.addHandler(handler)
  logging.captureWarnings(True)
  try:
    yield
  except BaseException as e:
    record_end(handler, e)
    raise
  finally:
    root.removeHandler(handler)
    ours.setLevel(level)
    handler.close()


def record_end(handler: logging.Handler, e: BaseException) -> None:
  """Writes what stopped a run to `handler` alone (the tool prints it once, on stderr): the
  message of a user error or a diverged run, an interrupt, or a bug's traceback."""
  exc_info = None
  if isinstance(e, (errors.UserError, errors.Diverged, errors.Preempted)):
    msg = f"Stopped: {e}"
  elif isinstance(e, KeyboardInterrupt):
    msg = "Stopped: interrupted."
  elif isinstance(e, SystemExit):
    msg = f"Stopped: exit status {e.code}."
  else:
    msg, exc_info = "Stopped by a bug (an error that is not about the input):", (
        type(e), e, e.__traceback__)
  handler.handle(logging.LogRecord(__name__, logging.ERROR, __file__, 0, msg, None, exc_info))
