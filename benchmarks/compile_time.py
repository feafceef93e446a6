r"""What JAX's persistent compilation cache saves a second process (`acl_jax.compile_cache`).

  python -m benchmarks.compile_time --rounds 2

Each round starts three processes one after the other, each of which builds the CE train
step of `benchmarks/gpu_step.py` (MiniLM-L6 shape, random init, B32 L64 by default) and times
its first call (compile and one step) and its second call (one step):
- "off": no persistent cache;
- "first": the cache on, in a new empty folder (the compile is written to it);
- "second": the cache on, in the same folder (the compile is read from it).
The compile's share is first call - second call. It prints the medians over the rounds and
writes JSON to `benchmarks/results/compile_time_<cpu kind>.json`.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import common

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(shape_name: str, batch: int, seq: int) -> dict:
  """In the child: build the step, time its first and second calls; wall from start."""
  import dataclasses  # pylint: disable=import-outside-toplevel
  import jax  # pylint: disable=import-outside-toplevel
  from acl_jax import compile_cache  # pylint: disable=import-outside-toplevel
  from benchmarks import gpu_step  # pylint: disable=import-outside-toplevel
  cache = compile_cache.enable()
  shape = dataclasses.replace(gpu_step.SHAPES[shape_name], batch=batch, seq=seq)
  fn, state, b, _ = gpu_step.build_step(shape, "ce", "float32")
  times = []
  for _ in range(2):
    t0 = time.perf_counter()
    state, m = fn(state, b)
    jax.block_until_ready((state, m))
    times.append(time.perf_counter() - t0)
  return {"cache": cache, "first_call_s": times[0], "second_call_s": times[1],
          "compile_s": times[0] - times[1], "loss": float(m["loss"])}


def run(kind: str, cache_dir: str, args) -> dict:
  """One child process; `cache_dir` "" for no cache."""
  env = dict(os.environ)
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  env["ACL_JAX_COMPILE_CACHE"] = cache_dir or "0"
  cmd = [sys.executable, "-m", "benchmarks.compile_time", "--child", "--shape", args.shape,
         "--batch", str(args.batch), "--seq", str(args.seq)]
  t0 = time.perf_counter()
  p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
  wall = time.perf_counter() - t0
  lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
  if p.returncode or not lines:
    raise SystemExit(f"{kind} child failed ({p.returncode}): {p.stderr[-2000:]}")
  return {**json.loads(lines[-1]), "process_wall_s": wall}


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--rounds", type=int, default=2)
  ap.add_argument("--shape", default="minilm_l6")
  ap.add_argument("--batch", type=int, default=32)
  ap.add_argument("--seq", type=int, default=64)
  ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  ap.add_argument("--out", default="")
  args = ap.parse_args(argv)
  if args.child:
    print(json.dumps(child(args.shape, args.batch, args.seq)), flush=True)
    return
  info = common.machine_info(REPO)
  print(f"# {common.cpu_kind()}; load average at start {info['load_average_start']}",
        flush=True)
  runs = {"off": [], "first": [], "second": []}
  for r in range(args.rounds):
    folder = tempfile.mkdtemp(prefix="acl-jax-compile-time-")
    try:
      for kind, cache in (("off", ""), ("first", folder), ("second", folder)):
        res = run(kind, cache, args)
        runs[kind].append(res)
        print(f"round {r + 1} {kind}: compile {res['compile_s']:.2f} s, first call "
              f"{res['first_call_s']:.2f} s, step {res['second_call_s']:.2f} s, process "
              f"{res['process_wall_s']:.1f} s", flush=True)
    finally:
      shutil.rmtree(folder, ignore_errors=True)
  med = {k: {f: statistics.median(x[f] for x in v) for f in
             ("compile_s", "first_call_s", "second_call_s", "process_wall_s")}
         for k, v in runs.items()}
  rows = [[k, f"{m['compile_s']:.2f}", f"{m['first_call_s']:.2f}", f"{m['second_call_s']:.2f}",
           f"{m['process_wall_s']:.1f}"] for k, m in med.items()]
  print(common.markdown_table(["cache", "compile s", "first call s", "step s", "process s"],
                              rows))
  print(f"second process / no cache, compile: "
        f"{med['second']['compile_s'] / med['off']['compile_s']:.3f}x")
  from acl_jax import cpuinfo  # pylint: disable=import-outside-toplevel
  out = args.out or os.path.join(REPO, "benchmarks", "results",
                                 f"compile_time_{cpuinfo.kind()}.json")
  common.write_json(out, {"command": common.command_line(), "machine": info,
                          "settings": {k: v for k, v in vars(args).items() if k != "child"},
                          "runs": runs, "medians": med})
  print(f"wrote {out}")


if __name__ == "__main__":
  main()
