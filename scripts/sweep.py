r"""Resumable sweeps over methods, config fields and seeds; each finished run becomes a row of
the sweep's record (results/records/<sweep>.jsonl, acl_jax/study/records.py).

The protocol behind RESULTS.md is fixed in studies/papers.py, its stages run by --stage:

  python -m scripts.sweep --status --runs        # every stage: done, left, machine-hours
  nohup nice -n 19 python -m scripts.sweep --stage 1 --workers 2 > runs/stage1.log 2>&1 &

Ad hoc, a grid on the command line (the record is optional):

  python -m scripts.sweep --root runs/sweeps/sst2 --config configs/glue.py:sst2 \
      --methods ce,scl,acl_embed,acl --seeds 0,1,2 \
      --set task.data_dir=../shared/data/glue --set task.max_train_examples=2000 \
      --grid loss.lam=0.1,0.5,0.9 --record results/records/sst2_lam.jsonl

Every run gets its own workdir under the root (`runs/sweeps/<record>` for a stage's runs),
named from its settings (`task=mr,method=acl,loss.lam=0.5,seed=1`), and is one `train.py`
process, so re-running the same command skips finished runs and resumes half-finished ones
from their checkpoints. A run is done once its row is in the record, or once train.py has
written its results.json (the row is then written from the folder). So a fresh machine with
no run folders trains only what the records lack, and a sweep stopped at any point (a kill,
a reboot) goes on where it stopped when started again. Each run records the --config and
--set it was started with (`sweep_args.json`): a rerun that asks for others fails on that run
instead of mixing them. A run whose settings are those of a run already recorded by another
sweep (the same config, overrides and seed) takes that row instead of training again.

After a run finishes, a named sweep also runs what its spec asks for (eval.py's early-exit
sweep on dev, timed on seed 0; the final weights' scores), writes the row, and then deletes
the run's checkpoints (`--keep_checkpoints` keeps them): the row holds what the tables need.

The summary of a root (`summary.md`, `summary.json`: mean +- std over seeds and the seed
count for every metric of every evaluated split) is rewritten after an ad-hoc sweep, or with
`--root R --aggregate_only`. Extra train.py flags (e.g. `--distributed` on a multi-host job)
go after `--`; `--config...` and `--workdir` may not, as the sweep sets them.

On a multi-host job (TPU pod, GPU cluster) every host runs the same sweep command with
`-- --distributed` and a root that all hosts share (as Orbax's multi-host checkpoints need
anyway). Process 0 writes results.json; every host reads the same files, so all hosts skip and
resume the same runs and enter each train.py together. With each host's process id on its
command line (`-- --coordinator=HOST:PORT --num_processes=N --process_id=I`), process 0 alone
runs a finished run's evaluations, writes its row and deletes its checkpoints (the record's
appends are locked, and a run already there is not written again). Each host logs to its own
file in the workdir (`console.p<I>.log` with `--process_id=I`, else `console.<hostname>.log`;
train.py keeps its own log lines in train.log beside it).

Runs train through an executor of acl_jax/study: `--executor local` (this machine, `--workers`
runs at a time, each pinned to its share of the cores) or `--executor ray --address ADDR` (one
Ray task per run on the cluster's nodes). Planning stays in the driver: it hands out what the
records release, and plans again after every result. Each run is claimed in its workdir
before it starts (acl_jax/study/claims.py), and everything a run writes happens under that
claim, on the host that trains it (the Ray task, or the local executor's thread): the attempt
is opened (`records.begin_attempt`), train.py runs, its wall and CPU seconds are added
(`records.add_time`), then a finished run's post steps run, its row is appended (under the
record's lock, and not when the run is there already) and its checkpoints go (`RunSteps`). So
two drivers at once train and record each run once: a run another driver holds is waited for
and planned again, not failed; and a driver killed midway leaves claims that go stale, which
the next driver takes over, resuming the runs from their checkpoints. On a cluster, the
checkout, the root and the records must be at the same paths on every node (shared storage).

The runs share JAX's persistent compilation cache (`--compile_cache`, default
`<root>/.jax_cache`; an already set `JAX_COMPILATION_CACHE_DIR` wins): runs that differ only
in seed or loss weights compile the same step, so every run after the first loads it from disk
instead of compiling it again (about 8 s per batch shape for MiniLM on 2 CPU cores). Cached
executables are the same programs, so results do not change.
"""
import argparse
import dataclasses
import importlib.util
import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

