r"""XLA:CPU options A/B on the MR job: train examples/s, peak RSS and test accuracy of acl-jax's
side of `benchmarks/vs_hf.py`, under each XLA_FLAGS setting, interleaved over rounds.

  python -m benchmarks.xla_flags_ab --rounds 2 --out benchmarks/results/xla_flags_ab_<cpu>.json

Each setting runs the same job (MR, a seeded 1,280-example train subsample, 2 epochs, B32, L64,
512 examples per eval split, seed 0) as its own process; the settings alternate within each
round, so a drift of the machine's speed reaches them all alike. Ratios are against the
default (no XLA_FLAGS) in the same run. The test accuracy must stay equal: a setting that
changes it changes the numbers, not only the speed.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from benchmarks import common

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (name, XLA_FLAGS): the candidates the pinned XLA:CPU has (its `XLA_FLAGS=--help`).
SETTINGS = (
    ("default", ""),
    ("oneDNN dots", "--xla_cpu_use_onednn=true --xla_cpu_experimental_onednn_fusion_type=dot"),
    ("YNN without reductions", "--xla_cpu_experimental_ynn_fusion_type=-reduce"),
    ("YNN off", "--xla_cpu_experimental_ynn_fusion_type="),
    ("memory-optimized scheduler",
     "--xla_cpu_scheduler_type=CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"),
    ("AVX2 code only", "--xla_cpu_max_isa=AVX2"),
)
JOB = ["--tasks", "mr", "--seeds", "0", "--max_train", "1280", "--max_eval", "512", "--epochs",
       "2", "--frameworks", "jax", "--fresh"]


def run_one(flags: str, tmp: str) -> dict:
  out = os.path.join(tmp, "run.json")
  env = dict(os.environ, XLA_FLAGS=flags)
  proc = subprocess.run([sys.executable, "-m", "benchmarks.vs_hf", *JOB, "--out", out],
                        cwd=REPO, env=env, capture_output=True, text=True, check=False)
  if proc.returncode:  # a setting that crashes the step is a result too
    crash = next((line.strip() for line in (proc.stdout + proc.stderr).splitlines()
                  if "Fatal Python error" in line or "Segmentation fault" in line), "")
    return {"failed": f"exit {proc.returncode}" + (f" ({crash})" if crash else "")}
  with open(out) as f:
    run = json.load(f)["runs"][0]
  return {k: run[k] for k in ("train_examples_per_s", "peak_rss_mib", "metric", "wall_s")}


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--rounds", type=int, default=2)
  p.add_argument("--only", default="", help="comma list of setting names (default: all)")
  p.add_argument("--out", default="")
  a = p.parse_args(argv)
  settings = [s for s in SETTINGS if not a.only or s[0] in a.only.split(",")]
  runs = {name: [] for name, _ in settings}
  with tempfile.TemporaryDirectory() as tmp:
    for r in range(a.rounds):
      for name, flags in settings:
        runs[name].append(run_one(flags, tmp))
        print(f"round {r + 1}, {name}: {runs[name][-1]}", flush=True)
  base = statistics.median(x["train_examples_per_s"] for x in runs[settings[0][0]])
  rows = ["| XLA_FLAGS | train ex/s (median) | vs default | peak RSS MiB (median) | "
          "test accuracy |", "|---|---|---|---|---|"]
  for name, flags in settings:
    failed = [x["failed"] for x in runs[name] if "failed" in x]
    if failed:
      rows.append(f"| {name}: `{flags}` | failed: {failed[0]} ({len(failed)} of "
                  f"{len(runs[name])} runs) | | | |")
      continue
    speed = statistics.median(x["train_examples_per_s"] for x in runs[name])
    rss = statistics.median(x["peak_rss_mib"] for x in runs[name])
    acc = ", ".join(sorted({f"{100 * x['metric']:.2f}" for x in runs[name]}))
    rows.append(f"| {name}: `{flags or '(none)'}` | {speed:.1f} | {speed / base:.2f} | "
                f"{rss:.0f} | {acc} |")
  print(f"\n{common.cpu_kind()}, {a.rounds} rounds\n" + "\n".join(rows))
  if a.out:
    common.write_json(a.out, {"command": common.command_line(),
                              "machine": common.machine_info(REPO),
                              "settings": dict(settings), "runs": runs})
  return 0


if __name__ == "__main__":
  sys.exit(main())
