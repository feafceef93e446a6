r"""Imports benchmarks/vs_hf.py's MR runs as the `anchor_mr_hf` record: our CE and HF
transformers + PyTorch at the same settings, one row per framework and seed.

  python scripts/import_vs_hf.py benchmarks/results/vs_hf_intel_xeon.json

The rows keep the benchmark's file, revision and machine; a run already recorded is not
written again.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402  pylint: disable=wrong-import-position

SWEEP = "anchor_mr_hf"


def rows_of(path: str) -> list[dict]:
  """One row per MR run of a vs_hf.py result file."""
  with open(path) as f:
    data = json.load(f)
  settings = data["settings"]
  out = []
  for r in data["runs"]:
    if r["task"] != "mr":
      continue
    out.append({
        "sweep": SWEEP, "run": f"task=mr,framework={r['framework']},seed={r['seed']}",
        "task": "mr", "method": "ce", "framework": r["framework"], "seed": int(r["seed"]),
        "budget": {"num_epochs": r.get("epochs"), "batch_size": settings["batch"],
                   "max_length": settings["max_length"], "lr": settings["lr"]},
        "latest": {"test": {"accuracy": r["metric"]}},
        "seconds": round(r["wall_s"], 1), "timed_on": data["machine"]["cpu_model"],
        "source": os.path.relpath(os.path.abspath(path), records.REPO),
        "code": [data["machine"]["git"]]})
  return out


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("files", nargs="+", help="vs_hf.py result files (JSON)")
  args = p.parse_args(argv)
  path = records.path_of(SWEEP)
  for f in args.files:
    for row in rows_of(f):
      print(("recorded " if records.append(path, row) else "already recorded ") + row["run"])


if __name__ == "__main__":
  main()
