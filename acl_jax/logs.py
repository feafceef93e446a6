"""Logging for the command-line tools: our INFO lines, the libraries' warnings only.

Orbax logs every checkpoint manager it opens and every restore at INFO through absl (about 40
lines before eval.py's result), and datasets and jax announce themselves; none of it says
anything about the run.
"""
import logging
import sys

# Loggers kept at WARNING. Orbax logs through absl's logger, so "absl" covers it.
NOISY = ("absl", "orbax", "jax", "datasets", "httpx", "urllib3", "filelock")


def setup(stream=sys.stdout, level: int = logging.INFO) -> None:
  """INFO (by default) for acl_jax on `stream`, WARNING for the NOISY libraries."""
  logging.basicConfig(level=level, stream=stream,
                      format="%(asctime)s %(levelname)s %(message)s")
  logging.getLogger().setLevel(level)
  for name in NOISY:
    logging.getLogger(name).setLevel(logging.WARNING)
  try:
    from absl import logging as absl_logging  # pylint: disable=import-outside-toplevel
    absl_logging.set_verbosity(absl_logging.WARNING)
  except ImportError:
    pass
