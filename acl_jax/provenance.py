"""What produced a result: the git revision of the checkout acl_jax runs from, the run's
config as flat dotted fields and its record of changes across resumes (a resume trains the
same run: `check_same_run`, `record_config`); and the atomic write that puts run records on
disk, by the process that writes them (`is_main`), and the lock that lets one process at a
time write a workdir. Imports nothing heavy at import time (the sweep runner uses it)."""
import contextlib
import copy
import fcntl
import json
import logging
import os
import socket
import subprocess
from typing import Any

from acl_jax.errors import UserError

log = logging.getLogger(__name__)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# Tracked paths that cannot change what a run computes: the written-up results and the docs.
# Edits there (a results stage refreshing its tables while the next run starts) do not make a
# run's code version dirty.
NOT_CODE = (":(exclude)results", ":(exclude,glob)**/*.md")


def git_revision(repo: str = REPO) -> str:
  """HEAD of `repo`, with "+dirty" when tracked files that can change a run (anything but
  `results/` and Markdown files) differ from it; "unknown" outside git."""
  def git(*args):
    try:
      return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                            check=False, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
      return ""
  head = git("rev-parse", "HEAD") or "unknown"
  dirty = head != "unknown" and git("status", "--porcelain", "--untracked-files=no", "--", ".",
                                    *NOT_CODE)
  return head + ("+dirty" if dirty else "")


def flatten(d: dict, prefix: str = "") -> dict:
  """A nested config dict as {"loss.lam": 0.5, ...}."""
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


# A workdir's config.json is the config its run started with, and is never rewritten while
# the run has a checkpoint. A resume may change only RESUMABLE_FIELDS; each resume that does
# appends one line to config_history.jsonl, {"step": S, "changes": {field: [old, new]}}: steps
# after S ran with the new values. `run_config` applies the history to config.json.
CONFIG_HISTORY = "config_history.jsonl"

# The fields a resume may change: how long and how often a run trains, evaluates, checkpoints
# and logs, and the optimizer's settings. Every other field, including any field added later,
# says WHAT is trained (the seed, the task and its data, including max_length, the train
# subsample and the dev subsample that selects checkpoints, the batch size the losses see, the
# model, the loss, the multi-exit strategy): a resume that changes one is refused
# (`check_same_run`), as its checkpoints would mix two runs. A name ending in "."
# covers its whole section.
RESUMABLE_FIELDS = (
    "optim.", "num_steps", "num_epochs", "eval_every", "checkpoint_every", "log_every",
    "early_stop_patience", "eval_splits", "eval_batch_size", "progress",
    "task.num_buckets",  # the padded lengths of the batches, not their content
    "checkpoint.",  # what stays on disk after the run
)


def is_resumable(field: str) -> bool:
  """Whether a resume may change the dotted config `field` (see RESUMABLE_FIELDS)."""
  return any(field == f or (f.endswith(".") and field.startswith(f)) for f in RESUMABLE_FIELDS)


def read_jsonl(path: str) -> list[dict]:
  """The records of a JSONL file, in file order ([] without the file); a blank line, or one
  half-written by a crash mid-write, is skipped."""
  if not os.path.isfile(path):
    return []
  out = []
  with open(path) as f:
    for line in f:
      try:
        out.append(json.loads(line))
      except ValueError:
        continue
  return out


def read_config_history(workdir: str) -> list[dict]:
  """The entries of the workdir's config_history.jsonl, oldest first ([] without one)."""
  return read_jsonl(os.path.join(workdir, CONFIG_HISTORY))


def run_config(workdir: str, before_step: int | None = None) -> dict | None:
  """The workdir's config.json with its history applied: the config the run trains with now
  (or, with `before_step`, the one that trained the steps up to it). None without a
  config.json."""
  path = os.path.join(workdir, "config.json")
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    cfg = json.load(f)
  return with_history(cfg, read_config_history(workdir), before_step)


def with_history(cfg: dict, history: list[dict], before_step: int | None = None) -> dict:
  """A copy of config.json's dict `cfg` with the changes of its config_history.jsonl entries
  applied (up to `before_step`, as `run_config`), without its ORIGIN record."""
  cfg = copy.deepcopy(cfg)
  cfg.pop(ORIGIN, None)
  for entry in history:
    if before_step is not None and entry["step"] >= before_step:
      break
    for field, (_, new) in entry["changes"].items():
      *parents, leaf = field.split(".")
      node = cfg
      for p in parents:
        node = node.setdefault(p, {})
      node[leaf] = new
  return cfg