from acl_jax import errors, provenance  # light: no jax
from acl_jax.study import (aggregate, executors, identity as ident, loader, planner,
                           protocol as proto, ray_executor, records, runs, slots,
                           status as study_status)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN, EVAL = os.path.join(REPO, "train.py"), os.path.join(REPO, "eval.py")

run_name = records.run_name
parse_name = records.parse_name


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
  if word and (word == "runlocal" or _is_method(word)):
    try:
      return ident.resolved_config(config, (), REPO)["task"]["name"]
    except Exception:  # pylint: disable=broad-except  # refused before any run (check_jobs)
      return ""
  return word


def _is_method(word: str) -> bool:
  from configs import common  # pylint: disable=import-outside-toplevel
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
    return run_name(s)

  @property
  def record_settings(self) -> dict:
    return parse_name(self.name)


def jobs_of_args(args) -> list[Job]:
  sweep = os.path.splitext(os.path.basename(args.record))[0] if args.record else ""
  return [Job(s, config_arg(args, s), sorted(args.set or []),
              os.path.join(args.root, run_name(s)), sweep) for s in plan(args)]


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


def _command(job: Job, extra: list[str]) -> list[str]:
  if job.settings.get("framework", "jax") == "torch":
    return torch_command(job)
  cmd = [sys.executable, TRAIN, "--config", job.config, "--workdir",
         job.workdir, f"--config.seed={job.settings['seed']}", "--config.progress=False"]
  cmd += [f"--config.{kv}" for kv in job.set]
  cmd += [f"--config.{k}={v}" for k, v in job.settings.items()
          if k not in ("method", "seed", "task")]
  return cmd + extra


def train_command(args, settings: dict, workdir: str) -> list[str]:
  return _command(Job(settings, config_arg(args, settings), args.set or [], workdir), args.extra)


def child_env(args) -> dict:
  """What each train.py run sets over its host's environment: the shared compilation cache
  (ours, when this environment names one)."""
  cache = getattr(args, "compile_cache", None)
  if cache is None:
    cache = os.path.join(args.root, ".jax_cache")
  if not cache or cache == "none":
    return {}
  return {"JAX_COMPILATION_CACHE_DIR": os.environ.get("JAX_COMPILATION_CACHE_DIR")
          or os.path.abspath(cache)}


def has_weights(workdir: str) -> bool:
  return bool(provenance.checkpoint_steps(workdir, "best")
              or provenance.checkpoint_steps(workdir, "ckpt"))


def _local_call(cmd, **kw) -> tuple[int, float]:
  """A command from the repository root on this machine: (exit code, CPU seconds)."""
  return executors.call(cmd, cwd=REPO, **kw)


def post_steps(job: Job, call=_local_call, workers: int = 1) -> int:
  """eval.py after training, as the sweep asks: the early-exit sweep on dev (timed on seed 0,
  untimed on the others) and the final weights' scores. `call(cmd, stdout=..., stderr=...)`
  runs each as the run's own command, returning (exit code, CPU seconds). Returns the first
  failing exit code."""
  wd, ev = job.workdir, [sys.executable, EVAL, "--workdir", job.workdir]
  steps = []
  if job.early_exit and not os.path.isfile(os.path.join(wd, "early_exit_entropy_dev.json")):
    steps.append(ev + ["--exit_policy", "entropy", "--thresholds", job.early_exit, "--split",
                       "dev"] + ([] if str(job.settings["seed"]) == "0" else
                                 ["--exit_repeats", "0"]))
  if job.latest and not os.path.isfile(os.path.join(wd, "results_latest.json")):
    steps.append(ev + ["--checkpoint", "latest", "--split", job.latest])
  for cmd in steps:
    if not has_weights(wd):
      print(f"  {wd} has no checkpoints left for: {' '.join(cmd[2:])}", flush=True)
      return 1
    records.begin_attempt(wd)  # an eval stopped with its runner leaves it open: lost
    t0 = time.time()
    with open(os.path.join(wd, "eval.log"), "a") as log:
      rc, cpu = call(cmd, stdout=log, stderr=subprocess.STDOUT)
    records.add_time(wd, time.time() - t0, workers, cpu=cpu)
    if rc:
      print(f"  eval FAILED (exit {rc}); see {os.path.join(wd, 'eval.log')}", flush=True)
      return rc
  return 0


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


