r"""The command line of a study's sweeps: a protocol's stages, or an ad-hoc grid of runs.

The runner is acl_jax/study's (`stages.run`, `runner.run_all`).

The protocol behind RESULTS.md is fixed in studies/papers.py, its stages run by --stage:

  python -m scripts.sweep --status --runs        # every stage: done, left, machine-hours
  nohup nice -n 19 python -m scripts.sweep --stage 1 --workers 2 > runs/stage1.log 2>&1 &

Ad hoc, a grid on the command line (the record is optional):

  python -m scripts.sweep --root runs/sweeps/sst2 --config configs/glue.py:sst2 \
      --methods ce,scl,acl_embed,acl --seeds 0,1,2 \
      --set task.data_dir=../shared/data/glue --set task.max_train_examples=2000 \
      --grid loss.lam=0.1,0.5,0.9 --record results/records/sst2_lam.jsonl

Every run gets its own workdir under the root, named from its settings, and is one train.py
process: re-running the same command skips finished runs and resumes half-finished ones
(acl_jax/study/jobs.py). A finished run's evaluations, row and pruning happen on the host
that trains it, under its claim (acl_jax/study/steps.py), so any number of drivers may share
the runs (acl_jax/study/runner.py). The summary of a root (`summary.md`, `summary.json`) is
rewritten after an ad-hoc sweep, or with `--root R --aggregate_only`. Extra train.py flags
(e.g. `--distributed` on a multi-host job) go after `--`; `--config...` and `--workdir` may
not, as the sweep sets them.
"""
import argparse
import os
import sys

from acl_jax import errors
from acl_jax.study import (aggregate, jobs, loader, protocol as proto, records, runner, slots,
                           stages, status as study_status)

REPO = jobs.REPO


