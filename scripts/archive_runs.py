r"""Keeps the records of finished runs where a fresh machine still finds them, and puts them back.

  python scripts/archive_runs.py runs/results results/runs            # archive
  python scripts/archive_runs.py runs/results results/runs --restore  # after a reset

Run folders hold gigabytes of checkpoints and live outside git (runs/ is ignored), so a fresh
checkout has none of them. The archive mirrors the runs tree with only each finished run's
records (config.json, sweep_args.json, results.json, results_latest.json, metrics.jsonl,
early-exit sweeps; `provenance.RECORD_SUFFIXES`): small enough to commit, and all the tables,
plots and sweeps read. A reused run (a relative link to another run) is archived as the same
link. --restore copies archived runs back into run folders that do not exist: sweeps then
count them as done and the tables include them, while train.py and eval.py refuse to train or
evaluate them (their checkpoints are gone). Unfinished runs are never archived, and an existing
run folder is never overwritten: to retrain an archived run, remove it from the archive too.

scripts/sweep.py --archive does the same run by run as a sweep goes; this script covers a
whole tree at once, including records written after training (eval.py's results_latest.json
and early-exit sweeps).
"""
import argparse
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from acl_jax import provenance  # pylint: disable=wrong-import-position

# Folders inside a run that are not runs themselves.
_RUN_PARTS = {"ckpt", "best", "best_stale", "ckpt_corrupt", "tb", ".jax_cache"}


def find_runs(root: str) -> list[str]:
  """Paths (relative to root) of every run under it: folders holding results.json or
  sweep_args.json, and links named like runs (`...seed=N`); nothing below a run is searched."""
  found = []
  for dirpath, dirnames, filenames in os.walk(root):
    rel = os.path.relpath(dirpath, root)
    if rel != "." and ("results.json" in filenames or "sweep_args.json" in filenames):
      found.append(rel)
      dirnames[:] = []
      continue
    for d in list(dirnames):
      path = os.path.join(dirpath, d)
      if os.path.islink(path):  # os.walk lists links to folders with the folders
        if "seed=" in d:
          found.append(os.path.relpath(path, root))
        dirnames.remove(d)
      elif d in _RUN_PARTS:
        dirnames.remove(d)
    for f in filenames:  # links to missing runs are files to os.walk
      path = os.path.join(dirpath, f)
      if os.path.islink(path) and "seed=" in f:
        found.append(os.path.relpath(path, root))
  return sorted(found)


def archive(runs: str, dest: str) -> dict:
  counts = {"archived": 0, "unchanged": 0, "unfinished": 0, "failed": 0}
  for rel in find_runs(runs):
    src = os.path.join(runs, rel)
    if not os.path.islink(src) and not provenance.run_finished(src):
      counts["unfinished"] += 1
      continue
    try:
      wrote = provenance.archive_run(src, os.path.join(dest, rel))
    except (OSError, ValueError) as e:  # one bad run does not keep the others out
      print(f"FAILED {rel}: {e}", file=sys.stderr)
      counts["failed"] += 1
      continue
    counts["archived" if wrote else "unchanged"] += 1
    if wrote:
      print(f"archived {rel}: {', '.join(wrote)}")
  return counts


def restore(runs: str, dest: str) -> dict:
  counts = {"restored": 0, "kept": 0}
  for rel in find_runs(dest):
    done = provenance.restore_run(os.path.join(dest, rel), os.path.join(runs, rel))
    counts["restored" if done else "kept"] += 1
    if done:
      print(f"restored {rel}")
  return counts


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
  p.add_argument("runs", help="the runs tree, e.g. runs/results")
  p.add_argument("archive", help="the archive tree, e.g. results/runs")
  p.add_argument("--restore", action="store_true", help="copy archived runs back into runs")
  a = p.parse_args(argv)
  if a.restore:
    if not os.path.isdir(a.archive):
      raise SystemExit(f"{a.archive} does not exist: there is no archive to restore from.")
    counts = restore(a.runs, a.archive)
  else:
    if not os.path.isdir(a.runs):
      raise SystemExit(f"{a.runs} does not exist: there are no runs to archive.")
    counts = archive(a.runs, a.archive)
  print(", ".join(f"{v} {k}" for k, v in counts.items()))
  if counts.get("failed"):
    raise SystemExit(1)


if __name__ == "__main__":
  main()