def finish(job: Job, record: str | None, keep_checkpoints: bool, extra: list[str] = (),
           call=_local_call, workers: int = 1) -> int:
  """A finished run's post steps, its row in the record, then (named sweeps) its checkpoints
  removed. Returns non-zero when a post step failed (the row is then not written). On a
  multi-host job only process 0 does this (`primary`)."""
  first = primary(list(extra))
  if first is False:
    return 0
  if first is None:  # no process id: post steps and pruning on every host would collide
    keep_checkpoints = True
    if job.early_exit or job.latest:
      print(f"  {job.name}: give each host --process_id so that process 0 runs the "
            "evaluations this sweep asks for; recorded without them.", flush=True)
      job = dataclasses.replace(job, early_exit="", latest="")
  rc = post_steps(job, call, workers)
  if rc or not record:
    return rc
  row = records.row_from_run(job.workdir, job.sweep, job.record_settings, job.config, job.set)
  if records.append(record, row):  # under its lock, and not when the run is there already
    print(f"  recorded in {os.path.relpath(record, REPO)}", flush=True)
  if not keep_checkpoints:
    for part in ("ckpt", "best"):
      shutil.rmtree(os.path.join(job.workdir, part), ignore_errors=True)
  return 0


@dataclasses.dataclass(frozen=True)
class RunSteps(executors.Steps):
  """What a sweep run does around train.py, on the host that trains it and under the run's
  claim (so once, whatever the drivers): the attempt's time (`records.begin_attempt`, then
  `records.add_time` with the executor's wall and CPU seconds), then for a finished run its
  post steps, its row and the pruning of its checkpoints (`finish`). A run that train.py had
  finished (its row, evaluations or pruning left undone) does only the latter."""
  job: Job
  record: str
  keep_checkpoints: bool
  extra: tuple = ()
  workers: int = 1

  def done(self) -> bool:
    """Whether nothing is left: its row is in the record (read again now; without a record,
    train.py finished it)."""
    if self.record:
      return any(r["run"] == self.job.name for r in records.read(self.record))
    return provenance.run_finished(self.job.workdir)

  def before(self, spec):
    if provenance.run_finished(self.job.workdir):
      # an attempt stopped after train.py finished, before its time was added, is lost
      records.end_lost_attempt(self.job.workdir)
      return False
    records.begin_attempt(self.job.workdir)
    return True

  def after(self, spec, result, call):
    wd = self.job.workdir
    if result.detail != executors.NOT_NEEDED:
      records.add_time(wd, result.wall_s, self.workers, attempt=True, cpu=result.cpu_s)
    if result.returncode != 0 or not provenance.run_finished(wd):
      return result
    rc = finish(self.job, self.record, self.keep_checkpoints, list(self.extra), call,
                self.workers)
    return dataclasses.replace(result, returncode=rc,
                               detail=f"post steps failed (exit {rc})" if rc else result.detail)


def run_done(spec: executors.RunSpec) -> bool:
  """The executors' `finished` for sweep runs (`RunSteps.done`)."""
  return spec.steps.done()


def make_executor(args) -> executors.Executor:
  """--executor local (this machine, --workers runs at a time) or ray (--address)."""
  if getattr(args, "executor", "local") == "ray":
    if primary(args.extra) is not True:
      raise SystemExit("A multi-host job runs the same sweep on every host: use --executor "
                       "local there.")
    return ray_executor.RayExecutor(args.address or None)
  return executors.LocalExecutor(slots=getattr(args, "workers", 1) or 1)


def run_spec(job: Job, args, record: str, keep_checkpoints: bool) -> executors.RunSpec:
  """The executor's spec of a sweep run: train.py with its steps (`RunSteps`). On a
  multi-host job every process claims the run for itself (they all enter train.py
  together), under `<workdir>/.process/<log name>`."""
  claims_in = job.workdir
  if primary(args.extra) is not True:
    claims_in = os.path.join(job.workdir, ".process", log_name(args.extra))
  return executors.RunSpec(
      job.name, tuple(_command(job, args.extra)), claims_in, cwd=REPO, env=child_env(args),
      cpus=RAY_TASK_CPUS,  # what Ray schedules by; the local executor's slots ignore it
      log=os.path.join(job.workdir, log_name(args.extra)),
      steps=RunSteps(job, record or "", keep_checkpoints, tuple(args.extra),
                     round(wall_per_machine_s(args))))


