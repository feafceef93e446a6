"""A protocol's stage, trained as its gates release runs: `run(protocol, stage, ...)`.

  from acl_jax import study
  p = study.load("studies/mine.py")
  study.run(p, 1, records="runs/my_study/records", root="runs/my_study/runs", workers=2)

The planner (`status.stage_runs`) says which runs the records release now; each is prepared
(`runner.prepare`) and handed to the executor (`--executor local`: this machine, `workers`
runs at a time, each pinned to its share of the cores; `ray`: one Ray task per run on a
cluster's nodes), and the stage is planned again after every result. With `until`, a run
starts only if its estimate ends before then (`start_order`: which first); the estimates are
the records' rates scaled to this machine (`host_rates`). On a CPU host, a second look past
the protocol's CPU budget does not start (`within_budget`).

Nothing here imports jax.
"""
import dataclasses
import importlib.util
import os
import time

from acl_jax import errors, provenance
from acl_jax.study import (devices, identity as ident, jobs, planner, protocol as proto, records,
                           resolve, runner, slots, status as study_status, timing)


@dataclasses.dataclass
class Options:
  """How a sweep runs: scripts/sweep.py's flags, by the same names."""
  study: proto.Protocol | None = None  # --protocol, loaded
  root: str = ""  # one workdir per run (a stage's: one folder per record under it)
  records: str = ""  # the study's records folder
  executor: str = "local"  # or "ray"
  address: str = ""  # --executor ray: the cluster
  workers: int = 1  # --executor local: runs at a time
  until: str = ""  # start a run only if its estimate ends before then (HH:MM, or seconds)
  keep_checkpoints: bool = False
  keep_going: bool = True
  dry_run: bool = False
  compile_cache: str | None = None  # default <root>/.jax_cache; "none" turns it off
  extra: list = dataclasses.field(default_factory=list)  # train.py flags after `--`
  # an ad-hoc sweep (runner.run_all)
  config: str = ""
  methods: str = ""
  grid: list | None = None
  set: list | None = None
  seeds: str = "0"
  record: str = ""


def run(p: proto.Protocol, stage: int, **options) -> set[str]:
  """Trains stage `stage` of protocol `p` as its gates release runs (`run_stage`), with
  `options` as `Options` names them (records, root, executor, workers, until, dry_run, ...);
  returns the names of the runs that failed. The records folder becomes this process's
  (`records.RECORDS`). Raises errors.UserError for options that cannot work."""
  args = Options(study=p, **options)
  check_args(args)
  if args.records:
    records.RECORDS = os.path.abspath(args.records)
    check_records_folder(args)
  if stage not in p.stages:
    raise errors.UserError(f"stage {stage}: the protocol {p.name!r} has stages "
                           f"{', '.join(map(str, sorted(p.stages)))}.")
  return run_stage(stage, args)


def check_args(args) -> None:
  """Refuses (UserError) flags that cannot work, before anything starts or is written."""
  until = getattr(args, "until", "")
  if until:
    runner.parse_until(until)
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
  root = os.path.abspath(args.root or os.path.join(jobs.REPO, "runs", "sweeps"))
  held = [name for name in {*args.study.stage_record.values(), args.study.lr_record,
                            args.study.budget_record}
          if os.path.isdir(os.path.join(root, name)) and os.listdir(os.path.join(root, name))]
  if held:
    raise errors.UserError(f"--records {args.records}: no such folder, yet --root {root} "
                           f"holds this study's runs ({', '.join(sorted(held))}); name the "
                           "folder they are recorded in, or give a new --root.")


def local_gpu(args) -> str:
  """The GPU that `--executor local` runs train on here, as the records name it; ""
  on a CPU host or with another executor."""
  return slots.cuda_device_name() if getattr(args, "executor", "local") == "local" else ""


