r"""Compact run records: one JSONL file per sweep, one row per finished run.

  results/records/<sweep>.jsonl

A row says what was trained and what it measured, without checkpoints, so a fresh checkout
can rebuild every table (reporting.py) and a sweep can tell which runs are done
(runner.py):

  {"sweep": "glue", "run": "task=rte,method=acl,seed=0",   # the run's settings, as its name
   "task": "rte", "method": "acl", "seed": 0,
   "overrides": {"loss.lam": "0.5"},      # the run's grid settings beyond task/method/seed
   "config": "configs/glue.py:rte,acl",   # the config file and preset it was started with
   "set": ["num_epochs=3", ...],          # the sweep's fixed overrides
   "budget": {"num_steps": 0, "num_epochs": 3, "steps_run": 234, "batch_size": 32,
              "max_length": 128, "lr": 2e-05, "early_stop_patience": 0},
   "evals": [{"step": 78, "dev": {"accuracy": 0.61, ...}}, ...],  # every dev evaluation;
                                          # the last is the final weights' dev score
   "final": {"checkpoint_step": 234, "dev": {...}, "test": {...}},  # train.py's results.json:
                                          # the checkpoint it selected (best dev), not
                                          # necessarily the final weights
   "latest": {...},                       # the final weights' scores, where evaluated
   "early_exit": {"entropy": [...]},      # eval.py's early-exit rows, where run
   "timed_on": "<CPU model>, 2 cores",    # where those rows' wall-clock times were taken
                                          # ("<GPU> x1, host <CPU model>, 16 cores": trained
                                          # on an accelerator, from the train record)
   "seconds": 812.4, "cpu_seconds": 790.2, "workers": 2,  # the run's wall and CPU time
   "train": {"best_step": 234, "final_step": 234, "gate_on_fraction": 1.0, ...},
   "code": ["<git revision>", ...]}       # the revisions that trained it ("+dirty": edited)

Metrics are fractions (0.8123), as train.py writes them. Every row is made, and checked, by
`make_row` (the fields and their types are `Row`'s); `row_from_run` makes a finished run
folder's, read by acl_jax/study/runs.py. Imports nothing heavy.
"""
import fcntl
import json
import math
import os
import re
import types
import typing
from typing import Any, Required, TypedDict

from acl_jax.errors import UserError
from acl_jax.study import runs, timing

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# ACL_JAX_RECORDS points a sweep running from another checkout (a worktree pinned to a
# commit) at the records of the tree they are committed from.
RECORDS = os.environ.get("ACL_JAX_RECORDS") or os.path.join(REPO, "results", "records")
# A run folder's machine time, written by timing.py: {"seconds", "attempts", "workers"}.
RUN_TIME = runs.TIMING

# The settings every row carries as its own columns rather than as overrides.
OWN = ("task", "method", "seed")


class Eval(TypedDict):
  step: int | None  # None: an imported run's final weights, step unknown
  dev: dict[str, Any]


class Row(TypedDict, total=False):
  """A record row: the fields it may have and their types (the module docstring says what
  each holds). A field not named here is refused, so a new one is added here first."""
  sweep: Required[str]
  run: Required[str]
  task: str
  method: str
  framework: str  # imported runs (scripts/import_vs_hf.py): jax or torch
  seed: Required[int]
  overrides: dict[str, str]
  config: str
  set: list[str]
  command: str  # a script's own command line (scripts/grad_conflict.py)
  budget: Required[dict[str, Any]]
  evals: list[Eval]
  final: dict[str, Any]
  latest: dict[str, Any]
  early_exit: dict[str, list]
  steps: list[dict]  # per-step measurements (scripts/grad_conflict.py)
  step_seconds: list[float]  # a cost record's rounds: one train step's seconds per round
  term_seconds: list[float]  # ... and the method's loss term alone (benchmarks/cost_claims.py)
  timed_on: str
  seconds: float
  cpu_seconds: float
  workers: int
  time_spans: list[dict]
  timing_incomplete: bool
  lost_seconds: float  # attempts stopped with their runner: from start to their last output
  source: str  # the file an imported row came from
  train: dict[str, Any]
  code: Required[list[str]]
  reused_from: str  # the record whose row of the same run this one copies
  rerun_of: str  # scripts/rerun.py: the original's record
  xla_flags: str


