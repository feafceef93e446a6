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


def settings_identity(config: str, sets, settings: dict, checkout: str) -> str:
  """The identity of a sweep's run: its --config, its --set overrides and its settings (grid
  fields and seed; task and method are in the config argument). A grid value that is the
  method's preset is the preset run."""
  over = [*sets, *(f"{k}={v}" for k, v in settings.items() if k not in ("task", "method"))]
  return run_identity(config, over, checkout)


def recorded_elsewhere(sweep: str, rows: dict[str, list[dict]],
                       checkout: str) -> dict[str, dict]:
  """{identity: row} of every row of the records other than `sweep` (a run two sweeps share
  is trained once, and taken from the other's row)."""
  out = {}
  for name, rs in rows.items():
    if name == sweep:
      continue
    for r in rs:
      if "config" in r and "seed" in r:
        out.setdefault(settings_identity(r["config"], r.get("set", []),
                                         {**r.get("overrides", {}), "seed": r["seed"]},
                                         checkout), r)
  return out


def not_reused(runs: list, rows: dict[str, list[dict]], checkout: str) -> list:
  """The planned runs (planner.Run) that will train: those whose identity no other record
  holds (a run there, such as a λ grid's preset point, is taken from its row instead)."""
  elsewhere, out = {}, []
  for run in runs:
    if run.sweep not in elsewhere:
      elsewhere[run.sweep] = recorded_elsewhere(run.sweep, rows, checkout)
    if settings_identity(run.config, run.sets, dict(run.settings), checkout) \
        not in elsewhere[run.sweep]:
      out.append(run)
  return out