def prepare(job: Job, args, record: str | None, done: set, elsewhere: dict,
            keep_checkpoints: bool, tag: str = "") -> executors.RunSpec | None:
  """The run's spec, or None when there is nothing to hand out: recorded (here or, the same
  run, in another record: its row is taken), or refused (a workdir started with other flags;
  without --keep_going that ends the sweep)."""
  wd = job.workdir
  want = {"config": job.config, "set": sorted(job.set)}
  if job.name in done:
    print(f"{tag} done (recorded): {job.name}", flush=True)
    return None
  problem = None
  if os.path.islink(wd) and not os.path.exists(wd):
    problem = (f"{wd} is a link to a missing run ({os.readlink(wd)}); remove the link to "
               "train this run here.")
  elif changed := changed_args(wd, want):
    problem = (f"{wd} was started with {changed}: its results would not be this sweep's. "
               "Use another --root, or move the run away to train it again.")
  if problem:
    print(f"{tag} FAILED: {problem}", flush=True)
    if not args.keep_going:
      raise SystemExit(1)
    return None
  if provenance.run_finished(wd):
    print(f"{tag} done: {wd}", flush=True)
    if args.dry_run or not (record or job.early_exit or job.latest):
      return None
    return run_spec(job, args, record, keep_checkpoints)  # its post steps and row
  same = elsewhere.get(ident.settings_identity(job.config, job.set, job.settings, REPO))
  if same is not None:
    print(f"{tag} done (the same run is in {same['sweep']}'s record): {job.name}", flush=True)
    if not args.dry_run:
      records.append(record, records.make_row(**{
          **same, "sweep": job.sweep, "run": job.name, "set": sorted(job.set),
          "overrides": {k: v for k, v in job.record_settings.items() if k not in records.OWN},
          "reused_from": same["sweep"]}))
    return None
  spec = run_spec(job, args, record, keep_checkpoints)
  print(f"{tag} run: {' '.join(spec.argv)}", flush=True)
  if args.dry_run:
    return None
  os.makedirs(wd, exist_ok=True)
  provenance.write_atomic(os.path.join(wd, RUN_ARGS), json.dumps(want, indent=2))
  return spec


def error_line(log: str, tail_bytes: int = 65536) -> str:
  """The line of a run's log that says why it failed: the entry script's own one-line error
  (`error: ...`, acl_jax/cli.py), else the last line of a traceback (`SomeError: ...`); ""
  when the log has neither (or is missing)."""
  try:
    with open(log, "rb") as f:
      f.seek(max(0, os.path.getsize(log) - tail_bytes))
      lines = f.read().decode("utf-8", "replace").splitlines()
  except OSError:
    return ""
  lines = [line.strip() for line in lines if line.strip()]
  for line in reversed(lines):
    if line.startswith("error: "):
      return line
  for i, line in enumerate(lines):
    if line.startswith("Traceback (most recent call last)"):
      ends = [x for x in lines[i:] if re.match(r"^[\w.]+(Error|Exception|Exit)\b", x)]
      if ends:
        return ends[-1]
  return ""


# How often a driver asks again for runs that another driver holds.
POLL_S = 20.0


def drive(runner: executors.Executor, next_spec, keep_going: bool = True,
          poll_s: float = POLL_S) -> set[str]:
  """Hands runs out as `next_spec(skip)` plans them, up to the runner's capacity, until it
  plans none and none runs; returns the names of the runs that failed.

  `next_spec(skip)` gives the next run to hand out (None: none now), planned again from the
  records after every result, skipping the runs named in `skip` (out, failed, or held by
  another driver). A run held by another driver is not failed: its owner records it, or its
  claim goes stale and it is asked for again, every `poll_s` seconds. Without `keep_going`,
  a failure ends the sweep (SystemExit) once the runs out have ended."""
  out, failed, held, ended = {}, set(), set(), set()
  cap, last_poll = runner.capacity(), time.time()
  try:
    while True:
      while len(out) < cap:
        spec = next_spec(set(out) | failed | held | ended)
        if spec is None:
          break
        out[spec.identity] = spec
        runner.submit(spec, run_done)
      if not out:
        if not held:
          return failed
        time.sleep(max(0.0, last_poll + poll_s - time.time()))
      res = runner.wait(timeout=max(0.1, last_poll + poll_s - time.time())) if out else None
      if time.time() >= last_poll + poll_s:
        held.clear()  # plan them again: recorded by now, or free to take over
        last_poll = time.time()
      if res is None:
        continue
      spec = out.pop(res.identity, None)
      where = f" on {res.host}" if res.host else ""
      if res.ok:
        ended.add(res.identity)
        took = f" in {res.wall_s:.0f} s{where}" if res.status == executors.RAN else ""
        print(f"  {res.identity}: {res.status}{took}", flush=True)
      elif res.status == executors.LATE:  # queued past its latest start: not this driver's
        ended.add(res.identity)
        print(f"  {res.identity}: {res.status} ({res.detail}); left for a later window",
              flush=True)
      elif res.status in (executors.CLAIMED, executors.LOST):
        print(f"  {res.identity}: {res.status} ({res.detail}); waiting for its row", flush=True)
        held.add(res.identity)
      else:
        why = error_line(spec.log) if spec is not None and spec.log else ""
        print(f"  {res.identity} FAILED ({res.status}, exit {res.returncode}{where}"
              f"{'; ' + res.detail if res.detail else ''})"
              + (f": {why}" if why else "")
              + (f"; see {spec.log}" if spec is not None and spec.log else ""), flush=True)
        failed.add(res.identity)
        if not keep_going:
          raise SystemExit(res.returncode or 1)
  finally:
    runner.close()