def host_rates(rows: dict, told: dict | None, gpu: str = "") -> dict:
  """The estimates' seconds per epoch on this machine (`study_status.rates_on`): the records'
  CPU rates, scaled by how much slower or faster this CPU, or this host's `gpu`
  (`local_gpu`), ran the runs it shares with them. A new factor is printed once (`told`
  holds the last; None prints every time)."""
  host = study_status.rates_on(rows, study_status.cpu_of({"timed_on": timing.machine()}), gpu)
  key = (round(host.factor, 2), host.pairs, host.own)
  if told is None or told.get("key") != key:
    print(f"estimates for {gpu or 'this CPU'}: x{host.factor:.2f} the "
          f"{'CPUs' if gpu else 'other CPUs'}' rates, from {host.pairs} (task, method) pairs "
          f"timed both here and elsewhere; {host.own} timed here keep their own", flush=True)
    if told is not None:
      told["key"] = key
  return host.rates


def within_budget(p: proto.Protocol, stage: int, rows: dict, ready: list, gpu: str,
                  told: dict | None, d: planner.Decisions | None = None) -> list:
  """The released runs that may start here: on a CPU host, none of a second look past the
  protocol's CPU budget (`study_status.cpu_budget`); on an accelerator, all. The budget's
  state is printed when it changes (`told` holds the last; None prints every time). `d`: the
  planner's decisions on `rows`, where already made."""
  budget = None
  if not gpu and p.cpu_budget_h is not None:
    budget = study_status.cpu_budget(p, rows, jobs.REPO,
                                     study_status.stage_totals(p, rows, jobs.REPO, d))
  if budget is None:
    return ready
  _tell(told, "budget", study_status.budget_lines(p, budget))
  return [r for r in ready
          if not (planner.second_look(p, r) and (stage, r.task) in budget.trimmed)]


def host_kind(args, gpu: str) -> str | None:
  """The device kind this sweep's runs train on (`devices.kind_of`'s names): the local GPU
  (`gpu`, `local_gpu`), else "CPU"; None where it is not known here: on a Ray cluster (which
  node a run lands on), a TPU host, or a CUDA host whose GPU has no name."""
  if getattr(args, "executor", "local") != "local" or gpu:
    return gpu or None
  if slots.tpu_chips() or slots.cuda_devices():
    return None
  return devices.CPU


def same_kind(p: proto.Protocol, rows: dict, ready: list, kind: str | None, root: str,
              told: dict | None) -> list:
  """The released runs whose pairs trained, or started, on this host's device kind, or on
  none yet (`devices.hold_back`, with `Protocol.same_device_pairs`; `root` holds the runs'
  workdirs); those held back are printed when they change (`told` as in `within_budget`). On
  a host of unknown kind (`host_kind` None) every run, said once."""
  if not p.same_device_pairs:
    return ready
  if kind is None:
    _tell(told, "kinds", ["this host's device kind is not known here: the pairs' runs are not "
                          "kept on one kind (the report's devices table names any pair that "
                          "mixes them)"])
    return ready
  keep, waits = devices.hold_back(p, rows, ready, kind, jobs.REPO,
                                  lambda run: jobs.job_of(run, root).workdir)
  _tell(told, "kinds", [f"{name}: {why}" for name, why in waits.items()])
  return keep


def _tell(told: dict | None, key: str, lines: list[str]) -> None:
  """Prints `lines` unless they are none or what `told[key]` last held (None: every time)."""
  if lines and (told is None or told.get(key) != lines):
    print("\n".join(lines), flush=True)
  if told is not None:
    told[key] = lines


def start_order(run, stage_record: str, part_trained: bool, est: float,
                deadline: float | None) -> tuple:
  """The sort key of a released run, first to start first. Part-trained runs: a stop between
  runs should leave as little half-done. Then the gates' runs (lr, anchor, budget: those not
  in the stage's own record), each of which releases a task's arms. Before a deadline, then
  the longest that still fit: short runs fill the window's end, where a long one would no
  longer start (and would wait for the next window's start). Otherwise the planner's order
  (the sort is stable)."""
  return (not part_trained, run.sweep == stage_record, 0.0 if deadline is None else -est)


