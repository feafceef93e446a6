r"""bfloat16 against float32 compute on this CPU: the MiniLM-L6 CE train step, B32 L64.

  python benchmarks/bf16_cpu.py              # 3 reps of 3 steps each, alternating dtypes
  python benchmarks/bf16_cpu.py --reps 5 --seq 128

Both steps (`model.dtype` float32 and bfloat16; params and optimizer state float32 in both)
are compiled in one process on the same synthetic batch, then timed in turn
(f32, bf16, f32, ...). Writes benchmarks/results/bf16_cpu.json and prints the medians.
"""
import argparse
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
  sys.path.insert(0, REPO)

from benchmarks import common  # pylint: disable=wrong-import-position


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--batch", type=int, default=32)
  ap.add_argument("--seq", type=int, default=64)
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--steps_per_rep", type=int, default=3)
  ap.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results", "bf16_cpu.json"))
  args = ap.parse_args()
  import jax  # pylint: disable=import-outside-toplevel
  runs = {}
  for dtype in ("float32", "bfloat16"):
    step, state, batch = common.minilm_ce_step(args.batch, args.seq, dtype=dtype)
    t0 = time.perf_counter()
    state, m = step(state, batch)
    jax.block_until_ready((state, m))
    first = time.perf_counter() - t0
    runs[dtype] = {"step": step, "state": state, "batch": batch, "first_step_s": first,
                   "times": []}
  for _ in range(args.reps):
    for dtype, r in runs.items():
      t0 = time.perf_counter()
      for _ in range(args.steps_per_rep):
        r["state"], m = r["step"](r["state"], r["batch"])
      jax.block_until_ready((r["state"], m))
      r["times"].append((time.perf_counter() - t0) / args.steps_per_rep)
  out = {"command": common.command_line(), "machine": common.machine_info(REPO),
         "batch": args.batch, "seq": args.seq}
  rows = []
  for dtype, r in runs.items():
    out[dtype] = {"first_step_s": r["first_step_s"], "step_s": common.summarize(r["times"])}
    rows.append([dtype, out[dtype]["step_s"]["median"], r["first_step_s"]])
  ratio = out["bfloat16"]["step_s"]["median"] / out["float32"]["step_s"]["median"]
  out["bf16_over_fp32_step_time"] = ratio
  common.write_json(args.out, out)
  print(f"# {common.cpu_model()}, MiniLM-L6 CE step B{args.batch} L{args.seq}")
  print(common.markdown_table(["compute dtype", "s/step (median)", "first step s"], rows))
  print(f"bf16 / fp32 step time: {ratio:.2f}")


if __name__ == "__main__":
  main()