def run_jobs(jobs: list[Job], args, record: str | None = None,
             keep_checkpoints: bool = True) -> set[str]:
  """Trains each job unless recorded (here or, the same run, in another record), resuming a
  part-trained one, on the executor `args` names (`make_executor`); returns the names of the
  runs that failed."""
  os.makedirs(args.root, exist_ok=True)
  done = {r["run"] for r in records.read(record)} if record else set()
  elsewhere = (ident.recorded_elsewhere(jobs[0].sweep, records.read_all(), REPO)
               if record and jobs and jobs[0].sweep else {})
  specs = [prepare(job, args, record, done, elsewhere, keep_checkpoints,
                   f"[{i + 1}/{len(jobs)}]") for i, job in enumerate(jobs)]
  specs = [s for s in specs if s is not None]
  if not specs:
    return set()

  def next_spec(skip):
    recorded = {r["run"] for r in records.read(record)} if record else set()
    return next((s for s in specs if s.identity not in skip | recorded
                 and (record or not provenance.run_finished(s.steps.job.workdir)
                      or s.steps.job.early_exit or s.steps.job.latest)), None)
  failed = drive(make_executor(args), next_spec, args.keep_going)
  if failed:
    print(f"{len(failed)} run(s) FAILED: {', '.join(sorted(failed))}", flush=True)
  return failed


def check_jobs(jobs: list[Job]) -> None:
  """Refuses (UserError) an ad-hoc sweep one of whose runs train.py would refuse (an unknown
  method or field in --config, --set or --grid, a value of the wrong type) or whose data files
  are not there, before any of them starts."""
  from acl_jax.study import resolve  # pylint: disable=import-outside-toplevel
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


def run_all(args) -> set[str]:
  """An ad-hoc sweep (--root, --config, --methods, --grid, --seeds); the runs that failed."""
  jobs = jobs_of_args(args)
  check_jobs(jobs)
  return run_jobs(jobs, args, getattr(args, "record", None)) or set()


def parse_until(text: str) -> float | None:
  """--until: a time of day (HH:MM, the next such time) or seconds from now; None if empty."""
  if not text:
    return None
  if not re.fullmatch(r"([01]?\d|2[0-3]):[0-5]\d|\d+(\.\d*)?", text.strip()):
    raise errors.UserError(f"--until {text}: give a time of day as HH:MM (e.g. 09:00 or "
                           "17:30) or seconds from now (e.g. 3600).")
  text = text.strip()
  if ":" in text:
    hh, mm = (int(x) for x in text.split(":"))
    now = time.localtime()
    t = time.mktime((now.tm_year, now.tm_mon, now.tm_mday, hh, mm, 0, 0, 0, -1))
    return t if t > time.time() else t + 86400
  return time.time() + float(text)


# The cores a run asks a Ray cluster for.
RAY_TASK_CPUS = 1.0


def wall_per_machine_s(args) -> float:
  """A run's wall seconds per second of the estimates (`Protocol.estimate_seconds`: seconds of
  this whole machine): this machine's cores over the cores the run gets. `--workers` runs
  share the cores here; a Ray task gets RAY_TASK_CPUS of a node, taken to be like this
  machine."""
  if getattr(args, "executor", "local") == "ray":
    return max(1.0, len(slots.host_cores()) / RAY_TASK_CPUS)
  return float(getattr(args, "workers", 1) or 1)


