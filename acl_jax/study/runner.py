"""Hands a sweep's runs to an executor and follows them to the end.

`drive(executor, next_spec)` hands runs out as they are planned, up to the executor's
capacity, planning again after every result, until none is planned and none runs. Planning
stays in the driver; a run is claimed in its workdir before it starts (claims.py), and
everything it writes happens under that claim on the host that trains it (`steps.RunSteps`).
A run that another driver holds is waited for and planned again, not failed; a driver killed
midway leaves claims that go stale, which the next driver takes over, resuming the runs from
their checkpoints. On a cluster, the checkout, the root and the records must be at the same
paths on every node (shared storage).

`prepare(job, ...)` says what a run needs: nothing (recorded here, or the same run recorded by
another sweep: its row is taken), its post steps and row (train.py finished it), or training.
`run_all(options)` is an ad-hoc sweep (a grid of methods, fields and seeds); a protocol's
stage runs through `stages.run_stage`.

The runs share JAX's persistent compilation cache (`jobs.child_env`, default
`<root>/.jax_cache`): runs that differ only in seed or loss weights compile the same step, so
every run after the first loads it from disk. Cached executables are the same programs, so
results do not change.
"""
import json
import os
import re
import signal
import threading
import time

from acl_jax import errors, provenance, signals
from acl_jax.study import (executors, identity as ident, jobs, ray_executor, records, slots,
                           steps)


def make_executor(args) -> executors.Executor:
  """--executor local (this machine, --workers runs at a time) or ray (--address)."""
  if getattr(args, "executor", "local") == "ray":
    if jobs.primary(args.extra) is not True:
      raise SystemExit("A multi-host job runs the same sweep on every host: use --executor "
                       "local there.")
    return ray_executor.RayExecutor(args.address or None)
  return executors.LocalExecutor(slots=getattr(args, "workers", 1) or 1)


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


def run_spec(job: jobs.Job, args, record: str, keep_checkpoints: bool) -> executors.RunSpec:
  """The executor's spec of a sweep run: train.py with its steps (`RunSteps`). On a
  multi-host job every process claims the run for itself (they all enter train.py
  together), under `<workdir>/.process/<log name>`."""
  claims_in = job.workdir
  if jobs.primary(args.extra) is not True:
    claims_in = os.path.join(job.workdir, ".process", jobs.log_name(args.extra))
  return executors.RunSpec(
      job.name, tuple(jobs.command(job, args.extra)), claims_in, cwd=jobs.REPO,
      env=jobs.child_env(args),
      cpus=RAY_TASK_CPUS,  # what Ray schedules by; the local executor's slots ignore it
      log=os.path.join(job.workdir, jobs.log_name(args.extra)),
      steps=steps.RunSteps(job, record or "", keep_checkpoints, tuple(args.extra),
                           round(wall_per_machine_s(args))))


