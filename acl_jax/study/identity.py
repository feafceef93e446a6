"""A run's identity: a hash of the config it trains, resolved as train.py resolves it.

Two runs are the same run when their resolved configs are equal, whatever record names them
and however their flags spell it: a grid point at a method's preset value (`loss.lam=0.9`
for CE+SCL) is the preset run, and `optim.lr=5e-5` and `optim.lr=0.00005` are one rate.
The config file is loaded, and its `--config.key=value` overrides applied, by the same
ml_collections flag that train.py defines; the fields that do not change what trains or
what is recorded of it (`RECORD_ONLY`) are left out. `resolve` says in one line why a config
does not resolve (an unknown field, method or task, a value of the wrong type), as train.py
would refuse it.

Imports ml_collections and the config files, not jax.
"""
import functools
import hashlib
import importlib
import importlib.util
import json
import os
import re
import sys
import threading

from acl_jax.errors import UserError

RECORD_ONLY = ("progress",)  # fields that change only what a run prints


_CONFIGS_LOCK = threading.Lock()


def configs_of(checkout: str):
  """The `configs` package that the checkout's config files import (`from configs import
  common`): the one already imported, else `<checkout>/configs` imported by its path. The
  config files are loaded by their absolute paths, so neither the working directory nor
  sys.path changes while a config resolves: threads beside it (the local executor's) see the
  process as it was."""
  with _CONFIGS_LOCK:
    have = sys.modules.get("configs")
    if have is not None:
      return have
    folder = os.path.join(os.path.abspath(checkout), "configs")
    init = os.path.join(folder, "__init__.py")
    if not os.path.isfile(init):
      raise ImportError(f"{checkout} has no configs package ({init}).")
    spec = importlib.util.spec_from_file_location("configs", init,
                                                  submodule_search_locations=[folder])
    module = importlib.util.module_from_spec(spec)
    sys.modules["configs"] = module  # as an import does: the package before its body runs
    try:
      spec.loader.exec_module(module)
    except BaseException:
      del sys.modules["configs"]
      raise
    return module


def _absolute(config: str, cwd: str) -> str:
  path, colon, arg = config.partition(":")
  return os.path.join(cwd, path) + colon + arg


@functools.lru_cache(maxsize=4096)
def _resolved(config: str, overrides: tuple[str, ...], cwd: str) -> str:
  from absl import flags  # pylint: disable=import-outside-toplevel
  from ml_collections import config_flags  # pylint: disable=import-outside-toplevel
  argv = ["identity", f"--config={_absolute(config, cwd)}",
          *(f"--config.{kv}" for kv in overrides)]
  fv = flags.FlagValues()
  holder = config_flags.DEFINE_config_file("config", None, "the config file",
                                           flag_values=fv, lock_config=True, sys_argv=argv)
  configs_of(cwd)
  fv(argv)
  cfg = holder.value.to_dict()
  for key in RECORD_ONLY:
    cfg.pop(key, None)
  return json.dumps(cfg, sort_keys=True, default=str)


def resolved_config(config: str, overrides, cwd: str) -> dict:
  """The config `train.py --config <config> --config.<k>=<v>...` trains, run in `cwd`, as a
  dict (without RECORD_ONLY fields)."""
  return json.loads(_resolved(config, tuple(overrides), os.path.abspath(cwd)))


def resolve(config: str, overrides, cwd: str) -> dict:
  """`resolved_config`, or a UserError that says in one line why train.py would refuse the
  config: its file missing, its argument (task, method) unknown, an override's field unknown
  (with the closest names) or its value of the wrong type."""
  cwd = os.path.abspath(cwd)
  try:
    return resolved_config(config, overrides, cwd)
  except Exception as e:  # pylint: disable=broad-except  # absl, ml_collections, the file's own
    raise UserError(_why(config, tuple(overrides), cwd, e)) from None


def _why(config: str, overrides: tuple[str, ...], cwd: str, e: Exception) -> str:
  path = config.partition(":")[0]
  if not os.path.isfile(os.path.join(cwd, path)):
    return f"no config file {path} in {cwd}."
  text = str(e)
  if "Traceback (most recent call last)" in text:  # the config file's own error, as text
    text = [line for line in text.splitlines() if line.strip()][-1]
    return re.sub(r"^[\w.]*(UserError|Error|Exception): ", "", text.strip())
  if not text.startswith("flag --config"):  # ml_collections' KeyError: an unknown field
    try:
      base = json.loads(_resolved(config, (), cwd))
    except Exception:  # pylint: disable=broad-except
      return text
    for kv in overrides:
      key = kv.partition("=")[0]
      if not _has(base, key):
        return _unknown_field(key, cwd) or f"Unknown config field {key!r}."
  return " ".join(text.split())


def _has(cfg: dict, key: str) -> bool:
  for part in key.split("."):
    if not isinstance(cfg, dict) or part not in cfg:
      return False
    cfg = cfg[part]
  return True


def _unknown_field(key: str, cwd: str) -> str | None:
  """configs/common.py's message for an unknown field (the closest names, the section's
  fields), where the checkout has it."""
  try:
    configs_of(cwd)
    common = importlib.import_module("configs.common")
  except ImportError:
    return None
  return common.unknown_field(common.base_config(), key)


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