def local_gpu(args) -> str:
  """The GPU that `--executor local` runs train on here, as the records name it; ""
  on a CPU host or with another executor."""
  return slots.cuda_device_name() if getattr(args, "executor", "local") == "local" else ""


def host_rates(rows: dict, told: dict | None, gpu: str = "") -> dict:
  """The estimates' seconds per epoch on this machine (`study_status.rates_on`): the records'
  CPU rates, scaled by how much slower or faster this CPU, or this host's `gpu`
  (`local_gpu`), ran the runs it shares with them. A new factor is printed once (`told`
  holds the last; None prints every time)."""
  host = study_status.rates_on(rows, study_status.cpu_of({"timed_on": records.machine()}), gpu)
  key = (round(host.factor, 2), host.pairs, host.own)
  if told is None or told.get("key") != key:
    print(f"estimates for {gpu or 'this CPU'}: x{host.factor:.2f} the "
          f"{'CPUs' if gpu else 'other CPUs'}' rates, from {host.pairs} (task, method) pairs "
          f"timed both here and elsewhere; {host.own} timed here keep their own", flush=True)
    if told is not None:
      told["key"] = key
  return host.rates


def start_order(run, stage_record: str, part_trained: bool, est: float,
                deadline: float | None) -> tuple:
  """The sort key of a released run, first to start first. Part-trained runs: a stop between
  runs should leave as little half-done. Then the gates' runs (lr, anchor, budget: those not
  in the stage's own record), each of which releases a task's arms. Before a deadline, then
  the longest that still fit: short runs fill the window's end, where a long one would no
  longer start (and would wait for the next window's start). Otherwise the planner's order
  (the sort is stable)."""
  return (not part_trained, run.sweep == stage_record, 0.0 if deadline is None else -est)


def run_stage(stage: int, args) -> None:
  """Trains a stage's runs as the protocol's gates release them, on the executor `args` names
  (`make_executor`: `--workers` runs at a time here, each pinned to its own cores when there
  are several, or a Ray cluster's), planning again after every run. With `--until`, a run
  starts only if its estimate ends before then (`start_order`: which first)."""
  p = args.study
  deadline = parse_until(args.until)
  root = args.root = os.path.abspath(args.root or os.path.join(REPO, "runs", "sweeps"))
  from acl_jax.study import resolve  # pylint: disable=import-outside-toplevel
  resolve.check_data(p, REPO)
  if not args.dry_run:
    for name in sorted(os.listdir(records.RECORDS)) if os.path.isdir(records.RECORDS) else ():
      path = os.path.join(records.RECORDS, name)
      if name.endswith(".jsonl") and (line := records.repair(path)):
        print(f"{path}:{line}: a row cut short by a crash mid-write, removed; its run is "
              "collected again from its folder, or trained", flush=True)
  gpu = local_gpu(args)  # once: the host's GPU does not change during a sweep
  if args.dry_run:
    rows = records.read_all()
    ready, waiting = study_status.stage_runs(p, stage, rows)
    rates = host_rates(rows, None, gpu)
    per_s = wall_per_machine_s(args)
    for run in ready:
      est = per_s * p.estimate_seconds(run.task, run.method, run.epochs, rates)
      print(f"{run.sweep}: {run.name} (~{est / 60:.0f} min): {' '.join(run.sets)}")
    for task, what in waiting.items():
      print(f"{task}: waits on {what}")
    return

  declined, told = set(), {}

  def next_spec(skip):
    skip = skip | declined
    while True:
      rows = records.read_all()
      ready, _ = study_status.stage_runs(p, stage, rows)
      rates = host_rates(rows, told, gpu)
      per_s = wall_per_machine_s(args)
      est = {r.name: per_s * p.estimate_seconds(r.task, r.method, r.epochs, rates)
             for r in ready}
      ready.sort(key=lambda r: start_order(
          r, p.stage_record[stage], bool(provenance.checkpoint_steps(job_of(r, root).workdir)),
          est[r.name], deadline))
      for run in ready:
        job = job_of(run, root)
        if job.name in skip:
          continue
        if deadline is not None and time.time() + 1.15 * est[run.name] > deadline:
          continue
        try:
          spec = prepare(job, args, records.path_of(job.sweep),
                         {r["run"] for r in rows.get(job.sweep, [])},
                         ident.recorded_elsewhere(job.sweep, rows, REPO),
                         args.keep_checkpoints,
                         f"[{job.sweep}, ~{est[run.name] / 60:.0f} min]")
        except SystemExit:
          spec = None
          print(f"  {job.name}: not retried by this process", flush=True)
        if spec is None:  # recorded meanwhile, taken from another record, or refused
          declined.add(job.name)
          break
        if deadline is not None:  # not started by then (queued on a busy cluster): LATE
          spec = dataclasses.replace(spec, start_by=deadline - 1.15 * est[run.name])
        return spec
      else:
        return None

  failed = drive(make_executor(args), next_spec, keep_going=True)
  print(study_status.status(p, records.read_all(), REPO), flush=True)
  if failed:  # the status says what is left; the exit status, that a run failed
    print(f"{len(failed)} run(s) FAILED: {', '.join(sorted(failed))}; each one's error is "
          "above, its whole output in its workdir's console.log", flush=True)
    raise SystemExit(1)