# A record's name: its file's name without .jsonl.
SWEEP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def path_of(sweep: str) -> str:
  return os.path.join(RECORDS, f"{sweep}.jsonl")


def run_name(settings: dict) -> str:
  return ",".join(f"{k}={v}" for k, v in settings.items())


def fits_a_name(value: str) -> bool:
  """Whether a setting's value can be part of a run name and its workdir (`run_name`)."""
  return bool(value) and not set(value) & set("/=,")


def parse_name(name: str) -> dict:
  """The settings a run name spells (`task=mr,method=acl,loss.lam=0.5,seed=1`), in order."""
  return dict(kv.split("=", 1) for kv in name.split(",") if kv)


def _conforms(value, kind) -> bool:
  """Whether a JSON value has the type `kind` (a `Row` field's annotation)."""
  origin, args = typing.get_origin(kind), typing.get_args(kind)
  if kind is Any:
    return True
  if isinstance(value, bool) and kind in (int, float):
    return False
  if kind is float:
    return isinstance(value, (int, float))
  if origin in (types.UnionType, typing.Union):
    return any(_conforms(value, a) for a in args)
  if origin is list:
    return isinstance(value, list) and all(_conforms(v, args[0]) for v in value)
  if origin is dict:
    return isinstance(value, dict) and all(
        _conforms(k, args[0]) and _conforms(v, args[1]) for k, v in value.items())
  if typing.is_typeddict(kind):
    return isinstance(value, dict) and not _problems(value, kind)
  return isinstance(value, kind)


def _problems(row: dict, kind=Row) -> list[str]:
  hints = typing.get_type_hints(kind)
  out = [f"lacks {k!r}" for k in sorted(kind.__required_keys__) if k not in row]
  out += [f"has {k!r}, which is no field of a {kind.__name__} (known: {', '.join(hints)})"
          for k in row if k not in hints]
  out += [f"{k!r} is {row[k]!r}, not {_type_name(hints[k])}"
          for k in row if k in hints and not _conforms(row[k], hints[k])]
  return out


def _type_name(kind) -> str:
  if typing.get_origin(kind) is None and isinstance(kind, type):
    return kind.__name__
  return re.sub(r"[\w.]+\.(\w+)", r"\1", str(kind))  # typing.Any -> Any


def check_row(row: dict) -> None:
  """Raises ValueError, naming every problem, unless `row` is a well-formed record row: `Row`'s
  fields and types, a record name, and a run name that spells its settings (`key=value`,
  comma-separated), which agree with the row's task, method, seed and overrides."""
  if not isinstance(row, dict):
    raise ValueError(f"A record row is a dict, not {type(row).__name__}: {row!r}")
  problems = _problems(row)
  if isinstance(row.get("sweep"), str) and not SWEEP_NAME.fullmatch(row["sweep"]):
    problems.append(f"sweep {row['sweep']!r} is not a record name (letters, digits, _ . -)")
  name = row.get("run")
  if isinstance(name, str):
    parts = name.split(",")
    if not name or not all(re.fullmatch(r"[^=,\s]+=[^,]+", kv) for kv in parts):
      problems.append(f"run {name!r} is not a run name (key=value,key=value,...)")
    else:
      settings = parse_name(name)
      if len(settings) != len(parts):
        problems.append(f"run {name!r} names a setting twice")
      for k in OWN:
        if k in settings and k in row and settings[k] != str(row[k]):
          problems.append(f"run {name!r} says {k}={settings[k]}, the row {k}={row[k]!r}")
      extra = {k: v for k, v in settings.items() if k not in OWN}
      if isinstance(row.get("overrides"), dict) and row["overrides"] != extra:
        problems.append(f"overrides {row['overrides']!r} are not the run's settings beyond "
                        f"{'/'.join(OWN)}: {extra!r}")
  if problems:
    raise ValueError(f"Not a record row ({row.get('sweep')!r}, {name!r}): "
                     + "; ".join(problems) + ".")


