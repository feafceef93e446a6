"""What `scripts.sweep --executor ray` adds per run over `--executor local`: the driver's wall
time over four runs whose train.py does nothing (tests/test_sweep_executors.py's stand-in:
it writes a finished run's files), so the time is the sweep's own: claims, records, process
starts, and on Ray the connection and one task per run. Both on this machine, two runs at a
time (local: `--workers 2`; Ray: a local cluster of 2 CPUs, started here beforehand).

  python -m benchmarks.sweep_executors [--repeats 3]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from acl_jax import cpuinfo
from tests.test_sweep_executors import DRIVER, FAKE_TRAIN

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = 4


def driver_seconds(fake: str, root: str, kind: str, address: str) -> float:
  argv = ["--root", os.path.join(root, "runs"), "--config", "configs/glue.py:rte", "--methods",
          "ce,acl", "--seeds", "0,1", "--record", os.path.join(root, "records", "s.jsonl"),
          "--compile_cache", "none", "--executor", kind, "--address", address, "--workers", "2"]
  t0 = time.time()
  subprocess.run([sys.executable, "-c", DRIVER, fake, *argv], cwd=REPO, check=True,
                 stdout=subprocess.DEVNULL)
  return time.time() - t0


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--repeats", type=int, default=3)
  args = p.parse_args()
  import ray  # pylint: disable=import-outside-toplevel
  temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
  work = tempfile.mkdtemp(prefix="sweep_exec")
  fake = os.path.join(work, "fake_train.py")
  with open(fake, "w") as f:
    f.write(FAKE_TRAIN)
  t0 = time.time()
  ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
           _node_ip_address="127.0.0.1", _temp_dir=temp,
           runtime_env={"env_vars": {"PYTHONPATH": REPO}})
  up = time.time() - t0
  address = ray.get_runtime_context().gcs_address
  try:
    secs = {"local": [], "ray": []}
    for i in range(args.repeats):
      for kind in secs:
        root = os.path.join(work, f"{kind}{i}")
        secs[kind].append(driver_seconds(fake, root, kind, address))
  finally:
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
  print(f"{cpuinfo.describe()}; Ray cluster (2 CPUs) up in {up:.1f} s, not counted below")
  print(f"{RUNS} no-op runs, driver wall time / {RUNS}, median of {args.repeats} "
        "(all values, s per run):")
  med = {k: statistics.median(v) / RUNS for k, v in secs.items()}
  for kind, vals in secs.items():
    print(f"  {kind:5s}: {med[kind]:.2f} s per run "
          f"({', '.join(f'{v / RUNS:.2f}' for v in vals)})")
  print(f"  Ray over local: +{med['ray'] - med['local']:.2f} s per run")


if __name__ == "__main__":
  main()