# train.py flags after `--` that would override what the sweep sets per run (and names the
# run's workdir after) or records in sweep_args.json.
_SWEEP_OWNED = ("--config", "--workdir")


def check_extra(extra: list[str]) -> None:
  owned = [x for x in extra if x.split("=", 1)[0].split(".", 1)[0] in _SWEEP_OWNED]
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


def check_args(args) -> None:
  """Refuses (UserError) flags that cannot work, before anything starts or is written."""
  until = getattr(args, "until", "")
  if until:
    parse_until(until)
  if getattr(args, "workers", 1) < 1:
    raise errors.UserError(f"--workers {args.workers}: give the number of runs to train at a "
                           "time here, 1 or more.")
  if getattr(args, "executor", "local") == "ray" and not args.dry_run and (
      importlib.util.find_spec("ray") is None):
    raise errors.UserError("--executor ray: ray is not installed here; pip install "
                           "'acl-jax[ray]' (or train on this machine: --executor local).")


def check_records_folder(args) -> None:
  """--records names a folder that exists, or (--stage) a new study's: one whose runs --root
  does not hold yet. A misspelt folder would read as a study with nothing recorded, and
  --stage would train again every run it holds."""
  if os.path.isdir(records.RECORDS):
    return
  if not args.stage:  # --status: nothing to read there
    raise errors.UserError(f"--records {args.records}: no such folder; name the folder the "
                           "study's sweep records its runs in.")
  root = os.path.abspath(args.root or os.path.join(REPO, "runs", "sweeps"))
  held = [name for name in {*args.study.stage_record.values(), args.study.lr_record,
                            args.study.budget_record}
          if os.path.isdir(os.path.join(root, name)) and os.listdir(os.path.join(root, name))]
  if held:
    raise errors.UserError(f"--records {args.records}: no such folder, yet --root {root} "
                           f"holds this study's runs ({', '.join(sorted(held))}); name the "
                           "folder they are recorded in, or give a new --root.")


