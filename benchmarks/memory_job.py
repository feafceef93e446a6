r"""The resident memory of a whole train.py run, phase by phase.

  python benchmarks/memory_job.py --out benchmarks/results/memory_job_mr.json -- \
      --config configs/textgcn.py:mr --workdir /tmp/memory_job_mr \
      --config.task.data_dir=../shared/data --config.task.max_length=64 \
      --config.batch_size=32 --config.optim.lr=5e-05 --config.num_epochs=2 \
      --config.early_stop_patience=0 --config.progress=False

Everything after `--` goes to train.py, which runs in this process. The script wraps the
train step, `evaluate` and `Checkpoints.save`, and records the process's resident set
(/proc/self/statm) and peak (`ru_maxrss`) before and after each evaluation and save, and
after any train step that raised the resident set by more than 8 MiB. `--no_trim` turns the
loop's heap trims around evaluations and saves (`acl_jax.train.step.trim_heap`) into no-ops,
for an A/B. Memory is not time: other jobs on the machine do not change these numbers.
"""
import argparse
import os
import resource
import runpy
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
MIB = 2.0 ** 20


def main():
  if "--" not in sys.argv:
    raise SystemExit("Put train.py's arguments after --, e.g. `-- --config configs/quickstart.py "
                     "--workdir /tmp/run` (see this script's docstring).")
  cut = sys.argv.index("--")
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--out", default=os.path.join("benchmarks", "results", "memory_job.json"))
  p.add_argument("--no_trim", action="store_true")
  a = p.parse_args(sys.argv[1:cut])
  train_args = sys.argv[cut + 1:]
  import jax  # pylint: disable=import-outside-toplevel
  from acl_jax.train import checkpoint as ckpt_lib  # pylint: disable=import-outside-toplevel
  from acl_jax.train import scoring, step as step_lib  # pylint: disable=import-outside-toplevel
  from benchmarks import common  # pylint: disable=import-outside-toplevel
  page = os.sysconf("SC_PAGE_SIZE")
  events, seen = [], {"steps": 0, "rss": 0.0}

  def record(what, force=True):
    with open("/proc/self/statm") as f:
      rss = int(f.read().split()[1]) * page / MIB
    if force or rss > seen["rss"] + 8:
      events.append({"t": round(time.time(), 2), "step": seen["steps"], "what": what,
                     "rss_mib": round(rss),
                     "peak_rss_mib": round(common.peak_rss_mib())})
      print(f"step {seen['steps']:>5} {what:<18} RSS {rss:>6.0f} MiB  peak "
            f"{common.peak_rss_mib():>6.0f} MiB", file=sys.stderr, flush=True)
    seen["rss"] = max(seen["rss"], rss)

  make = step_lib.make_train_step

  def make_recorded(*args, **kw):
    fn = make(*args, **kw)

    def recorded(state, batch):
      out = fn(state, batch)
      jax.block_until_ready(out)
      seen["steps"] += 1
      record("train step", force=False)
      return out
    return recorded

  def bracketed(fn, what):
    def wrapped(*args, **kw):
      record(f"before {what}")
      try:
        return fn(*args, **kw)
      finally:
        record(f"after {what}")
    return wrapped

  step_lib.make_train_step = make_recorded
  scoring.evaluate = bracketed(scoring.evaluate, "evaluate")
  ckpt_lib.Checkpoints.save = bracketed(ckpt_lib.Checkpoints.save, "save")
  if a.no_trim:
    step_lib.trim_heap = lambda: None
  sys.argv = ["train.py", *train_args]
  try:
    runpy.run_path(os.path.join(REPO, "train.py"), run_name="__main__")
  except SystemExit as e:
    if e.code not in (None, 0):
      raise
  record("end")
  common.write_json(a.out, {"command": common.command_line(), "machine": common.machine_info(REPO),
                            "no_trim": a.no_trim, "peak_rss_mib": common.peak_rss_mib(),
                            "events": events})
  print(f"peak RSS {common.peak_rss_mib():.0f} MiB; wrote {a.out}")


if __name__ == "__main__":
  main()
