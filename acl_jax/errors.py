"""The errors that input causes, as types of their own: the tools print them in one line,
while any other exception is a bug and keeps its traceback (acl_jax/cli.py).

Light (no jax), so configs, readers and the command-line wrapper can use it.
"""


class UserError(ValueError):
  """Input that cannot work: a config field, a name (task, method, model, metric), a data file
  and what it holds, a workdir. The message says what is wrong and how to fix it.

  A ValueError, as most of them are values that cannot work.
  """


class FileError(UserError, OSError):
  """A file or folder the user named (or the run writes) that is missing, unreadable or cannot
  be written, e.g. on a full disk. The message names the path.

  Also an OSError, so callers that handle files failing (`except OSError`) still do.
  """


class Diverged(FloatingPointError):
  """Training stopped on a non-finite loss or gradient: not a bug in the code, and not input
  the tools can check beforehand, but a run that cannot go on. The message names the step, the
  bad terms and the run's last good checkpoint."""


def open_input(path: str, what: str = "", mode: str = "r", **kwargs):
  """`open(path, mode, **kwargs)` for a file the user named; a FileError that names the path
  (and `what` it is, e.g. "--input") when it is missing, a folder or unreadable."""
  name = f"{what} {path}" if what else path
  try:
    return open(path, mode, **kwargs)  # pylint: disable=consider-using-with,unspecified-encoding
  except IsADirectoryError:
    raise FileError(f"{name} is a folder, not a file; name a file in it.") from None
  except FileNotFoundError:
    raise FileError(f"{name} does not exist.") from None
  except OSError as e:
    raise FileError(f"{name} cannot be read ({e.strerror or e}).") from None


class Preempted(Exception):
  """Training was asked to stop (SIGTERM: a preemption, a scheduler's time limit, `kill`) and
  stopped at a step boundary after checkpointing that step. Not a failure of the run: the same
  command resumes it there. The message names the step and the workdir. train.py exits
  EXIT_PREEMPTED."""


EXIT_PREEMPTED = 128 + 15  # the shell's status for SIGTERM
