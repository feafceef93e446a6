"""A sweep's runs as jobs: what each one trains, where, and with which command.

A `Job` is one run: its settings (`task=mr,method=acl,loss.lam=0.5,seed=1`, the run's name in
its record), the --config and --set it trains with, and its workdir under the sweep's root
(`<root>/<record>/<name>` for a protocol's runs, `job_of`; `<root>/<name>` ad hoc,
`jobs_of_args`). Each run is one `train.py` process (`command`; a torch arm's, the HF
transformers + PyTorch loop's), so a run stopped at any point resumes from its checkpoints.
Each run records the --config and --set it was started with (`RUN_ARGS`, sweep_args.json): a
rerun that asks for others fails on that run (`changed_args`) instead of mixing them.

On a multi-host job every host runs the same sweep with `-- --distributed` on a root all hosts
share; process 0 (`primary`) runs a finished run's evaluations, writes its row and prunes it,
and each host logs to its own file (`log_name`).

Nothing here imports jax.
"""
import dataclasses
import importlib
import itertools
import os
import socket
import sys

from acl_jax import errors, provenance
from acl_jax.study import identity as ident, loader, planner, records, resolve, runs

# The checkout that train.py and eval.py run in: the config files' paths are relative to it.
REPO = loader.CHECKOUT
TRAIN, EVAL = os.path.join(REPO, "train.py"), os.path.join(REPO, "eval.py")


def check_grid(key: str, values: list[str]) -> None:
  if key in ("seed", "method", "workdir", "task"):
    raise SystemExit(f"--grid {key}=...: use --seeds / --methods (and one sweep per task), "
                     f"not a grid over {key}.")
  bad = [v for v in values if not records.fits_a_name(v)]
  if bad:
    raise SystemExit(f"--grid {key}={','.join(values)}: value {bad[0]!r} cannot be part of a "
                     "workdir name (no '/', '=', ',' or empty values); pass it with --set in "
                     "a sweep of its own root instead.")


def check_set(set_args) -> None:
  for kv in set_args or []:
    if kv.partition("=")[0] in ("seed", "workdir"):
      raise SystemExit(f"--set {kv!r}: the sweep sets the seed (--seeds) and the workdir "
                       "(from its root and the run's settings) itself.")


def plan(args) -> list[dict]:
  """Every run of an ad-hoc sweep as an ordered dict of settings (method, grid fields, seed)."""
  check_set(args.set)
  axes = []
  if args.methods:
    axes.append([("method", m) for m in args.methods.split(",")])
  for g in args.grid or []:
    key, _, values = g.partition("=")
    if not values:
      raise SystemExit(f"--grid {g!r}: expected key=v1,v2,...")
    check_grid(key, values.split(","))
    axes.append([(key, v) for v in values.split(",")])
  axes.append([("seed", s) for s in args.seeds.split(",")])
  return [dict(combo) for combo in itertools.product(*axes)]


def config_arg(args, settings: dict) -> str:
  config = args.config
  if "method" in settings:
    config += ("," if ":" in config else ":") + settings["method"]
  return config


def task_of(config: str) -> str:
  """The task of a config argument (`configs/glue.py:rte,acl` -> rte), or "" without one.
  An argument that starts with a method or `runlocal` (`configs/quickstart.py:runlocal`)
  names no task: the task is the config's own (its resolved task.name)."""
  arg = config.partition(":")[2]
  word = arg.split(",")[0] if arg else ""
  if word and (word == "runlocal" or is_method(word)):
    try:
      return ident.resolved_config(config, (), REPO)["task"]["name"]
    except Exception:  # pylint: disable=broad-except  # refused before any run (check_jobs)
      return ""
  return word


def is_method(word: str) -> bool:
  ident.configs_of(REPO)
  common = importlib.import_module("configs.common")
  return word in common.METHODS or word in common.MULTI_EXIT


@dataclasses.dataclass
class Job:
  """One run: its settings (in name order), the --config and --set it trains with, its
  workdir, and the sweep (record) it belongs to."""
  settings: dict
  config: str
  set: list
  workdir: str
  sweep: str = ""
  early_exit: str = ""
  latest: str = ""

  @property
  def name(self) -> str:
    """The run's name in its record: its settings, the task first."""
    s = self.settings
    if "task" not in s and task_of(self.config):
      s = {"task": task_of(self.config), **s}
    return records.run_name(s)

  @property
  def record_settings(self) -> dict:
    return records.parse_name(self.name)


def jobs_of_args(args) -> list[Job]:
  sweep = os.path.splitext(os.path.basename(args.record))[0] if args.record else ""
  return [Job(s, config_arg(args, s), sorted(args.set or []),
              os.path.join(args.root, records.run_name(s)), sweep) for s in plan(args)]


def job_of(run: planner.Run, root: str) -> Job:
  """The Job of a protocol run (acl_jax/study/planner.py), its workdir under root/<record>/."""
  return Job(dict(run.settings), run.config, list(run.sets),
             os.path.join(root, run.sweep, run.name), run.sweep, run.early_exit, run.latest)


# Each run's record of what the sweep asked of it beyond its name (config and --set flags),
# so a rerun with other flags cannot skip or resume it under settings it was not started with.
RUN_ARGS = runs.SWEEP_ARGS


def run_args(args, settings: dict) -> dict:
  return {"config": config_arg(args, settings), "set": sorted(args.set or [])}


