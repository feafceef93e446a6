r"""Imports benchmarks/vs_hf.py's runs as anchor records: our CE and HF transformers +
PyTorch at the same settings, one row per framework and seed; MR's go to `anchor_mr_hf`,
GLUE's (with their final weights' dev scores) to `anchor_glue_hf`.

  python -m scripts.import_vs_hf benchmarks/results/vs_hf_intel_xeon.json

The rows keep the benchmark's file, revision and machine; a run already recorded is not
written again.
"""
import argparse
import json
import os

from acl_jax.study import records

SWEEP, GLUE_SWEEP = "anchor_mr_hf", "anchor_glue_hf"


def rows_of(path: str) -> list[dict]:
  """One row per run of a vs_hf.py result file (MR, and GLUE tasks with final dev scores)."""
  with open(path) as f:
    data = json.load(f)
  settings = data["settings"]
  out = []
  for r in data["runs"]:
    t, fw, seed = r["task"], r["framework"], int(r["seed"])
    if t != "mr" and not r.get("final_dev"):
      continue  # a GLUE run without its final weights' scores anchors nothing
    row = {"sweep": SWEEP if t == "mr" else GLUE_SWEEP,
           "run": f"task={t},framework={fw},seed={seed}" if t == "mr" else
                  f"task={t},framework={fw},optim.lr={settings['lr']:g},"
                  f"num_epochs={r.get('epochs')},seed={seed}",
           "task": t, "method": "ce", "framework": fw, "seed": seed,
           "overrides": {"framework": fw} if t == "mr" else
                        {"framework": fw, "optim.lr": f"{settings['lr']:g}",
                         "num_epochs": str(r.get("epochs"))},
           "budget": {"num_epochs": r.get("epochs"), "batch_size": settings["batch"],
                      "max_length": r.get("max_length", settings.get("max_length")),
                      "lr": settings["lr"]}}
    if t == "mr":
      row["latest"] = {"test": {"accuracy": r["metric"]}}
    else:
      row["evals"] = [{"step": None, "dev": r["final_dev"]}]  # the final weights' dev
      row["final"] = {"dev": r["final_dev"]}
    row.update({"seconds": round(r["wall_s"], 1), "timed_on": data["machine"]["cpu_model"],
                "source": os.path.relpath(os.path.abspath(path), records.REPO),
                "code": [data["machine"]["git"]]})
    out.append(records.make_row(**row))
  return out


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("files", nargs="+", help="vs_hf.py result files (JSON)")
  args = p.parse_args(argv)
  for f in args.files:
    for row in rows_of(f):
      wrote = records.append(records.path_of(row["sweep"]), row)
      print(("recorded " if wrote else "already recorded ") + row["run"])


if __name__ == "__main__":
  main()
