r"""How a sweep should use the machine: one run at a time on every core, or one run per core.

  python -m benchmarks.sweep_throughput --steps 40 --rounds 1

Trains the same short train.py job (real MiniLM-L6, MRPC, CE) in pairs: "one at a time" runs
the pair back to back, each on all cores (XLA's intra-op threads); "one per core" runs the two
at once, each pinned to its own core with taskset, as `scripts/sweep.py --workers 2` does.
The modes alternate for `--rounds`, after one untimed run that fills the shared compilation
cache (a sweep's runs hit it too). Prints runs per hour for each mode and writes the raw
times to --out. Needs ../shared/data/glue, and a machine with nothing else running: pause a
sweep first (kill -STOP, then kill -CONT).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks import common

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def command(workdir: str, args) -> list[str]:
  return [sys.executable, os.path.join(REPO, "train.py"), "--config", "configs/glue.py:mrpc,ce",
          "--workdir", workdir, f"--config.task.data_dir={args.data_dir}",
          "--config.task.max_length=128", f"--config.num_steps={args.steps}",
          "--config.eval_every=0", "--config.progress=False"]


def run_pair(root: str, mode: str, args, env: dict) -> float:
  """Wall seconds for two runs in `mode` ("serial" or "pinned")."""
  cpus = sorted(os.sched_getaffinity(0))
  procs, t0 = [], time.time()
  for i in range(2):
    wd = tempfile.mkdtemp(dir=root)
    cmd = command(wd, args)
    log = open(os.path.join(wd, "train.log"), "w")  # pylint: disable=consider-using-with
    if mode == "pinned":
      procs.append(subprocess.Popen(["taskset", "-c", str(cpus[i % len(cpus)])] + cmd, cwd=REPO,
                                    stdout=log, stderr=subprocess.STDOUT, env=env))
    else:
      rc = subprocess.call(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
      if rc:
        raise SystemExit(f"train.py failed (exit {rc}); see {wd}/train.log")
  for p in procs:
    if p.wait():
      raise SystemExit(f"train.py failed (exit {p.returncode}) under taskset; see {root}")
  return time.time() - t0


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--steps", type=int, default=40)
  p.add_argument("--rounds", type=int, default=1)
  p.add_argument("--data_dir", default=os.path.join(REPO, "..", "shared", "data", "glue"))
  p.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results",
                                                "sweep_throughput.json"))
  args = p.parse_args(argv)
  if not os.path.isdir(os.path.join(args.data_dir, "MRPC")):
    raise SystemExit(f"No MRPC under {args.data_dir}: give --data_dir (GLUE TSVs).")
  root = tempfile.mkdtemp(prefix="sweep_throughput_")
  env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=os.path.join(root, "cache"))
  try:
    subprocess.check_call(command(tempfile.mkdtemp(dir=root), args), cwd=REPO, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    times = {"serial": [], "pinned": []}
    for r in range(args.rounds):
      for mode in (("pinned", "serial") if r % 2 == 0 else ("serial", "pinned")):
        busy = common.cpu_busy(2.0)
        wall = run_pair(root, mode, args, env)
        times[mode].append(wall)
        print(f"round {r} {mode}: 2 runs in {wall:.1f} s (CPU busy before: {busy:.0%})",
              flush=True)
  finally:
    shutil.rmtree(root, ignore_errors=True)
  rate = {m: 2 * 3600 / (sum(v) / len(v)) for m, v in times.items()}
  print(common.markdown_table(
      ["mode", "seconds per pair (each round)", "runs per hour"],
      [[m, ", ".join(f"{x:.1f}" for x in times[m]), f"{rate[m]:.1f}"] for m in times]))
  print(f"one run per core / one at a time: {rate['pinned'] / rate['serial']:.3f}x "
        f"({common.cpu_kind()}, {os.cpu_count()} cores)")
  common.write_json(args.out, {"machine": common.machine_info(REPO), "steps": args.steps,
                               "seconds": times, "runs_per_hour": rate,
                               "command": common.command_line()})


if __name__ == "__main__":
  main()
