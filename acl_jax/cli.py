"""One message per user error: what the entry scripts (train.py, eval.py, predict.py,
export.py) print when the input is wrong, and a traceback for anything else.

Exit statuses:
  0: done.
  1: a bug: any exception that is not a user error. Its traceback is printed (train.py also
     keeps it in the workdir's train.log).
  2: a user error (`errors.UserError`: a bad config field or name, a missing, unreadable or
     malformed file, a workdir that does not fit the run; a busy workdir; a bad flag): one
     line to stderr, `--verbose` for the traceback.
  3: training stopped on a non-finite loss or gradient (`errors.Diverged`): one line naming
     the step, the bad terms and the last good checkpoint (train.log keeps it too).
  143 (128 + SIGTERM): training was asked to stop by SIGTERM and stopped at a step boundary
     after checkpointing it (`errors.Preempted`, acl_jax/train/preempt.py): one line naming
     the step; the same command resumes the run there.
"""
import functools
import logging
import os
import re
import sys
import traceback
import warnings

from absl import app, flags

from acl_jax import errors, provenance

VERBOSE = flags.DEFINE_bool("verbose", False, "On an error, print the whole traceback instead "
                            "of its one-line message.")
# What bad input raises: a UserError (a value, name, file or workdir that cannot work, a full
# disk), a workdir another run holds, a flag absl refuses, and a misused command line (absl's
# UsageError, which app.run would answer with every flag's help). A ValueError or OSError of
# any other type comes from the code or a library, and is a bug.
UserError = errors.UserError
USER_ERRORS = (UserError, provenance.WorkdirBusy, flags.Error, app.UsageError)
EXIT_USER_ERROR = 2
EXIT_DIVERGED = 3
EXIT_PREEMPTED = errors.EXIT_PREEMPTED


def fail(message: str, status: int = EXIT_USER_ERROR, prefix: str = "error") -> None:
  """Prints `message` as the one line of a user error (or of a stop, `prefix` "stopped") and
  exits with `status`."""
  logging.shutdown()  # flush what was logged before the message, so it comes last
  print(f"{prefix}: {' '.join(str(message).split())}", file=sys.stderr, flush=True)
  _quiet_teardown()
  sys.exit(status)


def _quiet_teardown() -> None:
  """Keeps the error the last line: work the failed operation left behind reports its own end
  as the process exits (Orbax's aborted reads of a corrupt checkpoint: "Exception ignored in:
  <coroutine ...>" tracebacks, "Task was destroyed" log records, "never awaited" warnings),
  which repeats the error a hundred times in a less readable form."""
  sys.unraisablehook = lambda unraisable: None
  logging.disable(logging.CRITICAL)
  warnings.simplefilter("ignore")


def _verbose(argv) -> bool:
  try:
    return VERBOSE.value
  except flags.UnparsedFlagAccessError:
    return any(a in ("--verbose", "--verbose=true", "--verbose=True") for a in argv or ())


def user_errors(main):
  """Wraps an absl `main(argv)`: a user error or a diverged run becomes one line (`fail`),
  after its traceback with --verbose, and exits 2 (3 for a diverged run) either way; a run
  stopped by SIGTERM is one line too (status 143); any other exception propagates, so its
  traceback is printed (status 1)."""
  @functools.wraps(main)
  def wrapped(argv):
    try:
      return main(argv)
    except errors.Preempted as e:
      fail(str(e), EXIT_PREEMPTED, prefix="stopped")
    except (*USER_ERRORS, errors.Diverged) as e:
      if _verbose(argv):
        traceback.print_exc()
      fail(str(e) or type(e).__name__,
           EXIT_DIVERGED if isinstance(e, errors.Diverged) else EXIT_USER_ERROR)
  return wrapped


def config_value(holder):
  """The config of an ml_collections `config_flags` flag. A config file that did not load
  (missing, or refusing its argument) is a user error, raised here: ml_collections defers it
  to the config's first use."""
  config = holder.value
  try:
    config.keys()
  except (AttributeError, KeyError, ValueError, OSError) as e:
    cause = e.__cause__ or e
    if isinstance(cause, UserError):
      raise cause from None
    raise UserError(str(cause) or type(cause).__name__) from cause
  return config


def parse_flags(argv, closest=None):
  """absl's flag parsing with one-line errors: an unknown flag, a bad value, or a config file
  that does not load print what is wrong and where --help is, not the usage of every flag.

  closest: optional `fn(argv) -> message` naming the nearest config fields for an unknown
    `--config.x` override (whose error ml_collections raises as AttributeError or KeyError).
  """
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    # A config file's UserError reads as its message, without the type's module path.
    text = re.sub(rf"{errors.__name__}\.\w+: ", "", str(e))
    if "Traceback (most recent call last)" in text:  # a config file's own error, as text
      lines = [line for line in text.splitlines() if line.strip()]
      text = f"{lines[0].split(':', 1)[0]}: {lines[-1]}"
    fail(f"{text.rstrip('. ')}. See {os.path.basename(argv[0])} --help.")
  except (AttributeError, KeyError, ValueError, OSError) as e:
    msg = closest(argv) if closest is not None else None
    if msg:
      fail(msg)
    cause = e.__cause__ or e.__context__ or e
    if _verbose(argv):
      traceback.print_exc()
    fail(f"{type(cause).__name__}: {cause}" if not str(e) else str(e))
  return None
