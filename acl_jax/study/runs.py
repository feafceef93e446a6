"""A run folder read back as data: `read(workdir)` -> `RunFolder`.

The files of a train.py workdir that a study reads, and who writes them:

  config.json            train.py: the config the run started with
  config_history.jsonl   train.py: what each resume changed (provenance.with_history)
  metrics.jsonl          train.py: train and dev records, one a line
  results.json           train.py at its end ("train": the run is finished); eval.py merges
                         the splits it scores again into it
  results_latest.json    eval.py --checkpoint latest: the final weights' scores
  early_exit_<policy>_dev.json   eval.py's early-exit sweep on dev: {"rows": [...]}
  sweep_time.json        the sweep (timing.py): the machine time spent on the folder
  sweep_args.json        the sweep (runner.py): the --config and --set the run was started with

The study's scripts read these files here and nowhere else (but for the test of a finished
run that training and the executors share, `provenance.run_finished`). A file that is
missing, or cut short (a line of metrics.jsonl cut by a crash, a results.json copied in
half), reads as absent: the folder is then not a finished run, or its row lacks that part.
Writers stay with their owners (train.py, eval.py, acl_jax/study/records.py).

Imports nothing heavy: no jax, no numpy.
"""
import dataclasses
import json
import os

from acl_jax import provenance

CONFIG = "config.json"
METRICS = "metrics.jsonl"
RESULTS = "results.json"
LATEST = "results_latest.json"
EARLY_EXIT = ("early_exit_", "_dev.json")  # early_exit_<policy>_dev.json
TIMING = "sweep_time.json"
SWEEP_ARGS = "sweep_args.json"

# The config fields a run's budget states (dotted config path -> budget key).
BUDGET_FIELDS = (("num_steps", "num_steps"), ("num_epochs", "num_epochs"),
                 ("batch_size", "batch_size"), ("task.max_length", "max_length"),
                 ("optim.lr", "lr"), ("optim.head_lr_mult", "head_lr_mult"),
                 ("early_stop_patience", "early_stop_patience"), ("eval_every", "eval_every"))


def _json(path: str) -> dict | None:
  """A JSON object file; None when it is missing, unreadable, cut short or not an object."""
  try:
    with open(path) as f:
      body = json.load(f)
  except (OSError, ValueError):
    return None
  return body if isinstance(body, dict) else None


def folder_name(workdir: str) -> str:
  """The folder's own name, which a sweep names after the run's settings."""
  return os.path.basename(os.path.normpath(workdir))


def read_timing(workdir: str) -> dict | None:
  """sweep_time.json where it was written for this folder: {"seconds", "attempts", "workers",
  "cpu_seconds", "cpu_attempts", "spans", "lost", "open", "run"}. One that names another
  folder (copied with its run) is not this run's time: None."""
  spent = _json(os.path.join(workdir, TIMING))
  if spent and spent.get("run", folder_name(workdir)) != folder_name(workdir):
    return None
  return spent


def read_sweep_args(workdir: str) -> dict | None:
  """sweep_args.json: {"config": ..., "set": [...]}; None for a run started without one."""
  return _json(os.path.join(workdir, SWEEP_ARGS))


def read_config(workdir: str) -> tuple[dict | None, dict | None]:
  """(the config the run trains with now, the config it started with), each flattened to
  dotted keys (`RunFolder.config`, `RunFolder.started`)."""
  started = _json(os.path.join(workdir, CONFIG))
  if started is None:
    return None, None
  try:
    now = provenance.flatten(provenance.with_history(
        started, provenance.read_config_history(workdir)))
  except (ValueError, KeyError, TypeError, AttributeError):
    now = None  # a history line that is not {"step", "changes": {field: [old, new]}}
  started = {k: v for k, v in started.items() if k != provenance.ORIGIN}
  return now, provenance.flatten(started)


def scores(results: dict) -> dict:
  """A results dict's per-split metrics without example counts: {split: {metric: value}},
  with eval.py's per-class recall and support where it wrote them."""
  out = {}
  for split, vals in results.items():
    if isinstance(vals, dict) and split != "train":
      out[split] = {k: v for k, v in vals.items()
                    if isinstance(v, (int, float)) and k != "num_examples"}
      per_class = vals.get("per_class")
      if isinstance(per_class, dict):  # eval.py's: each class's recall and support
        out[split]["per_class_recall"] = {c: r["recall"] for c, r in per_class.items()}
        out[split]["per_class_support"] = {c: r["support"] for c, r in per_class.items()}
  return out