# Resuming a workdir: the same run, with its config changes recorded.

def flat_config(cfg) -> dict:
  return flatten(json.loads(cfg.to_json_best_effort()))


def config_changes(old: dict, new: dict) -> dict[str, tuple[Any, Any]]:
  """{field: (old value, new value)} between two flattened configs, over the fields both have."""
  return {k: (old[k], new[k]) for k in sorted(old.keys() & new.keys()) if old[k] != new[k]}


def _fmt_changes(changes: dict) -> str:
  return ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changes.items())


def _read_flat_run_config(workdir: str, before_step: int | None = None) -> dict | None:
  """run_config, flattened; None (with a warning) when it cannot be read."""
  try:
    cfg = run_config(workdir, before_step)
  except (ValueError, KeyError, TypeError):
    log.warning("Could not read the config records of %s; config.json is rewritten with the "
                "current config.", workdir)
    return None
  return None if cfg is None else flatten(cfg)


def check_same_run(workdir: str, cfg) -> None:
  """Refuses to resume a workdir's checkpoint with a config that trains something else.

  A resume may change RESUMABLE_FIELDS only (how long and how often to train,
  evaluate and log; the optimizer's settings). Any other changed field is named, old -> new,
  in one error, before anything loads.
  """
  if not checkpoint_steps(workdir):
    return  # nothing to resume: the run starts over and config.json is rewritten
  old = _read_flat_run_config(workdir)
  if old is None:
    return
  fixed = {k: v for k, v in config_changes(old, flat_config(cfg)).items()
           if not is_resumable(k)}
  if fixed:
    raise UserError(
        f"{workdir} holds a checkpoint of a run with another config: {_fmt_changes(fixed)}. "
        "These fields say what is trained, so resuming would mix two runs in one workdir (a "
        "resume may change only RESUMABLE_FIELDS: the optimizer, num_steps, eval, "
        "checkpoint and logging cadence). Use a new --workdir, or set the fields back to "
        "resume this run.")


# config.json's key for where the run came from (the command and config file), not a field.
ORIGIN = "_origin"


def run_origin(workdir: str) -> dict | None:
  """The command and config file that started the run (config.json's ORIGIN), if recorded."""
  try:
    with open(os.path.join(workdir, "config.json")) as f:
      return json.load(f).get(ORIGIN)
  except (OSError, ValueError):
    return None


def record_config(workdir: str, cfg, start: int, resumed: bool,
                  origin: dict | None = None) -> None:
  """Writes the run's config records (process 0 only).

  A fresh run writes config.json and no history. A resume from step `start` keeps config.json
  (the config the run started with) and appends the fields it changes to config_history.jsonl
  as {"step": start, "changes": {field: [old, new]}}; entries of steps from `start` on are
  dropped first, as the steps they describe are retrained (like metrics.jsonl's records).
  """
  cfg_path = os.path.join(workdir, "config.json")
  hist_path = os.path.join(workdir, CONFIG_HISTORY)
  old = _read_flat_run_config(workdir, before_step=start) if resumed else None
  if old is None:
    body = json.loads(cfg.to_json_best_effort())
    if origin:
      body[ORIGIN] = origin
    write_atomic(cfg_path, json.dumps(body, indent=2))
    if os.path.exists(hist_path):
      os.remove(hist_path)
    return
  history = read_config_history(workdir)
  kept = [e for e in history if e["step"] < start]
  changes = config_changes(old, flat_config(cfg))
  if changes:
    kept.append({"step": start, "changes": {k: list(v) for k, v in changes.items()}})
    log.warning("Resuming at step %d with %s: recorded in %s (config.json keeps the config "
                "the run started with).", start, _fmt_changes(changes), CONFIG_HISTORY)
  if kept != history:
    write_atomic(hist_path, "".join(json.dumps(e) + "\n" for e in kept))


def check_not_pruned(workdir: str) -> None:
  """A finished run (results.json with its training record) whose latest checkpoint is gone
  would silently train again from step 0 and overwrite its results: refuse."""
  if run_finished(workdir) and not checkpoint_steps(workdir):
    raise UserError(f"{workdir} holds a finished run (results.json) but no checkpoint to "
                    "resume from (ckpt/ was deleted, e.g. by checkpoint.keep_train_state="
                    "False): training would restart from step 0 and overwrite its results. "
                    "Use a new --workdir, or move results.json away to retrain it here.")


