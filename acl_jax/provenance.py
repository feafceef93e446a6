"""What produced a result: the git revision of the checkout acl_jax runs from, and the run's
config as flat dotted fields; and the atomic write that puts run records on disk. Imports
nothing heavy (the sweep runner uses it)."""
import json
import os
import socket
import subprocess

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
# (train.loop.check_same_run), as its checkpoints would mix two runs. A name ending in "."
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


def read_config_history(workdir: str) -> list[dict]:
  """The entries of the workdir's config_history.jsonl, oldest first ([] without one); a
  half-written last line (a crash mid-write) is skipped."""
  path = os.path.join(workdir, CONFIG_HISTORY)
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


def run_config(workdir: str, before_step: int | None = None) -> dict | None:
  """The workdir's config.json with its history applied: the config the run trains with now
  (or, with `before_step`, the one that trained the steps up to it). None without a
  config.json."""
  path = os.path.join(workdir, "config.json")
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    cfg = json.load(f)
  for entry in read_config_history(workdir):
    if before_step is not None and entry["step"] >= before_step:
      break
    for field, (_, new) in entry["changes"].items():
      *parents, leaf = field.split(".")
      node = cfg
      for p in parents:
        node = node.setdefault(p, {})
      node[leaf] = new
  return cfg


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


def _tmp_name(path: str) -> str:
  """A temp name beside `path`, own to this process: the hosts of a multi-host sweep write the
  same files on a shared disk, and containers often give each host's process the same pid."""
  return f"{path}.tmp.{socket.gethostname()}.{os.getpid()}"


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
