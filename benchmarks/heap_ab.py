r"""A/B of `acl_jax.host_heap.keep_step_memory` on the CE train step (MiniLM-L6, B32).

  python benchmarks/heap_ab.py --seq 64 --rounds 4

Variants, each in its own fresh process (the settings are fixed when JAX's backend starts),
the processes alternating round by round (default, kept, ..., then the next round):
  default: glibc's and JAX's defaults (ACL_JAX_KEEP_STEP_MEMORY=0): the temp block is mapped
    afresh and faulted in on every call;
  kept: `keep_step_memory` (what train.py runs): glibc keeps freed heap memory, and JAX's CPU
    client runs each step on the calling thread;
  sync: only the synchronous dispatch, glibc's defaults (does dispatch alone change speed?);
  heap_async (with --all): only the heap settings, dispatch left asynchronous, with every
    thread on glibc's main heap (M_ARENA_MAX 1; XLA's worker threads would otherwise map the
    block on their own). Shows why the dispatch mode is part of the setting: the next step
    can allocate its block before the last one is freed, and the heap then keeps both.
Each process compiles, warms up 2 steps, then times --steps steps one by one: wall time,
minor page faults and system CPU per step (getrusage), and its peak RSS.
Prints per-variant medians over all timed steps and the ratio of each to `default`.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(variant: str, batch: int, seq: int, steps: int) -> dict:
  import ctypes  # pylint: disable=import-outside-toplevel
  import resource  # pylint: disable=import-outside-toplevel
  import time  # pylint: disable=import-outside-toplevel
  from acl_jax import host_heap  # pylint: disable=import-outside-toplevel
  kept = host_heap.keep_step_memory() if variant == "kept" else False
  import jax  # pylint: disable=import-outside-toplevel
  if variant == "sync":
    jax.config.update("jax_cpu_enable_async_dispatch", False)
  elif variant == "heap_async":
    libc = ctypes.CDLL("libc.so.6")
    for param, value in ((-4, 0), (-1, 2 ** 31 - 1), (-8, 1)):  # MMAP_MAX, TRIM, ARENA_MAX
      assert libc.mallopt(param, value) == 1
  from benchmarks import common  # pylint: disable=import-outside-toplevel
  fn, state, data = common.minilm_ce_step(batch, seq)
  for _ in range(3):  # the compile, then 2 warm-up steps
    state, _ = fn(state, data)
    jax.block_until_ready(state)
  rows = []
  for _ in range(steps):
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    state, _ = fn(state, data)
    jax.block_until_ready(state)
    t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    rows.append({"s": t1 - t0, "minor_faults": r1.ru_minflt - r0.ru_minflt,
                 "system_s": r1.ru_stime - r0.ru_stime, "user_s": r1.ru_utime - r0.ru_utime})
  return {"variant": variant, "kept": kept, "steps": rows, "peak_rss_mib": common.peak_rss_mib()}


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--seq", type=int, default=64)
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--rounds", type=int, default=4)
  p.add_argument("--steps", type=int, default=8, help="timed steps per process")
  p.add_argument("--all", action="store_true", help="also run the heap_async variant")
  p.add_argument("--out", default=None)
  p.add_argument("--child", default=None, help=argparse.SUPPRESS)
  a = p.parse_args()
  if a.child:
    print(json.dumps(child(a.child, a.batch, a.seq, a.steps)))
    return
  from benchmarks import common  # pylint: disable=import-outside-toplevel
  variants = ["default", "kept", "sync"] + (["heap_async"] if a.all else [])
  runs = {v: [] for v in variants}
  for r in range(a.rounds):
    for v in variants:
      env = {**os.environ, "ACL_JAX_KEEP_STEP_MEMORY": "1" if v == "kept" else "0"}
      out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", v,
                            "--seq", str(a.seq), "--batch", str(a.batch),
                            "--steps", str(a.steps)], cwd=REPO, env=env, text=True,
                           capture_output=True, check=True)
      res = json.loads(out.stdout.strip().splitlines()[-1])
      runs[v].append(res)
      med = statistics.median(s["s"] for s in res["steps"])
      print(f"round {r} {v:<10} median {med:.3f} s/step, peak {res['peak_rss_mib']:.0f} MiB",
            flush=True)
  rows, summary = [], {}
  for v in variants:
    steps = [s for res in runs[v] for s in res["steps"]]
    summary[v] = {k: statistics.median(s[k] for s in steps)
                  for k in ("s", "minor_faults", "system_s", "user_s")}
    summary[v]["peak_rss_mib"] = [res["peak_rss_mib"] for res in runs[v]]
  for v in variants:
    m = summary[v]
    rows.append([v, m["s"], m["s"] / summary["default"]["s"], int(m["minor_faults"]),
                 m["system_s"], m["user_s"],
                 f"{min(m['peak_rss_mib']):.0f}-{max(m['peak_rss_mib']):.0f}"])
  print(common.markdown_table(["variant", "s/step", "x default", "minor faults/step",
                               "system s/step", "user s/step", "peak RSS MiB"], rows))
  out = a.out or os.path.join("benchmarks", "results", f"heap_ab_L{a.seq}.json")
  common.write_json(out, {"command": common.command_line(), "machine": common.machine_info(REPO),
                          "summary": summary, "runs": runs})
  print(f"wrote {out}")


if __name__ == "__main__":
  main()
