r"""A/B of the CE train step with and without dropout (MiniLM-L6, B32), one process.

  python benchmarks/dropout_ab.py --seq 128 --reps 3

Variants: `drop` (checkpoint dropout 0.1), `nodrop` (all dropout 0), `noattdrop` (attention-
probability dropout 0). Timed in alternating repetitions after compiling; prints medians.
It shows how much of the step the dropout masks cost, for the throughput work of #2.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--seq", type=int, default=128)
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--reps", type=int, default=3)
  a = p.parse_args()
  import jax
  from benchmarks import common
  runs = {}
  for name, kw in {"drop": {}, "nodrop": dict(hidden_dropout=0.0, attention_dropout=0.0),
                   "noattdrop": dict(attention_dropout=0.0)}.items():
    fn, state, batch = common.minilm_ce_step(a.batch, a.seq, **kw)
    state, _ = fn(state, batch)
    jax.block_until_ready(state)
    runs[name] = [fn, state, []]
  for _ in range(a.reps):
    for r in runs.values():
      t = time.perf_counter()
      r[1], _ = r[0](r[1], batch)
      jax.block_until_ready(r[1])
      r[2].append(time.perf_counter() - t)
  print(f"B{a.batch} L{a.seq} median s/step:",
        {k: round(float(np.median(r[2])), 3) for k, r in runs.items()})


if __name__ == "__main__":
  main()
