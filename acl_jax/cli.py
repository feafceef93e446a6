"""One message per user error: what the entry scripts (train.py, eval.py, predict.py,
export.py) print when the input is wrong.

A user error (a bad flag or config, a missing or malformed file, a busy workdir) prints one
line to stderr and exits with status 2; a traceback is for bugs, or for `--verbose`.
"""
import functools
import logging
import os
import sys

from absl import app, flags

from acl_jax import provenance

VERBOSE = flags.DEFINE_bool("verbose", False, "On an error, print the whole traceback instead "
                            "of its one-line message.")
# What bad input raises: ValueError (a value that cannot work), OSError (a missing, unreadable
# or unwritable file, a full disk), a workdir another run holds, a flag absl refuses, and a
# misused command line (absl's UsageError, which app.run would answer with every flag's help).
USER_ERRORS = (ValueError, OSError, provenance.WorkdirBusy, flags.Error, app.UsageError)
EXIT_USER_ERROR = 2


def fail(message: str) -> None:
  """Prints `message` as the one line of a user error and exits with EXIT_USER_ERROR."""
  logging.shutdown()  # flush what was logged before the message, so it comes last
  print(f"error: {' '.join(str(message).split())}", file=sys.stderr, flush=True)
  sys.exit(EXIT_USER_ERROR)


def _verbose(argv) -> bool:
  try:
    return VERBOSE.value
  except flags.UnparsedFlagAccessError:
    return any(a in ("--verbose", "--verbose=true", "--verbose=True") for a in argv or ())


def user_errors(main):
  """Wraps an absl `main(argv)`: a user error becomes one line (`fail`) unless --verbose."""
  @functools.wraps(main)
  def wrapped(argv):
    try:
      return main(argv)
    except USER_ERRORS as e:
      if _verbose(argv):
        raise
      fail(str(e) or type(e).__name__)
  return wrapped


def parse_flags(argv, closest=None):
  """absl's flag parsing with one-line errors: an unknown flag, a bad value, or a config file
  that does not load print what is wrong and where --help is, not the usage of every flag.

  closest: optional `fn(argv) -> message` naming the nearest config fields for an unknown
    `--config.x` override (whose error ml_collections raises as AttributeError or KeyError).
  """
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    text = str(e)
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
      raise
    fail(f"{type(cause).__name__}: {cause}" if not str(e) else str(e))
  return None
