"""Where and for how long a run trained: the machine its times were taken on (`machine`),
and its wall and CPU seconds over every attempt, kept in its folder (runs.TIMING) until its
row is written.

A timed step (a train.py attempt, a post step's eval.py) is opened (`begin_attempt`) before
it starts and closed with its time (`add_time`) when it ends; one found still open was
stopped with its runner, and is counted lost (`end_lost_attempt`), its time from its start
to the run's last output kept apart. Imports nothing heavy.
"""
import json
import os
import time

from acl_jax import cpuinfo, provenance  # light: no jax
from acl_jax.study import runs, slots


def machine(devices: dict | None = None) -> str:
  """The CPU (name, family, model, vector ISA) and core count that a row's timings were taken
  on (acl_jax.cpuinfo); where the run trained on an accelerator (`devices`, the train
  record's: platform, kind, count), that first: "NVIDIA H200 GPU x1, host <CPU>, N cores"."""
  cpu = cpuinfo.describe()
  if not devices or devices.get("platform", "cpu") == "cpu":
    return cpu
  name = slots.accelerator_name(str(devices["platform"]), str(devices.get("kind") or ""))
  return f"{name} x{devices.get('count', 1)}, host {cpu}"


def add_time(workdir: str, seconds: float, workers: int = 1, attempt: bool = False,
             cpu: float | None = None) -> None:
  """Adds `seconds` of wall time (and `cpu` CPU seconds) to the run folder's runs.TIMING (one
  written for another folder, copied with its run, is not added to: this run's starts anew)."""
  path = os.path.join(workdir, runs.TIMING)
  spent = runs.read_timing(workdir) or {"seconds": 0.0, "attempts": 0}
  spent["run"] = runs.folder_name(workdir)
  spent.setdefault("spans", []).append({"end": round(time.time(), 1),
                                        "seconds": round(seconds, 1)})
  spent["seconds"] += seconds
  if cpu is not None:
    spent["cpu_seconds"] = spent.get("cpu_seconds", 0.0) + cpu
    spent["cpu_attempts"] = spent.get("cpu_attempts", 0) + int(attempt)
  spent["attempts"] += int(attempt)
  spent["open"] = False  # the open step's time is in
  spent.pop("open_at", None)
  spent["workers"] = workers
  provenance.write_atomic(path, json.dumps(spent))


def _last_output(workdir: str) -> float | None:
  """When the run's processes last wrote their output (logs, metrics), or None."""
  try:
    names = os.listdir(workdir)
  except OSError:
    return None
  times = [os.path.getmtime(os.path.join(workdir, n)) for n in names
           if n.endswith(".log") or n == "metrics.jsonl"]
  return max(times) if times else None


def _close_lost(spent: dict, workdir: str) -> bool:
  """A step still open was stopped with its runner before its time was added: counted as
  `lost` (the run's time is incomplete) and closed, its wall time from its start to the
  run's last output added to `lost_seconds` (the machine-hours count it). Whether there was
  one."""
  if not spent.get("open"):
    return False
  spent["lost"] = spent.get("lost", 0) + 1
  spent["open"] = False
  start, end = spent.pop("open_at", None), _last_output(workdir)
  if start is not None and end is not None and end > start:
    spent["lost_seconds"] = spent.get("lost_seconds", 0.0) + end - start
  return True


def begin_attempt(workdir: str) -> None:
  """Marks a timed step (a train.py attempt, a post step's eval.py) as started, until
  `add_time` adds its time; one still open is lost (`_close_lost`)."""
  spent = runs.read_timing(workdir) or {"seconds": 0.0, "attempts": 0}
  spent["run"] = runs.folder_name(workdir)
  _close_lost(spent, workdir)
  spent["open"] = True
  spent["open_at"] = time.time()
  provenance.write_atomic(os.path.join(workdir, runs.TIMING), json.dumps(spent))


def end_lost_attempt(workdir: str) -> None:
  """Closes a step still open as lost (`_close_lost`), with none begun after it."""
  spent = runs.read_timing(workdir)
  if spent and _close_lost(spent, workdir):
    provenance.write_atomic(os.path.join(workdir, runs.TIMING), json.dumps(spent))