def prepare(job: jobs.Job, args, record: str | None, done: set, elsewhere: dict,
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
  elif changed := jobs.changed_args(wd, want):
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
  same = elsewhere.get(ident.settings_identity(job.config, job.set, job.settings, jobs.REPO))
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
  provenance.write_atomic(os.path.join(wd, jobs.RUN_ARGS), json.dumps(want, indent=2))
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


def drive(executor: executors.Executor, next_spec, keep_going: bool = True,
          poll_s: float = POLL_S) -> set[str]:
  """Hands runs out as `next_spec(skip)` plans them, up to the executor's capacity, until it
  plans none and none runs; returns the names of the runs that failed.

  `next_spec(skip)` gives the next run to hand out (None: none now), planned again from the
  records after every result, skipping the runs named in `skip` (out, failed, or held by
  another driver). A run held by another driver is not failed: its owner records it, or its
  claim goes stale and it is asked for again, every `poll_s` seconds. Without `keep_going`,
  a failure ends the sweep (SystemExit) once the runs out have ended."""
  stop = _StopOnSigterm(executor)
  with signals.on_sigterm(stop.on_term, enabled=getattr(executor, "passes_sigterm", False)):
    return _drive(executor, next_spec, keep_going, poll_s, stop)


def _drive(executor: executors.Executor, next_spec, keep_going: bool, poll_s: float,
           stop: "_StopOnSigterm") -> set[str]:
  """`drive`'s loop, with SIGTERM watched (`stop`)."""
  out, failed, held, ended = {}, set(), set(), set()
  cap, last_poll = executor.capacity(), time.time()
  try:
    while True:
      while len(out) < cap and not stop.asked:
        spec = next_spec(set(out) | failed | held | ended)
        if spec is None or stop.asked:  # asked while it planned: not handed out
          break
        out[spec.identity] = spec
        executor.submit(spec, steps.run_done)
      if not out:
        if stop.asked:
          print(f"stopped by SIGTERM ({stop.did or 'passed to the runs out'}); no run started "
                "since, and the same command resumes those it stopped"
                + (f"; {len(failed)} run(s) FAILED: {', '.join(sorted(failed))}" if failed
                   else ""), flush=True)
          raise SystemExit(errors.EXIT_PREEMPTED)
        if not held:
          return failed
        time.sleep(max(0.0, last_poll + poll_s - time.time()))
      res = executor.wait(timeout=max(0.1, last_poll + poll_s - time.time())) if out else None
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
      elif res.status == executors.RAN and res.returncode == errors.EXIT_PREEMPTED:
        ended.add(res.identity)
        print(f"  {res.identity}: stopped by SIGTERM at a step it checkpointed{where}; the "
              "next start resumes it", flush=True)
      elif stop.asked and res.status == executors.RAN and res.returncode == -signal.SIGTERM:
        ended.add(res.identity)  # a process without the handler (set-up, an evaluation)
        print(f"  {res.identity}: ended by SIGTERM{where}; the next start resumes it from its "
              "last checkpoint", flush=True)
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
    executor.close()  # waits for the runs out: SIGTERM is still passed on meanwhile


class _StopOnSigterm:
  """While `drive` runs in the main thread on an executor that `passes_sigterm` (this
  machine's), SIGTERM stops it handing out runs and passes the signal on to the runs out
  (`Executor.terminate`), which checkpoint and stop; `drive` then waits for them and exits
  EXIT_PREEMPTED. Without this, the driver would die at once and its runs with it (killed, as
  their parent died, between checkpoints). A Ray driver dies at once, its tasks running on."""

  def __init__(self, executor: executors.Executor):
    self.asked, self.did = False, ""
    self._executor = executor

  def on_term(self, name: str):  # pylint: disable=unused-argument
    if not self.asked:
      self.asked = True
      # From a thread of its own: the handler runs in the main thread, which may hold the
      # executor's lock at this moment.
      threading.Thread(target=self._terminate, daemon=True).start()

  def _terminate(self):
    self.did = self._executor.terminate()


def run_jobs(todo: list[jobs.Job], args, record: str | None = None,
             keep_checkpoints: bool = True) -> set[str]:
  """Trains each job unless recorded (here or, the same run, in another record), resuming a
  part-trained one, on the executor `args` names (`make_executor`); returns the names of the
  runs that failed."""
  os.makedirs(args.root, exist_ok=True)
  done = {r["run"] for r in records.read(record)} if record else set()
  elsewhere = (ident.recorded_elsewhere(todo[0].sweep, records.read_all(), jobs.REPO)
               if record and todo and todo[0].sweep else {})
  specs = [prepare(job, args, record, done, elsewhere, keep_checkpoints,
                   f"[{i + 1}/{len(todo)}]") for i, job in enumerate(todo)]
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


def run_all(args) -> set[str]:
  """An ad-hoc sweep (--root, --config, --methods, --grid, --seeds); the runs that failed."""
  todo = jobs.jobs_of_args(args)
  jobs.check_jobs(todo)
  return run_jobs(todo, args, getattr(args, "record", None)) or set()


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