def make_row(**fields) -> Row:
  """The record row of `fields`, in their order, once `check_row` accepts it. Every row of a
  record is made here; `append` checks it again."""
  check_row(fields)
  return Row(**fields)


def row_from_run(workdir: str, sweep: str, settings: dict, config: str = "",
                 set_args: list[str] | None = None) -> Row:
  """The record row of a finished run folder written by train.py (and eval.py).

  settings: the run's settings in order, `task`, `method`, grid fields and `seed`.
  """
  run = runs.read(workdir)
  if not run.finished:
    raise ValueError(f"{workdir} is not a finished run (no results.json with its train "
                     "record); train it first.")
  res, train = run.results, run.train
  code = train.pop("code_versions", [])
  row = {"sweep": sweep, "run": run_name(settings)}
  for k in OWN:
    if k in settings:
      row[k] = int(settings[k]) if k == "seed" else settings[k]
  if "framework" in settings:  # a column of its own, as the imported anchor rows have it
    row["framework"] = settings["framework"]
  row["overrides"] = {k: v for k, v in settings.items() if k not in OWN}
  row["config"] = config
  row["set"] = sorted(set_args or [])
  row["budget"] = run.budget
  row["evals"] = run.evals
  row["final"] = {"checkpoint_step": res.get("checkpoint_step"), **runs.scores(res)}
  if run.latest:
    row["latest"] = {"checkpoint_step": run.latest.get("checkpoint_step"),
                     **runs.scores(run.latest)}
  if run.early_exit:
    row["early_exit"] = run.early_exit
    row["timed_on"] = timing.machine(train.get("devices"))  # the sweep runs eval.py's timed passes
  spent = run.timing  # None where untimed, or timed for another folder (a copied run)
  if spent:  # wall seconds of train.py and the post steps, all attempts; on this machine
    row["seconds"] = round(spent["seconds"], 1)
    # CPU time only where every attempt measured it, and training was among them (a folder
    # finished elsewhere has only its evaluations timed here)
    if spent.get("cpu_attempts", 0) == spent.get("attempts") > 0:
      row["cpu_seconds"] = round(spent["cpu_seconds"], 1)
    row["workers"] = spent.get("workers", 1)
    if spent.get("spans"):  # when each timed step ended: a copied timing shows in them
      row["time_spans"] = spent["spans"]
    # an attempt or eval stopped with its runner, one still open, or training not timed here
    # (a run that train.py finished outside the sweep): these times are too low
    if spent.get("lost") or spent.get("open") or not spent.get("attempts"):
      row["timing_incomplete"] = True
    if spent.get("lost_seconds"):
      row["lost_seconds"] = round(spent["lost_seconds"], 1)
    row["timed_on"] = timing.machine(train.get("devices"))
  row["train"] = train
  row["code"] = code
  return make_row(**row)


def _torn(line: bytes) -> bool:
  """Whether the last line of a record file, without its newline, is a row cut short by a
  crash mid-write (not one whose newline alone is missing)."""
  try:
    json.loads(line)
  except ValueError:
    return True
  return False


def _measured(row: dict) -> tuple:
  """What a row says its run scored: its dev evaluations and its final and latest scores."""
  return (json.dumps(row.get("evals"), sort_keys=True),
          json.dumps(runs.row_scores(row, "final"), sort_keys=True),
          json.dumps(runs.row_scores(row, "latest"), sort_keys=True))


def _not_finite(row: dict) -> str:
  """The first score of the row that is not a finite number ("split/metric" where), or ""."""
  evals = [(f"dev evaluation at step {e.get('step')}", e.get("dev") or {})
           for e in row.get("evals") or [] if isinstance(e, dict)]
  for where, vals in evals + [(f"{k} scores", v) for k in ("final", "latest")
                              for v in [row.get(k) or {}]]:
    for key, v in _numbers(vals):
      if not math.isfinite(v):
        return f"{where}: {key} is {v}"
  return ""


def _numbers(vals: dict, prefix: str = ""):
  for k, v in vals.items():
    if isinstance(v, dict):
      yield from _numbers(v, f"{prefix}{k}/")
    elif isinstance(v, float):
      yield f"{prefix}{k}", v


