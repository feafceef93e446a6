"""What a sweep run does around train.py, on the host that trains it and under its claim.

`RunSteps` (the executors' `Steps` of a sweep run): the attempt's time is opened
(`timing.begin_attempt`) and, once the executor has its wall and CPU seconds, added
(`timing.add_time`); a run that train.py finished then runs its post steps (`post_steps`:
eval.py's early-exit sweep on dev, timed on seed 0, and the final weights' scores, as the
protocol asks), its row is appended to the record (under the record's lock, and not when the
run is there already) and its checkpoints go (`finish`; `keep_checkpoints` keeps them): the
row holds what the tables need. So two drivers at once train and record each run once.

Nothing here imports jax.
"""
import dataclasses
import os
import shutil
import subprocess
import sys
import time

from acl_jax import provenance
from acl_jax.study import executors, jobs, records, timing


def local_call(cmd, **kw) -> tuple[int, float]:
  """A command from the repository root on this machine: (exit code, CPU seconds)."""
  return executors.call(cmd, cwd=jobs.REPO, **kw)


def post_steps(job: jobs.Job, call=local_call, workers: int = 1) -> int:
  """eval.py after training, as the sweep asks: the early-exit sweep on dev (timed on seed 0,
  untimed on the others) and the final weights' scores. `call(cmd, stdout=..., stderr=...)`
  runs each as the run's own command, returning (exit code, CPU seconds). Returns the first
  failing exit code."""
  wd, ev = job.workdir, [sys.executable, jobs.EVAL, "--workdir", job.workdir]
  cmds = []
  if job.early_exit and not os.path.isfile(os.path.join(wd, "early_exit_entropy_dev.json")):
    cmds.append(ev + ["--exit_policy", "entropy", "--thresholds", job.early_exit, "--split",
                       "dev"] + ([] if str(job.settings["seed"]) == "0" else
                                 ["--exit_repeats", "0"]))
  if job.latest and not os.path.isfile(os.path.join(wd, "results_latest.json")):
    cmds.append(ev + ["--checkpoint", "latest", "--split", job.latest])
  for cmd in cmds:
    if not jobs.has_weights(wd):
      print(f"  {wd} has no checkpoints left for: {' '.join(cmd[2:])}", flush=True)
      return 1
    timing.begin_attempt(wd)  # an eval stopped with its runner leaves it open: lost
    t0 = time.time()
    with open(os.path.join(wd, "eval.log"), "a") as log:
      rc, cpu = call(cmd, stdout=log, stderr=subprocess.STDOUT)
    timing.add_time(wd, time.time() - t0, workers, cpu=cpu)
    if rc:
      print(f"  eval FAILED (exit {rc}); see {os.path.join(wd, 'eval.log')}", flush=True)
      return rc
  return 0


def finish(job: jobs.Job, record: str | None, keep_checkpoints: bool, extra: list[str] = (),
           call=local_call, workers: int = 1) -> int:
  """A finished run's post steps, its row in the record, then (named sweeps) its checkpoints
  removed. Returns non-zero when a post step failed (the row is then not written). On a
  multi-host job only process 0 does this (`primary`)."""
  first = jobs.primary(list(extra))
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
    print(f"  recorded in {os.path.relpath(record, jobs.REPO)}", flush=True)
  if not keep_checkpoints:
    for part in ("ckpt", "best"):
      shutil.rmtree(os.path.join(job.workdir, part), ignore_errors=True)
  return 0


@dataclasses.dataclass(frozen=True)
class RunSteps(executors.Steps):
  """What a sweep run does around train.py, on the host that trains it and under the run's
  claim (so once, whatever the drivers): the attempt's time (`timing.begin_attempt`, then
  `timing.add_time` with the executor's wall and CPU seconds), then for a finished run its
  post steps, its row and the pruning of its checkpoints (`finish`). A run that train.py had
  finished (its row, evaluations or pruning left undone) does only the latter."""
  job: jobs.Job
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
      timing.end_lost_attempt(self.job.workdir)
      return False
    timing.begin_attempt(self.job.workdir)
    return True

  def after(self, spec, result, call):
    wd = self.job.workdir
    if result.detail != executors.NOT_NEEDED:
      timing.add_time(wd, result.wall_s, self.workers, attempt=True, cpu=result.cpu_s)
    if result.returncode != 0 or not provenance.run_finished(wd):
      return result
    rc = finish(self.job, self.record, self.keep_checkpoints, list(self.extra), call,
                self.workers)
    return dataclasses.replace(result, returncode=rc,
                               detail=f"post steps failed (exit {rc})" if rc else result.detail)


def run_done(spec: executors.RunSpec) -> bool:
  """The executors' `finished` for sweep runs (`RunSteps.done`)."""
  return spec.steps.done()
