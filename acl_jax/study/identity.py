"""A run's identity: a hash of the config it trains, resolved as train.py resolves it.

Two runs are the same run when their resolved configs are equal, whatever record names them
and however their flags spell it: a grid point at a method's preset value (`loss.lam=0.9`
for CE+SCL) is the preset run, and `optim.lr=5e-5` and `optim.lr=0.00005` are one rate.
The config file is loaded, and its `--config.key=value` overrides applied, by the same
ml_collections flag that train.py defines; the fields that do not change what trains or
what is recorded of it (`RECORD_ONLY`) are left out.

Imports ml_collections and the config files, not jax.
"""
import contextlib
import functools
import hashlib
import json
import os
import sys

RECORD_ONLY = ("progress",)  # fields that change only what a run prints


@contextlib.contextmanager
def _at(folder: str):
  old, old_path = os.getcwd(), list(sys.path)
  os.chdir(folder)
  sys.path.insert(0, folder)
  try:
    yield
  finally:
    os.chdir(old)
    sys.path[:] = old_path


@functools.lru_cache(maxsize=4096)
def _resolved(config: str, overrides: tuple[str, ...], cwd: str) -> str:
  from absl import flags  # pylint: disable=import-outside-toplevel
  from ml_collections import config_flags  # pylint: disable=import-outside-toplevel
  argv = ["identity", f"--config={config}", *(f"--config.{kv}" for kv in overrides)]
  fv = flags.FlagValues()
  holder = config_flags.DEFINE_config_file("config", None, "the config file",
                                           flag_values=fv, lock_config=True, sys_argv=argv)
  with _at(cwd):
    fv(argv)
    cfg = holder.value.to_dict()
  for key in RECORD_ONLY:
    cfg.pop(key, None)
  return json.dumps(cfg, sort_keys=True, default=str)


def resolved_config(config: str, overrides, cwd: str) -> dict:
  """The config `train.py --config <config> --config.<k>=<v>...` trains, run in `cwd`, as a
  dict (without RECORD_ONLY fields)."""
  return json.loads(_resolved(config, tuple(overrides), os.path.abspath(cwd)))


def run_identity(config: str, overrides, cwd: str) -> str:
  """The hash (sha256, hex) of the resolved config: equal for the same run. A config that
  does not resolve here (its file or an override field unknown: train.py would refuse it)
  is named by its config and sorted overrides as written."""
  over = tuple(sorted(overrides))
  try:
    text = _resolved(config, over, os.path.abspath(cwd))
  except Exception:  # pylint: disable=broad-except  # absl, ml_collections and the file's own
    text = json.dumps({"unresolved": [config, *over]})
  return hashlib.sha256(text.encode()).hexdigest()