def run_stage(stage: int, args) -> set[str]:
  """Trains a stage's runs as the protocol's gates release them, on the executor `args` names
  (`make_executor`: `--workers` runs at a time here, each pinned to its own cores when there
  are several, or a Ray cluster's), planning again after every run. With `--until`, a run
  starts only if its estimate ends before then (`start_order`: which first). Returns the
  names of the runs that failed (each one's error printed)."""
  p = args.study
  deadline = runner.parse_until(args.until)
  root = args.root = os.path.abspath(args.root or os.path.join(jobs.REPO, "runs", "sweeps"))
  resolve.check_data(p, jobs.REPO)
  if not args.dry_run:
    for name in sorted(os.listdir(records.RECORDS)) if os.path.isdir(records.RECORDS) else ():
      path = os.path.join(records.RECORDS, name)
      if name.endswith(".jsonl") and (line := records.repair(path)):
        print(f"{path}:{line}: a row cut short by a crash mid-write, removed; its run is "
              "collected again from its folder, or trained", flush=True)
  gpu = local_gpu(args)  # once: the host's GPU does not change during a sweep
  kind = host_kind(args, gpu)
  if args.dry_run:
    rows = records.read_all()
    d = planner.decisions(p, rows)
    ready, waiting = study_status.stage_runs(p, stage, rows, d)
    ready = within_budget(p, stage, rows, ready, gpu, None, d)
    ready = same_kind(p, rows, ready, kind, root, None)
    rates = host_rates(rows, None, gpu)
    per_s = runner.wall_per_machine_s(args)
    for run in ready:
      est = per_s * p.estimate_seconds(run.task, run.method, run.epochs, rates)
      print(f"{run.sweep}: {run.name} (~{est / 60:.0f} min): {' '.join(run.sets)}")
    for task, what in waiting.items():
      print(f"{task}: waits on {what}")
    return set()

  declined, told = set(), {}

  def next_spec(skip):
    skip = skip | declined
    while True:
      rows = records.read_all()
      d = planner.decisions(p, rows)
      ready, _ = study_status.stage_runs(p, stage, rows, d)
      ready = within_budget(p, stage, rows, ready, gpu, told, d)
      ready = same_kind(p, rows, ready, kind, root, told)
      rates = host_rates(rows, told, gpu)
      per_s = runner.wall_per_machine_s(args)
      done = {r.name: provenance.trained_fraction(jobs.job_of(r, root).workdir) for r in ready}
      # A part-trained run is estimated by what its schedule has left (and its start-up), so
      # a run longer than one window, stopped at a checkpoint, starts again in the next.
      est = {r.name: per_s * (p.estimate_seconds(r.task, r.method, r.epochs, rates)
                              * (1.0 - done[r.name]) + (p.startup_s if done[r.name] else 0.0))
             for r in ready}
      ready.sort(key=lambda r: start_order(r, p.stage_record[stage], done[r.name] > 0.0,
                                           est[r.name], deadline))
      for run in ready:
        job = jobs.job_of(run, root)
        if job.name in skip:
          continue
        if deadline is not None and time.time() + 1.15 * est[run.name] > deadline:
          continue
        try:
          spec = runner.prepare(job, args, records.path_of(job.sweep),
                         {r["run"] for r in rows.get(job.sweep, [])},
                         ident.recorded_elsewhere(job.sweep, rows, jobs.REPO),
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
        if p.same_device_pairs and kind and not devices.stamped(job.workdir):
          devices.stamp(job.workdir, kind)  # its pair's other hosts see where it started
        return spec
      else:
        return None

  failed = runner.drive(runner.make_executor(args), next_spec, keep_going=True)
  print(study_status.status(p, records.read_all(), jobs.REPO), flush=True)
  if failed:  # the status says what is left; the caller, that a run failed
    print(f"{len(failed)} run(s) FAILED: {', '.join(sorted(failed))}; each one's error is "
          "above, its whole output in its workdir's console.log", flush=True)
  return failed