def read(path: str) -> list[dict]:
  """The rows of a record file in order, read under the file's lock (so no row is seen half
  written). A later row of an already seen `run` with the same scores is dropped (two hosts
  of one job may both append a run). A file that would be read as fewer runs, or as other
  scores, than it holds is a UserError naming its line: a line that is not JSON (a last line
  cut short by a crash mid-write: `repair` removes it), a run recorded twice with different
  scores, a score that is not a finite number."""
  if not os.path.isfile(path):
    return []
  rows, seen = [], {}
  with open(path, "rb") as f:
    fcntl.flock(f, fcntl.LOCK_SH)
    try:
      lines = f.read().split(b"\n")
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)
  for i, line in enumerate(lines, 1):
    if not line.strip():
      continue
    try:
      row = json.loads(line)
    except ValueError as e:
      cut = (" (a row cut short, as by a crash mid-write: scripts.sweep --stage removes it "
             "and collects its run again)" if i == len(lines) else "")
      raise UserError(f"{path}:{i} is not a JSON row ({e}){cut}; fix or remove that "
                      "line.") from None
    if not isinstance(row, dict):
      raise UserError(f"{path}:{i} is not a record row (a JSON object); fix or remove it.")
    bad = _not_finite(row)
    if bad:
      raise UserError(f"{path}:{i}: run {row.get('run')} has a score that is not a number "
                      f"({bad}); a run's scores are finite: train or evaluate it again, and "
                      "remove that line.")
    if row.get("run") in seen:
      first, first_row = seen[row.get("run")]
      if _measured(first_row) != _measured(row):
        raise UserError(f"{path}:{i} records run {row.get('run')} again, with other scores "
                        f"than line {first}; keep the row of the run that stands and remove "
                        "the other.")
      continue
    seen[row.get("run")] = (i, row)
    rows.append(row)
  return rows


def repair(path: str) -> int:
  """Removes a last line cut short by a writer that crashed mid-write (under the file's lock,
  as `append` does); returns its line number, 0 when there was none. Its run, unrecorded, is
  collected again from its folder (or trained)."""
  if not os.path.isfile(path):
    return 0
  with open(path, "r+b") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      body = f.read()
      *lines, tail = body.split(b"\n")
      if tail and _torn(tail):
        f.truncate(len(body) - len(tail))
        return len(lines) + 1
      return 0
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


def append(path: str, row: dict) -> bool:
  """Appends `row` unless the file already has its run; returns whether it wrote.

  The row is checked first (`check_row`, and its sweep must be the file's name). The read and
  the write happen under an exclusive lock, so concurrent sweeps do not duplicate rows, and
  collecting a run twice writes it once. A last line cut short by a writer that crashed
  mid-write is a row never recorded: it is cut from the file here, and its run, unrecorded,
  is collected again from its folder.
  """
  check_row(row)
  name = os.path.basename(path).removesuffix(".jsonl")
  if row["sweep"] != name:
    raise ValueError(f"{row['run']} is a row of {row['sweep']!r}, not of {path}'s {name!r}.")
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "a+b") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      f.seek(0)
      body = f.read()
      *lines, tail = body.split(b"\n")
      if tail and _torn(tail):
        f.truncate(len(body) - len(tail))
      elif tail:  # a whole last row, its newline lost (e.g. by an editor)
        lines.append(tail)
        f.write(b"\n")
      for line in lines:
        if line.strip() and json.loads(line).get("run") == row["run"]:
          return False
      f.write(json.dumps(row, sort_keys=False).encode() + b"\n")
      f.flush()
      os.fsync(f.fileno())
      return True
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


def read_all(records_dir: str | None = None) -> dict[str, list[dict]]:
  """{sweep name: its rows} for every record file in the folder (default RECORDS)."""
  records_dir = records_dir or RECORDS
  out = {}
  if os.path.isdir(records_dir):
    for name in sorted(os.listdir(records_dir)):
      if name.endswith(".jsonl"):
        out[name[:-len(".jsonl")]] = read(os.path.join(records_dir, name))
  return out


scores = runs.row_scores  # a row's {"split/metric": value} (final, latest or last)
