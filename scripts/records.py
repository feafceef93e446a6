r"""Compact run records: one JSONL file per sweep, one row per finished run.

  results/records/<sweep>.jsonl

A row says what was trained and what it measured, without checkpoints, so a fresh checkout
can rebuild every table (scripts/report.py) and a sweep can tell which runs are done
(scripts/sweep.py):

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
   "seconds": 812.4, "cpu_seconds": 790.2, "workers": 2,  # the run's wall and CPU time
   "train": {"best_step": 234, "final_step": 234, "gate_on_fraction": 1.0, ...},
   "code": ["<git revision>", ...]}       # the revisions that trained it ("+dirty": edited)

Metrics are fractions (0.8123), as train.py writes them. Imports nothing heavy.
"""
import fcntl
import json
import os
import time

from acl_jax import cpuinfo, provenance  # light: no jax

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ACL_JAX_RECORDS points a sweep running from another checkout (a worktree pinned to a
# commit) at the records of the tree they are committed from.
RECORDS = os.environ.get("ACL_JAX_RECORDS") or os.path.join(REPO, "results", "records")
# A run folder's machine time, written by scripts/sweep.py: {"seconds", "attempts", "workers"}.
RUN_TIME = "sweep_time.json"

# The config fields a row's budget states (dotted config path -> budget key).
BUDGET_FIELDS = (("num_steps", "num_steps"), ("num_epochs", "num_epochs"),
                 ("batch_size", "batch_size"), ("task.max_length", "max_length"),
                 ("optim.lr", "lr"), ("optim.head_lr_mult", "head_lr_mult"),
                 ("early_stop_patience", "early_stop_patience"), ("eval_every", "eval_every"))
# The settings every row carries as its own columns rather than as overrides.
OWN = ("task", "method", "seed")


def path_of(sweep: str) -> str:
  return os.path.join(RECORDS, f"{sweep}.jsonl")


def run_name(settings: dict) -> str:
  return ",".join(f"{k}={v}" for k, v in settings.items())


def parse_name(name: str) -> dict:
  """The settings a run name spells (`task=mr,method=acl,loss.lam=0.5,seed=1`), in order."""
  return dict(kv.split("=", 1) for kv in name.split(",") if kv)


def _load(path: str):
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def _scores(res: dict) -> dict:
  """A results dict's per-split metrics without example counts: {split: {metric: value}},
  with eval.py's per-class recall and support where it wrote them."""
  out = {}
  for split, vals in res.items():
    if isinstance(vals, dict) and split != "train":
      out[split] = {k: v for k, v in vals.items()
                    if isinstance(v, (int, float)) and k != "num_examples"}
      per_class = vals.get("per_class")
      if isinstance(per_class, dict):  # eval.py's: each class's recall and support
        out[split]["per_class_recall"] = {c: r["recall"] for c, r in per_class.items()}
        out[split]["per_class_support"] = {c: r["support"] for c, r in per_class.items()}
  return out


def evals_of(workdir: str) -> list[dict]:
  """Every dev evaluation of metrics.jsonl as {"step": S, "dev": {metric: value}}."""
  path = os.path.join(workdir, "metrics.jsonl")
  out = []
  if not os.path.isfile(path):
    return out
  with open(path) as f:
    for line in f:
      try:
        r = json.loads(line)
      except ValueError:
        continue  # a line cut by a crash
      if r.get("kind") in ("dev", "eval"):
        vals = {k: v for k, v in r.items()
                if k not in ("step", "kind", "num_examples") and isinstance(v, (int, float))}
        out.append({"step": int(r["step"]), "dev": vals})
  return out


def budget_of(config: dict | None, results: dict) -> dict:
  flat = provenance.flatten(config or {})
  out = {key: flat[path] for path, key in BUDGET_FIELDS if path in flat}
  train = results.get("train", {})
  if "final_step" in train:
    out["steps_run"] = train["final_step"]
  if "early_stopped_at" in train:
    out["early_stopped_at"] = train["early_stopped_at"]
  return out


def machine() -> str:
  """The CPU (name, family, model, vector ISA) and core count that a row's timings were taken
  on (acl_jax.cpuinfo)."""
  return cpuinfo.describe()


def row_from_run(workdir: str, sweep: str, settings: dict, config: str = "",
                 set_args: list[str] | None = None, config_json: dict | None = None) -> dict:
  """The record row of a finished run folder written by train.py (and eval.py).

  settings: the run's settings in order, `task`, `method`, grid fields and `seed`.
  config_json: the run's config when config.json is not in the folder.
  """
  res = _load(os.path.join(workdir, "results.json"))
  if not res or "train" not in res:
    raise ValueError(f"{workdir} is not a finished run (no results.json with its train "
                     "record); train it first.")
  cfg = config_json if config_json is not None else _load(os.path.join(workdir, "config.json"))
  train = dict(res["train"])
  code = train.pop("code_versions", [])
  row = {"sweep": sweep, "run": run_name(settings)}
  for k in OWN:
    if k in settings:
      row[k] = int(settings[k]) if k == "seed" else settings[k]
  row["overrides"] = {k: v for k, v in settings.items() if k not in OWN}
  row["config"] = config
  row["set"] = sorted(set_args or [])
  row["budget"] = budget_of(cfg, res)
  row["evals"] = evals_of(workdir)
  row["final"] = {"checkpoint_step": res.get("checkpoint_step"), **_scores(res)}
  latest = _load(os.path.join(workdir, "results_latest.json"))
  if latest:
    row["latest"] = {"checkpoint_step": latest.get("checkpoint_step"), **_scores(latest)}
  early = {}
  for name in sorted(os.listdir(workdir)):
    if name.startswith("early_exit_") and name.endswith("_dev.json"):
      sweep_rows = (_load(os.path.join(workdir, name)) or {}).get("rows", [])
      early[name[len("early_exit_"):-len("_dev.json")]] = sweep_rows
  if early:
    row["early_exit"] = early
    row["timed_on"] = machine()  # the sweep runs eval.py's timed passes here
  spent = _load(os.path.join(workdir, RUN_TIME))
  if spent and spent.get("run", _folder(workdir)) != _folder(workdir):
    spent = None  # another run's times (a copied folder): this run is untimed
  if spent:  # wall seconds of train.py and the post steps, all attempts; on this machine
    row["seconds"] = round(spent["seconds"], 1)
    # CPU time only where every attempt measured it, and training was among them (a folder
    # finished elsewhere has only its evaluations timed here)
    if spent.get("cpu_attempts", 0) == spent.get("attempts") > 0:
      row["cpu_seconds"] = round(spent["cpu_seconds"], 1)
    row["workers"] = spent.get("workers", 1)
    if spent.get("spans"):  # when each timed step ended: a copied timing shows in them
      row["time_spans"] = spent["spans"]
    if spent.get("lost"):  # an attempt stopped with its runner: these times are too low
      row["timing_incomplete"] = True
    row["timed_on"] = machine()
  row["train"] = train
  row["code"] = code
  return row


def _folder(workdir: str) -> str:
  return os.path.basename(os.path.normpath(workdir))


def add_time(workdir: str, seconds: float, workers: int = 1, attempt: bool = False,
             cpu: float | None = None) -> None:
  """Adds `seconds` of wall time (and `cpu` CPU seconds) to the run folder's RUN_TIME."""
  path = os.path.join(workdir, RUN_TIME)
  spent = _load(path) or {"seconds": 0.0, "attempts": 0}
  spent["run"] = _folder(workdir)
  spent.setdefault("spans", []).append({"end": round(time.time(), 1),
                                        "seconds": round(seconds, 1)})
  spent["seconds"] += seconds
  if cpu is not None:
    spent["cpu_seconds"] = spent.get("cpu_seconds", 0.0) + cpu
    spent["cpu_attempts"] = spent.get("cpu_attempts", 0) + int(attempt)
  spent["attempts"] += int(attempt)
  if attempt:
    spent["open"] = False
  spent["workers"] = workers
  provenance.write_atomic(path, json.dumps(spent))


def begin_attempt(workdir: str) -> None:
  """Marks a train.py attempt as started; one still open when the next begins was stopped
  with its runner before its time was added (`lost`), so the run's time is incomplete."""
  path = os.path.join(workdir, RUN_TIME)
  spent = _load(path) or {"seconds": 0.0, "attempts": 0}
  spent["run"] = _folder(workdir)
  if spent.get("open"):
    spent["lost"] = spent.get("lost", 0) + 1
  spent["open"] = True
  provenance.write_atomic(path, json.dumps(spent))


def read(path: str) -> list[dict]:
  """The rows of a record file in order; a later row with an already seen `run` is dropped
  (two hosts of one job may both append a run)."""
  if not os.path.isfile(path):
    return []
  rows, seen = [], set()
  with open(path) as f:
    for i, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        row = json.loads(line)
      except ValueError as e:
        raise ValueError(f"{path}:{i} is not a JSON row ({e}); fix or remove that line.") from e
      if row.get("run") in seen:
        continue
      seen.add(row.get("run"))
      rows.append(row)
  return rows


def append(path: str, row: dict) -> bool:
  """Appends `row` unless the file already has its run; returns whether it wrote. The read
  and the write happen under an exclusive lock, so concurrent sweeps do not duplicate rows."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "a+") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      f.seek(0)
      for line in f:
        if line.strip() and json.loads(line).get("run") == row["run"]:
          return False
      f.seek(0, os.SEEK_END)
      f.write(json.dumps(row, sort_keys=False) + "\n")
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


def scores(row: dict, which: str = "final") -> dict:
  """{"split/metric": value} of a row's final (selected checkpoint), latest (final weights)
  or last (the last dev evaluation) scores."""
  if which == "last":
    return {f"dev/{k}": v for k, v in (row["evals"][-1]["dev"] if row["evals"] else {}).items()}
  src = row.get(which) or {}
  return {f"{s}/{k}": v for s, vals in src.items() if isinstance(vals, dict)
          for k, v in vals.items() if isinstance(v, (int, float))}
