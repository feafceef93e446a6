"""What produced a result: the git revision of the checkout acl_jax runs from, and the run's
config as flat dotted fields. Imports nothing heavy (the sweep runner uses it)."""
import os
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