# The run's label names in label-id order (a JSON list), written by the training loop; what
# export.py names the classes of an exported HF model by.
LABELS = "labels.json"


def write_labels(workdir: str, names) -> None:
  write_atomic(os.path.join(workdir, LABELS), json.dumps([str(n) for n in names]))


def read_labels(workdir: str) -> list[str] | None:
  """The run's label names; None when the workdir does not record them."""
  path = os.path.join(workdir, LABELS)
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return [str(n) for n in json.load(f)]


def run_finished(workdir: str, results: dict | None = None) -> bool:
  """Whether train.py finished the run: its results.json (`results`, if already read) holds
  the "train" record. eval.py alone, run on a half-trained workdir, writes one without it."""
  if results is None:
    try:
      with open(os.path.join(workdir, "results.json")) as f:
        results = json.load(f)
    except (OSError, ValueError):
      return False
  return "train" in results


def checkpoint_steps(workdir: str, kind: str = "ckpt") -> list[int]:
  """The steps saved in the run's `kind` checkpoint folder ("ckpt": latest, "best"), sorted;
  read from the folder names, without opening Orbax (Orbax's temp folders are not steps)."""
  path = os.path.join(workdir, kind)
  if not os.path.isdir(path):
    return []
  return sorted(int(d) for d in os.listdir(path) if d.isdigit())


def trained_fraction(workdir: str) -> float:
  """How much of its schedule a part-trained run has done: its newest checkpoint's step over
  its total steps, read from the checkpoint's JSON metadata without Orbax; 0.0 with no
  readable checkpoint."""
  for step in reversed(checkpoint_steps(workdir)):
    try:
      with open(os.path.join(workdir, "ckpt", str(step), "meta", "metadata")) as f:
        meta = json.load(f)
      return min(1.0, int(meta["step"]) / max(int(meta["total_steps"]), 1))
    except (OSError, ValueError, KeyError, TypeError):
      continue
  return 0.0


def is_main() -> bool:
  """Whether this process writes the run's records: process 0 of a multi-process job (every
  process computes; one writes)."""
  import jax  # pylint: disable=import-outside-toplevel
  return jax.process_index() == 0


def _tmp_name(path: str) -> str:
  """A temp name beside `path`, own to this process: the hosts of a multi-host sweep write the
  same files on a shared disk, and containers often give each host's process the same pid."""
  return f"{path}.tmp.{socket.gethostname()}.{os.getpid()}"


LOCK = ".lock"


class WorkdirBusy(RuntimeError):
  """Another process holds the workdir's lock."""


def lock_holder(workdir: str) -> str | None:
  """The pid of the process that holds the workdir's lock (a run writing it), or None when
  none does. Takes nothing and writes nothing: a reader (eval.py) asks before it writes into a
  run."""
  try:
    f = open(os.path.join(workdir, LOCK))  # pylint: disable=consider-using-with
  except OSError:
    return None  # no lock file: no run has written here
  with f:
    try:
      fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
      return f.read().strip() or "unknown"
    fcntl.flock(f, fcntl.LOCK_UN)
  return None


@contextlib.contextmanager
def workdir_lock(workdir: str, take: bool = True):
  """Holds an exclusive OS lock on the workdir while a run writes it, or refuses.

  The lock (flock on `<workdir>/.lock`) dies with its process, so a killed run leaves nothing
  to clean up. A multi-host job takes one lock, on process 0 (`take`): the hosts of one run
  share their workdir.
  """
  if not take:
    yield
    return
  path = os.path.join(workdir, LOCK)
  f = open(path, "a+")  # pylint: disable=consider-using-with
  try:
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      f.seek(0)
      holder = f.read().strip() or "unknown"
      raise WorkdirBusy(
          f"{workdir} is being written by another process (pid {holder}): two runs in one "
          "workdir would mix their checkpoints, config and metrics. Wait for it to finish, "
          "or use another --workdir.") from None
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    yield
  finally:
    f.close()


def write_atomic(path: str, text: str) -> None:
  """Writes `path` through a temp file and a rename, so a crash leaves the old file or none.

  results.json doubles as the "run finished" marker of scripts/sweep.py, so it must never be
  seen half-written.
  """
  tmp = _tmp_name(path)
  with open(tmp, "w") as f:
    f.write(text)
    f.flush()
    os.fsync(f.fileno())  # the data reaches the disk before the rename makes it visible
  os.replace(tmp, path)
  fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
  try:
    os.fsync(fd)  # and the rename itself survives a power loss
  finally:
    os.close(fd)
