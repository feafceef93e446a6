"""What produced a result: the git revision of the checkout acl_jax runs from, and the run's
config as flat dotted fields; and the atomic write that puts run records on disk. Imports
nothing heavy (the sweep runner uses it)."""
import filecmp
import json
import os
import shutil
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


def write_atomic(path: str, text: str) -> None:
  """Writes `path` through a temp file and a rename, so a crash leaves the old file or none.

  results.json doubles as the "run finished" marker of scripts/sweep.py, so it must never be
  seen half-written.
  """
  # Host and pid: the hosts of a multi-host sweep write the same files on a shared disk, and
  # containers often give each host's process the same pid.
  tmp = f"{path}.tmp.{socket.gethostname()}.{os.getpid()}"
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


# A run's records: the small files that say what it was and what it measured (config.json,
# sweep_args.json, results.json, results_latest.json, metrics.jsonl, early-exit sweeps), as
# opposed to its checkpoints, features, TensorBoard events and logs.
RECORD_SUFFIXES = (".json", ".jsonl", ".md")


def record_files(workdir: str) -> list[str]:
  """Names of the run's record files (top level only; no temp files of `write_atomic`)."""
  return sorted(n for n in os.listdir(workdir)
                if n.endswith(RECORD_SUFFIXES) and ".tmp." not in n
                and os.path.isfile(os.path.join(workdir, n)))


def _copy_atomic(src: str, dst: str) -> None:
  """`src` to `dst` with its modification time (scripts compare record ages) via a rename."""
  tmp = f"{dst}.tmp.{socket.gethostname()}.{os.getpid()}"
  shutil.copy2(src, tmp)
  os.replace(tmp, dst)


def _same(a: str, b: str) -> bool:
  return os.path.isfile(b) and filecmp.cmp(a, b, shallow=False)


def archive_run(workdir: str, dest: str) -> list[str]:
  """Copies a finished run's records to `dest`, a folder that can live in git where run
  folders (gigabytes of checkpoints) cannot; returns the names it wrote (unchanged files are
  left alone). A run that is a relative link to another run (a reused grid point) is archived
  as the same link, so it points at the other run's archive."""
  if os.path.islink(workdir):
    target = os.readlink(workdir)
    if os.path.isabs(target):
      raise ValueError(f"{workdir} links to the absolute path {target}: an archive cannot "
                       "carry it; make the link relative (scripts/run_results.sh reuse does).")
    if os.path.islink(dest) and os.readlink(dest) == target:
      return []
    if os.path.lexists(dest):
      raise ValueError(f"{dest} exists and is not a link to {target}: move it away first.")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    os.symlink(target, dest)
    return [os.path.basename(dest)]
  if not run_finished(workdir):
    raise ValueError(f"{workdir} is not a finished run (no results.json with its train "
                     "record): only finished runs are archived.")
  os.makedirs(dest, exist_ok=True)
  wrote = []
  for name in record_files(workdir):
    src, dst = os.path.join(workdir, name), os.path.join(dest, name)
    if not _same(src, dst):
      _copy_atomic(src, dst)
      wrote.append(name)
  return wrote


def restore_run(archived: str, workdir: str) -> bool:
  """Puts an archived finished run's records back in `workdir` (a fresh machine's empty run
  folder), so sweeps count it as done and tables read it; its checkpoints are gone, which
  train.py reports instead of retraining. Returns whether it restored anything: nothing when
  the archive holds no finished run, the workdir already holds a finished one, or the workdir
  holds checkpoints of its own (an unfinished run resumes from those instead)."""
  if os.path.islink(archived):
    if os.path.lexists(workdir):
      return False
    os.makedirs(os.path.dirname(workdir), exist_ok=True)
    os.symlink(os.readlink(archived), workdir)
    return True
  if not run_finished(archived) or run_finished(workdir):
    return False
  if any(os.path.isdir(os.path.join(workdir, d)) for d in ("ckpt", "best")):
    return False
  os.makedirs(workdir, exist_ok=True)
  for name in record_files(archived):
    _copy_atomic(os.path.join(archived, name), os.path.join(workdir, name))
  return True
