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