def load_protocol(spec: str) -> proto.Protocol:
  """The protocol `spec` names, checked (`loader.load`); a protocol that is wrong is a
  UserError naming it, before any run starts."""
  try:
    return loader.load(spec)
  except (FileNotFoundError, ValueError) as e:
    text = str(e)
    raise errors.UserError(text if text.startswith("--protocol") else
                           f"--protocol {spec}: {text}") from e


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  extra = argv[argv.index("--") + 1:] if "--" in argv else []
  argv = argv[:argv.index("--")] if "--" in argv else argv
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--protocol", default=loader.DEFAULT,
                  help="the study: a Protocol as module:NAME or a .py file (default: this "
                  "project's, studies.papers:PAPERS)")
  ap.add_argument("--stage", type=int, default=0,
                  help="train the protocol's stage as its gates release runs")
  ap.add_argument("--status", action="store_true",
                  help="every stage's recorded runs and machine-hours, what is left and what "
                  "waits on what")
  ap.add_argument("--runs", action="store_true", help="with --status: list the runs left")
  ap.add_argument("--workers", type=int, default=1,
                  help="--executor local: runs at a time, each pinned to its share of the "
                  "cores (or its accelerators; more runs than GPUs share them)")
  ap.add_argument("--executor", default="local", choices=("local", "ray"),
                  help="where runs train: this machine, or a Ray cluster's nodes (one task "
                  "each); any number of drivers may share the runs (claims in their workdirs)")
  ap.add_argument("--address", default="",
                  help="--executor ray: the cluster (host:port, ray://host:port, or auto: the "
                  "one `ray start` made here; default: a new one on this machine)")
  ap.add_argument("--until", default="",
                  help="--stage: start a run only if its estimate ends before then, the gates' "
                  "runs and then the longest that fit first (HH:MM, or seconds from now); the "
                  "estimates are the records' rates on this machine's CPU (printed)")
  ap.add_argument("--records", default="",
                  help="--stage, --status: the folder of the study's records (default "
                  "results/records, or $ACL_JAX_RECORDS)")
  ap.add_argument("--root", default="", help="folder holding one workdir per run (--stage: "
                  "one folder per record under it; default runs/sweeps)")
  ap.add_argument("--record", default="", help="ad hoc: the record file finished runs are "
                  "appended to (a named sweep's is results/records/<sweep>.jsonl)")
  ap.add_argument("--keep_checkpoints", action="store_true",
                  help="--stage keeps each run's checkpoints after writing its row")
  ap.add_argument("--config", help="config file with its task argument, e.g. configs/glue.py:rte")
  ap.add_argument("--methods", default="", help="comma list of method presets")
  ap.add_argument("--grid", action="append", help="key=v1,v2 (repeatable): a grid axis")
  ap.add_argument("--set", action="append", help="key=value (repeatable): fixed override")
  ap.add_argument("--seeds", default="0")
  ap.add_argument("--splits", default="", help="splits to aggregate (default: all)")
  ap.add_argument("--dry_run", action="store_true")
  ap.add_argument("--keep_going", action="store_true", help="continue after a failed run")
  ap.add_argument("--aggregate_only", action="store_true")
  ap.add_argument("--compile_cache", default=None,
                  help="JAX compilation cache folder shared by the runs (default "
                  "<root>/.jax_cache; 'none' turns it off)")
  args = ap.parse_args(argv)
  jobs.check_extra(extra)
  args.extra = extra
  stages.check_args(args)
  if args.records:
    records.RECORDS = os.path.abspath(args.records)
  elif (args.stage or args.status) and args.protocol != loader.DEFAULT and not os.environ.get(
      "ACL_JAX_RECORDS"):
    raise SystemExit(f"--protocol {args.protocol}: give its records folder with --records "
                     "(e.g. runs/my_study/records); results/records holds this project's "
                     "study, whose record names yours would share.")
  args.study = load_protocol(args.protocol)
  if args.records and (args.stage or args.status):
    stages.check_records_folder(args)
  if args.stage and args.stage not in args.study.stages:
    raise SystemExit(f"--stage {args.stage}: the protocol {args.study.name!r} has stages "
                     f"{', '.join(map(str, sorted(args.study.stages)))}.")
  if args.status:
    print(study_status.status(args.study, records.read_all(), REPO, show_runs=args.runs))
    return
  if not args.dry_run and not args.aggregate_only:
    slots.niceness_for_autogroup()  # `nice -n 19 setsid`: behind interactive work too
  if args.stage:
    if stages.run_stage(args.stage, args):
      raise SystemExit(1)  # the status is printed; the exit status says that a run failed
    return
  if not args.root:
    raise SystemExit("Give --stage N (of --protocol), --status, or --root and "
                     "--config for an ad-hoc sweep.")
  # train.py runs with cwd=REPO: an absolute root keeps its workdirs where this process
  # looks for finished runs, whatever the caller's working directory.
  args.root = os.path.abspath(args.root)
  args.record = args.record and os.path.abspath(args.record)
  if not args.aggregate_only:
    if not args.config:
      raise SystemExit("--config is required unless --aggregate_only.")
    failed = runner.run_all(args)
  else:
    failed = set()
  if not os.path.isdir(args.root):
    raise SystemExit(f"--root {args.root} does not exist: nothing to aggregate.")
  splits = [s for s in args.splits.split(",") if s]
  runs = aggregate.finished(args.root)
  if args.dry_run and not runs:
    return
  aggregate.check_splits(args.root, runs, splits)
  table, _ = aggregate.aggregate(args.root, splits, runs=runs)
  print(table)
  if failed:  # the table holds the runs that finished; the exit status says some did not
    raise SystemExit(1)


def user_errors(fn):
  """`fn()`; input that cannot work (a UserError) is one line on stderr and exit status 2,
  no traceback (as train.py's, acl_jax/cli.py)."""
  try:
    return fn()
  except errors.UserError as e:
    print(f"error: {' '.join(str(e).split())}", file=sys.stderr, flush=True)
    raise SystemExit(2) from None



if __name__ == "__main__":
  user_errors(main)