def changed_args(workdir: str, want: dict) -> str | None:
  """How the run's recorded sweep arguments differ from `want`; None if equal or unrecorded
  (runs started before the record existed)."""
  have = runs.read_sweep_args(workdir)
  if have is None or have == want:
    return None
  parts = []
  if have.get("config") != want["config"]:
    parts.append(f"--config {have.get('config')} (now {want['config']})")
  gone = sorted(set(have.get("set", [])) - set(want["set"]))
  new = sorted(set(want["set"]) - set(have.get("set", [])))
  if gone or new:
    parts.append(f"--set {' '.join(gone) or '(none)'} (now {' '.join(new) or '(none)'})")
  return "; ".join(parts)


def torch_command(job: Job) -> list[str]:
  """The HF transformers + PyTorch loop's run (benchmarks/hf_run.py) of a protocol arm with
  framework "torch": the task's data, length, lr and epochs from the run's overrides."""
  over = dict(kv.split("=", 1) for kv in job.set)
  over.update({k: v for k, v in job.settings.items() if k not in ("task", "method")})
  need = ("task.data_dir", "task.max_length", "optim.lr", "num_epochs")
  missing = [k for k in need if k not in over]
  if missing or job.settings.get("method") != "ce":
    raise ValueError(f"{job.name}: a torch run trains CE with {', '.join(need)} set; it "
                     f"lacks {', '.join(missing) or 'method=ce'}.")
  return [sys.executable, "-m", "benchmarks.hf_run", "--workdir", job.workdir,
          "--task", job.settings.get("task") or task_of(job.config),
          "--data_dir", over["task.data_dir"], "--max_length", over["task.max_length"],
          "--lr", over["optim.lr"], "--epochs", over["num_epochs"], "--seed", str(over["seed"])]


def command(job: Job, extra: list[str]) -> list[str]:
  if job.settings.get("framework", "jax") == "torch":
    return torch_command(job)
  cmd = [sys.executable, TRAIN, "--config", job.config, "--workdir",
         job.workdir, f"--config.seed={job.settings['seed']}", "--config.progress=False"]
  cmd += [f"--config.{kv}" for kv in job.set]
  cmd += [f"--config.{k}={v}" for k, v in job.settings.items()
          if k not in ("method", "seed", "task")]
  return cmd + extra


def train_command(args, settings: dict, workdir: str) -> list[str]:
  return command(Job(settings, config_arg(args, settings), args.set or [], workdir), args.extra)


def child_env(args) -> dict:
  """What each train.py run sets over its host's environment: the shared compilation cache
  (ours, when this environment names one)."""
  cache = getattr(args, "compile_cache", None)
  if cache is None:
    cache = os.path.join(args.root, ".jax_cache")
  if not cache or cache == "none":
    return {"ACL_JAX_COMPILE_CACHE": "0"}  # nor train.py's own default (acl_jax.compile_cache)
  return {"JAX_COMPILATION_CACHE_DIR": os.environ.get("JAX_COMPILATION_CACHE_DIR")
          or os.path.abspath(cache)}


def has_weights(workdir: str) -> bool:
  return bool(provenance.checkpoint_steps(workdir, "best")
              or provenance.checkpoint_steps(workdir, "ckpt"))


def primary(extra: list[str]) -> bool | None:
  """Whether this sweep process is the one that evaluates, records and prunes finished runs:
  True on one host or for `--process_id=0`, False for other process ids, None on a
  `--distributed` job that names no process id (every host then records, none prunes)."""
  pid = [x.split("=", 1)[1] for x in extra if x.startswith("--process_id=")]
  if pid:
    return pid[-1] == "0"
  if any(x.split("=", 1)[0] in ("--distributed", "--coordinator") for x in extra):
    return None
  return True


# train.py flags after `--` that would override what the sweep sets per run (and names the
# run's workdir after) or records in sweep_args.json.
SWEEP_OWNED = ("--config", "--workdir")


def check_extra(extra: list[str]) -> None:
  owned = [x for x in extra if x.split("=", 1)[0].split(".", 1)[0] in SWEEP_OWNED]
  if owned:
    raise SystemExit(f"After '--': {owned} would override the run's settings, which the sweep "
                     "sets and names its workdirs after; use --set key=value or --grid.")


def log_name(extra: list[str]) -> str:
  """console.log (the run's whole output; train.py's own train.log holds its log lines), or
  one per process on a multi-host job (all hosts run the sweep on one shared root):
  `console.p<process_id>.log`, else `console.<hostname>.log`."""
  pid = [x.split("=", 1)[1] for x in extra if x.startswith("--process_id=")]
  if pid:
    return f"console.p{pid[-1]}.log"
  if any(x.split("=", 1)[0] in ("--distributed", "--coordinator") for x in extra):
    return f"console.{socket.gethostname()}.log"
  return "console.log"


def check_jobs(jobs: list[Job]) -> None:
  """Refuses (UserError) an ad-hoc sweep one of whose runs train.py would refuse (an unknown
  method or field in --config, --set or --grid, a value of the wrong type) or whose data files
  are not there, before any of them starts."""
  for job in jobs:
    if job.settings.get("framework", "jax") != "jax":
      continue
    over = [*job.set, *(f"{k}={v}" for k, v in job.settings.items()
                        if k not in resolve.NOT_FIELDS)]
    try:
      cfg = ident.resolve(job.config, over, REPO)
    except errors.UserError as e:
      raise errors.UserError(f"run {job.name} (--config {job.config}) does not resolve: {e} "
                             "Fix --config, --set or --grid.") from None
    gone = resolve.missing_data(cfg, REPO)
    if gone:
      raise errors.UserError(f"run {job.name}: {gone} does not exist (read from {REPO}).")
