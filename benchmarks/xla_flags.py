r"""XLA:CPU flag sets against the default, on the CE train step (MiniLM-L6, B32), one process each.

  python benchmarks/xla_flags.py --seq 64 --rounds 2

XLA flags are process-global, so every flag set runs in its own worker process (compile, then
`--reps` timed steps, median); the flag sets take turns for `--rounds` rounds so drift on
the machine hits all alike. Prints and writes `benchmarks/results/xla_flags.json`.
In the pinned jaxlib the dots already run through YNNPACK fusions (`__ynn_fusion`) by default;
the sets below switch that to XNNPACK, oneDNN or plain XLA and try the fast-math/ISA knobs.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

FLAG_SETS = {
    "default": "",
    "no_ynn": "--xla_cpu_experimental_ynn_fusion_type=",
    "ynn_individual_dot": "--xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT",
    "xnn_dot": ("--xla_cpu_experimental_ynn_fusion_type= "
                "--xla_cpu_experimental_xnn_fusion_type=LIBRARY_FUSION_TYPE_DOT"),
    "xnn_graph_greedy": "--xla_cpu_experimental_xnn_graph_fusion_mode=XNN_GRAPH_FUSION_MODE_GREEDY",
    "onednn": "--xla_cpu_use_onednn=true",
    "onednn_dot": ("--xla_cpu_experimental_ynn_fusion_type= "
                   "--xla_cpu_experimental_onednn_fusion_type=LIBRARY_FUSION_TYPE_DOT"),
    "fast_math": "--xla_cpu_enable_fast_math=true",
    "vector_512": "--xla_cpu_prefer_vector_width=512",
}


def worker(seq: int, batch: int, reps: int) -> dict:
  import time
  import jax
  from benchmarks import common
  fn, state, data = common.minilm_ce_step(batch, seq)
  t = time.perf_counter()
  state, metrics = fn(state, data)
  jax.block_until_ready(state)
  compile_s = time.perf_counter() - t
  times = []
  for _ in range(reps):
    t = time.perf_counter()
    state, metrics = fn(state, data)
    jax.block_until_ready(state)
    times.append(time.perf_counter() - t)
  return {"compile_s": compile_s, "times": times, "loss": float(metrics["loss"])}


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--seq", type=int, default=64)
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--reps", type=int, default=4)
  p.add_argument("--rounds", type=int, default=2)
  p.add_argument("--sets", default=",".join(FLAG_SETS))
  p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  a = p.parse_args()
  if a.worker:
    print("RESULT " + json.dumps(worker(a.seq, a.batch, a.reps)), flush=True)
    return
  names = a.sets.split(",")
  unknown = sorted(set(names) - set(FLAG_SETS))
  if unknown:
    raise SystemExit(f"unknown flag sets {unknown}; known: {sorted(FLAG_SETS)}")
  runs = {n: [] for n in names}
  for r in range(a.rounds):
    for n in names:
      env = dict(os.environ, XLA_FLAGS=FLAG_SETS[n], HF_HUB_OFFLINE="1")
      out = subprocess.run([sys.executable, __file__, "--worker", "--seq", str(a.seq),
                            "--batch", str(a.batch), "--reps", str(a.reps)],
                           env=env, capture_output=True, text=True, cwd=REPO)
      line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
      if out.returncode or not line:
        print(f"[round {r}] {n}: FAILED\n{out.stderr[-2000:]}", flush=True)
        continue
      res = json.loads(line[0][7:])
      runs[n].append(res)
      print(f"[round {r}] {n:20s} median {np.median(res['times']):.3f} s/step "
            f"(compile {res['compile_s']:.1f} s, loss {res['loss']:.4f})", flush=True)
  base = np.median([np.median(x["times"]) for x in runs.get("default", [])] or [np.nan])
  summary = {}
  print(f"\nB{a.batch} L{a.seq}: median over rounds of each process's median step time")
  for n, rs in runs.items():
    if not rs:
      continue
    med = float(np.median([np.median(x["times"]) for x in rs]))
    summary[n] = {"flags": FLAG_SETS[n], "median_s": med, "vs_default": med / base,
                  "runs": rs}
    print(f"  {n:20s} {med:.3f} s/step  x{med / base:.2f} of default")
  os.makedirs(os.path.join(REPO, "benchmarks", "results"), exist_ok=True)
  with open(os.path.join(REPO, "benchmarks", "results", "xla_flags.json"), "w") as f:
    json.dump({"seq": a.seq, "batch": a.batch, "reps": a.reps, "rounds": a.rounds,
               "load_avg": os.getloadavg(), "sets": summary}, f, indent=2)


if __name__ == "__main__":
  main()