def load_protocol(spec: str) -> proto.Protocol:
  """The protocol `spec` names, checked (`loader.load`); a protocol that is wrong is a
  UserError naming it, before any run starts."""
  try:
    return loader.load(spec)
  except (FileNotFoundError, ValueError) as e:
    text = str(e)
    raise errors.UserError(text if text.startswith("--protocol") else
                           f"--protocol {spec}: {text}") from e


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  extra = argv[argv.index("--") + 1:] if "--" in argv else []
  argv = argv[:argv.index("--")] if "--" in argv else argv
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--protocol", default=loader.DEFAULT,
                  help="the study: a Protocol as module:NAME or a .py file (default: this "
                  "project's, studies.papers:PAPERS)")
  ap.add_argument("--stage", type=int, default=0,
                  help="train the protocol's stage as its gates release runs")
  ap.add_argument("--status", action="store_true",
                  help="every stage's recorded runs and machine-hours, what is left and what "
                  "waits on what")
  ap.add_argument("--runs", action="store_true", help="with --status: list the runs left")
  ap.add_argument("--workers", type=int, default=1,
                  help="--executor local: runs at a time, each pinned to its share of the "
                  "cores (or its accelerators; more runs than GPUs share them)")
  ap.add_argument("--executor", default="local", choices=("local", "ray"),
                  help="where runs train: this machine, or a Ray cluster's nodes (one task "
                  "each); any number of drivers may share the runs (claims in their workdirs)")
  ap.add_argument("--address", default="",
                  help="--executor ray: the cluster (host:port, ray://host:port, or auto: the "
                  "one `ray start` made here; default: a new one on this machine)")
  ap.add_argument("--until", default="",
                  help="--stage: start a run only if its estimate ends before then, the gates' "
                  "runs and then the longest that fit first (HH:MM, or seconds from now); the "
                  "estimates are the records' rates on this machine's CPU (printed)")
  ap.add_argument("--records", default="",
                  help="--stage, --status: the folder of the study's records (default "
                  "results/records, or $ACL_JAX_RECORDS)")
  ap.add_argument("--root", default="", help="folder holding one workdir per run (--stage: "
                  "one folder per record under it; default runs/sweeps)")
  ap.add_argument("--record", default="", help="ad hoc: the record file finished runs are "
                  "appended to (a named sweep's is results/records/<sweep>.jsonl)")
  ap.add_argument("--keep_checkpoints", action="store_true",
                  help="--stage keeps each run's checkpoints after writing its row")
  ap.add_argument("--config", help="config file with its task argument, e.g. configs/glue.py:rte")
  ap.add_argument("--methods", default="", help="comma list of method presets")
  ap.add_argument("--grid", action="append", help="key=v1,v2 (repeatable): a grid axis")
  ap.add_argument("--set", action="append", help="key=value (repeatable): fixed override")
  ap.add_argument("--seeds", default="0")
  ap.add_argument("--splits", default="", help="splits to aggregate (default: all)")
  ap.add_argument("--dry_run", action="store_true")
  ap.add_argument("--keep_going", action="store_true", help="continue after a failed run")
  ap.add_argument("--aggregate_only", action="store_true")
  ap.add_argument("--compile_cache", default=None,
                  help="JAX compilation cache folder shared by the runs (default "
                  "<root>/.jax_cache; 'none' turns it off)")
  args = ap.parse_args(argv)
  check_extra(extra)
  args.extra = extra
  check_args(args)
  if args.records:
    records.RECORDS = os.path.abspath(args.records)
  elif (args.stage or args.status) and args.protocol != loader.DEFAULT and not os.environ.get(
      "ACL_JAX_RECORDS"):
    raise SystemExit(f"--protocol {args.protocol}: give its records folder with --records "
                     "(e.g. runs/my_study/records); results/records holds this project's "
                     "study, whose record names yours would share.")
  args.study = load_protocol(args.protocol)
  if args.records and (args.stage or args.status):
    check_records_folder(args)
  if args.stage and args.stage not in args.study.stages:
    raise SystemExit(f"--stage {args.stage}: the protocol {args.study.name!r} has stages "
                     f"{', '.join(map(str, sorted(args.study.stages)))}.")
  if args.status:
    print(study_status.status(args.study, records.read_all(), REPO, show_runs=args.runs))
    return
  if not args.dry_run and not args.aggregate_only:
    slots.niceness_for_autogroup()  # `nice -n 19 setsid`: behind interactive work too
  if args.stage:
    run_stage(args.stage, args)
    return
  if not args.root:
    raise SystemExit("Give --stage N (of --protocol), --status, or --root and "
                     "--config for an ad-hoc sweep.")
  # train.py runs with cwd=REPO: an absolute root keeps its workdirs where this process
  # looks for finished runs, whatever the caller's working directory.
  args.root = os.path.abspath(args.root)
  args.record = args.record and os.path.abspath(args.record)
  if not args.aggregate_only:
    if not args.config:
      raise SystemExit("--config is required unless --aggregate_only.")
    failed = run_all(args)
  else:
    failed = set()
  if not os.path.isdir(args.root):
    raise SystemExit(f"--root {args.root} does not exist: nothing to aggregate.")
  splits = [s for s in args.splits.split(",") if s]
  runs = aggregate.finished(args.root)
  if args.dry_run and not runs:
    return
  aggregate.check_splits(args.root, runs, splits)
  table, _ = aggregate.aggregate(args.root, splits, runs=runs)
  print(table)
  if failed:  # the table holds the runs that finished; the exit status says some did not
    raise SystemExit(1)


def user_errors(fn):
  """`fn()`; input that cannot work (a UserError) is one line on stderr and exit status 2,
  no traceback (as train.py's, acl_jax/cli.py)."""
  try:
    return fn()
  except errors.UserError as e:
    print(f"error: {' '.join(str(e).split())}", file=sys.stderr, flush=True)
    raise SystemExit(2) from None


if __name__ == "__main__":
  user_errors(main)
