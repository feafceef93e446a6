r"""Moves a sweep's runs trained by outdated code out of its tables, so a rerun retrains them.

  python scripts/retire_runs.py runs/results/multi_exit_mean/sst2 --methods 2st,alt \
      --tag pre_optfix --before 1c77d98
  python scripts/retire_runs.py runs/results/multi_exit/sst2 --methods kd,2st \
      --tag pre_s3 --without_field multi_exit.kd_form

A run (`ROOT/method=<m>,...`) is retired when the code that first trained it is not a
descendant of --before (its first `code_versions` entry, read from results.json or, for an
unfinished run, from its latest checkpoint's meta; a run with none predates revision records,
and one this repository does not hold cannot be shown current),
or when its config.json lacks --without_field (the change added that field). Retired runs move
to ROOT/<tag>/, kept but out of the sweep's summaries, and the same sweep command then trains
them again with the current code instead of mixing two codes in one row.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from acl_jax.provenance import checkpoint_steps, flatten  # pylint: disable=wrong-import-position


def first_code_version(run: str) -> str | None:
  """The revision that first trained `run` (without "+dirty"), or None if none is recorded."""
  versions = None
  path = os.path.join(run, "results.json")
  if os.path.exists(path):  # eval.py alone on an unfinished run writes one without "train"
    versions = json.load(open(path)).get("train", {}).get("code_versions")
  steps = checkpoint_steps(run)
  if not versions and steps:
    meta = os.path.join(run, "ckpt", str(steps[-1]), "meta", "metadata")
    versions = json.load(open(meta)).get("code_versions")
  if not versions or versions[0] == "unknown":
    return None
  return versions[0].split("+")[0]


def _is_commit(rev: str, repo: str) -> bool:
  p = subprocess.run(["git", "-C", repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                     capture_output=True, text=True, check=False)
  return p.returncode == 0


def trained_before(run: str, commit: str, repo: str = REPO) -> bool:
  """Whether `run`'s first code is not `commit` or a descendant of it.

  A run whose recorded revision this repository does not hold (another clone, an amended or
  rebased commit) cannot be shown current: it counts as stale, with a warning.
  """
  rev = first_code_version(run)
  if rev is None:
    return True
  if not _is_commit(rev, repo):
    print(f"warning: {run} was trained by {rev}, which is not a commit of {repo}: "
          "retired as stale.", file=sys.stderr)
    return True
  p = subprocess.run(["git", "-C", repo, "merge-base", "--is-ancestor", commit, rev],
                     capture_output=True, text=True, check=False)
  if p.returncode not in (0, 1):
    raise ValueError(f"git cannot compare {commit!r} with {rev!r} (the code of {run}): "
                     f"{p.stderr.strip()}.")
  return p.returncode == 1


def lacks_field(run: str, field: str) -> bool:
  """Whether `run`'s config.json exists and has no dotted `field`."""
  path = os.path.join(run, "config.json")
  return os.path.exists(path) and field not in flatten(json.load(open(path)))


def retire(root: str, methods: list[str], tag: str, before: str | None = None,
           without_field: str | None = None, repo: str = REPO,
           archive: str | None = None) -> list[str]:
  """Moves the stale runs of `methods` under `root` to root/tag/; returns their new paths.
  Their copies in `archive` (the records archive of root, scripts/archive_runs.py) move the
  same way, so restoring the archive does not bring them back into the tables."""
  if not before and not without_field:
    raise ValueError("Give --before COMMIT and/or --without_field FIELD: what makes a run stale.")
  if before and not _is_commit(before, repo):  # checked before anything moves
    raise ValueError(f"--before {before!r} is not a commit of {repo}. Give --before as a "
                     "commit of this repository.")
  moved = []
  for m in methods:
    for run in sorted(glob.glob(os.path.join(root, f"method={m},*"))):
      if not os.path.isdir(run):
        continue
      stale = ((before and trained_before(run, before, repo))
               or (without_field and lacks_field(run, without_field)))
      if stale:
        dest, n = os.path.join(root, tag, os.path.basename(run)), 1
        while os.path.exists(dest):  # an earlier retirement kept a run of this name
          n += 1
          dest = os.path.join(root, tag, f"{os.path.basename(run)}.{n}")
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.move(run, dest)
        moved.append(dest)
        kept = archive and os.path.join(archive, os.path.basename(run))
        if kept and os.path.lexists(kept):
          to = os.path.join(archive, tag, os.path.basename(dest))
          os.makedirs(os.path.dirname(to), exist_ok=True)
          shutil.move(kept, to)
  return moved


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("root")
  p.add_argument("--methods", required=True, help="comma-separated method names")
  p.add_argument("--tag", required=True, help="subfolder of root the stale runs move to")
  p.add_argument("--before", help="runs first trained by code older than this commit")
  p.add_argument("--without_field", help="runs whose config.json lacks this dotted field")
  p.add_argument("--archive", help="root's records archive: retired runs' copies move too")
  a = p.parse_args(argv)
  if not os.path.isdir(a.root):  # not an error: run_results.sh retires before a first sweep
    print(f"retire_runs: {a.root} does not exist yet; nothing to retire.", file=sys.stderr)
    return
  for d in retire(a.root, a.methods.split(","), a.tag, a.before, a.without_field,
                  archive=a.archive):
    print(f"retired ({a.tag}): {d}")


if __name__ == "__main__":
  main()