def _evals(workdir: str) -> list[dict]:
  out = []
  for r in provenance.read_jsonl(os.path.join(workdir, METRICS)):
    if isinstance(r, dict) and r.get("kind") in ("dev", "eval"):
      vals = {k: v for k, v in r.items()
              if k not in ("step", "kind", "num_examples") and isinstance(v, (int, float))}
      out.append({"step": int(r["step"]), "dev": vals})
  return out


def _early_exit(workdir: str) -> dict[str, list]:
  head, tail = EARLY_EXIT
  names = sorted(os.listdir(workdir)) if os.path.isdir(workdir) else []
  return {name[len(head):-len(tail)]: (_json(os.path.join(workdir, name)) or {}).get("rows", [])
          for name in names if name.startswith(head) and name.endswith(tail)}


@dataclasses.dataclass(frozen=True)
class RunFolder:
  """What a run folder holds, read once.

  Attributes:
    workdir: the folder.
    config: the config the run trains with now (config.json with config_history.jsonl
      applied: e.g. the num_steps a resume extended it to), flat dotted keys; None without one.
    started: config.json alone, the config the run started with, flat; None without one.
    results: results.json; None while the run trains (or with the file cut short).
    latest: results_latest.json, the final weights' scores; None where not evaluated.
    evals: every dev evaluation of metrics.jsonl, oldest first, as {"step": S, "dev":
      {metric: value}}; a line cut by a crash is skipped.
    early_exit: {policy: eval.py's early-exit rows on dev}.
    timing: this folder's sweep_time.json (`read_timing`); None where untimed.
    sweep_args: sweep_args.json (`read_sweep_args`).
  """
  workdir: str
  config: dict | None
  started: dict | None
  results: dict | None
  latest: dict | None
  evals: list[dict]
  early_exit: dict[str, list]
  timing: dict | None
  sweep_args: dict | None

  @property
  def name(self) -> str:
    return folder_name(self.workdir)

  @property
  def finished(self) -> bool:
    """Whether train.py finished the run: results.json holds its "train" record (eval.py
    alone, on a half-trained run, writes one without it)."""
    return self.results is not None and provenance.run_finished(self.workdir, self.results)

  @property
  def train(self) -> dict:
    """results.json's training record ({} before the run finished)."""
    return dict((self.results or {}).get("train", {}))

  @property
  def budget(self) -> dict:
    """What the run was started to train (config.json's BUDGET_FIELDS: a resume that trains
    longer shows in `config` and here in `steps_run`) and the steps it ran (`steps_run`, and
    `early_stopped_at` where early stopping ended it)."""
    out = {key: self.started[path] for path, key in BUDGET_FIELDS
           if self.started and path in self.started}
    if "final_step" in self.train:
      out["steps_run"] = self.train["final_step"]
    if "early_stopped_at" in self.train:
      out["early_stopped_at"] = self.train["early_stopped_at"]
    return out


def read(workdir: str) -> RunFolder:
  """The run folder's files as they are now (a folder that does not exist reads as empty)."""
  config, started = read_config(workdir)
  return RunFolder(workdir=workdir, config=config, started=started,
                   results=_json(os.path.join(workdir, RESULTS)),
                   latest=_json(os.path.join(workdir, LATEST)), evals=_evals(workdir),
                   early_exit=_early_exit(workdir), timing=read_timing(workdir),
                   sweep_args=read_sweep_args(workdir))

def row_scores(row: dict, which: str = "final") -> dict:
  """{"split/metric": value} of a row's final (selected checkpoint), latest (final weights)
  or last (the last dev evaluation) scores."""
  if which == "last":
    return {f"dev/{k}": v for k, v in (row["evals"][-1]["dev"] if row["evals"] else {}).items()}
  src = row.get(which) or {}
  return {f"{s}/{k}": v for s, vals in src.items() if isinstance(vals, dict)
          for k, v in vals.items() if isinstance(v, (int, float))}
