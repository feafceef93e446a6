r"""A recorded run trained again at this revision, to see whether its numbers come back.

  python -m scripts.rerun --of stage1 --run task=cola,method=acl,seed=0
  XLA_FLAGS=--xla_cpu_max_isa=AVX2 python -m scripts.rerun --of stage1 \
      --run task=cola,method=acl,seed=0 --tag avx2

The run's train.py command is rebuilt from its row (config, --set overrides, grid settings and
seed) and trained under runs/rerun/<tag>/<run>; a TextGCN run then scores its final weights on
test as the sweep does. The new row goes to the record `rerun_<tag>` with `rerun_of` (the
original's record) and the XLA_FLAGS it ran under; `--collect WORKDIR` records a folder
already trained so. results/STAGE1.md's rerun table sets each beside its original: the scored
number, every dev evaluation, and the params hash (which also depends on the CPU's vector ISA:
XLA:CPU sums in another order with other vector widths).
"""
import argparse
import os
import subprocess
import sys

from acl_jax.study import loader
from acl_jax.study import records, timing

PREFIX = "rerun_"  # the record of tag T is rerun_T


def record_of(tag: str) -> str:
  return PREFIX + tag


def original(of: str, run: str) -> dict:
  rows = [r for r in records.read(records.path_of(of)) if r["run"] == run]
  if not rows:
    raise SystemExit(f"{run} is not in results/records/{of}.jsonl; name a recorded run.")
  return rows[0]


def command(row: dict, workdir: str) -> list[str]:
  settings = records.parse_name(row["run"])
  cmd = [sys.executable, os.path.join(records.REPO, "train.py"), "--config", row["config"],
         "--workdir", workdir, f"--config.seed={row['seed']}", "--config.progress=False"]
  cmd += [f"--config.{kv}" for kv in row["set"]]
  return cmd + [f"--config.{k}={v}" for k, v in settings.items()
                if k not in records.OWN]


def collect(of: str, run: str, workdir: str, tag: str) -> dict:
  """The rerun's row, appended to the tag's record (once per run)."""
  settings = records.parse_name(run)
  old = original(of, run)
  row = records.row_from_run(workdir, record_of(tag), settings, old["config"], old["set"])
  # trained here, by this command (on the devices its train record names)
  row.setdefault("timed_on", timing.machine(row["train"].get("devices")))
  row.update(rerun_of=of, xla_flags=os.environ.get("XLA_FLAGS", ""))
  row = records.make_row(**row)
  records.append(records.path_of(record_of(tag)), row)
  return row


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--protocol", default=loader.DEFAULT,
                  help="the study whose scoring the numbers follow (module:NAME or a .py file)")
  ap.add_argument("--of", required=True, help="the original's record, e.g. stage1")
  ap.add_argument("--run", required=True, help="the original's run name")
  ap.add_argument("--tag", default="head", help="names this rerun among the run's reruns")
  ap.add_argument("--collect", metavar="WORKDIR",
                  help="record a folder already trained with the original's command")
  a = ap.parse_args(argv)
  p = loader.load(a.protocol)
  row = original(a.of, a.run)
  workdir = a.collect or os.path.join(records.REPO, "runs", "rerun", a.tag, a.run)
  if not a.collect:
    subprocess.run(command(row, workdir), cwd=records.REPO, check=True)
    task = p.tasks[row["task"]]
    if task.scored != "dev":
      subprocess.run([sys.executable, os.path.join(records.REPO, "eval.py"), "--workdir",
                      workdir, "--checkpoint", "latest", "--split", task.scored],
                     cwd=records.REPO, check=True)
  new = collect(a.of, a.run, workdir, a.tag)
  print(f"{a.run}: score {p.score(row):.4f} then, {p.score(new):.4f} now; params "
        f"{row['train']['params_sha256']} then, {new['train']['params_sha256']} now")
  return 0


if __name__ == "__main__":
  sys.exit(main())
