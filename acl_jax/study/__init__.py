"""Pre-registered studies as a library: a protocol, the runs it asks for, and its report.

  from acl_jax import study
  p = study.load("studies/mine.py")                      # a Protocol, checked
  study.run(p, 1, records="runs/mine/records", root="runs/mine/runs", workers=2)
  tables = study.report(p, "runs/mine/records")          # {table name: markdown}

scripts/sweep.py and scripts/report.py are these calls' command lines.

The layers, each importing only those above it:

- The protocol as a value (`protocol.py`, with `stats.py`'s t statistics), found and checked
  where it enters (`loader.py`; `checks.py` what the planner could not take to the end,
  `resolve.py` what train.py would refuse).
- What it asks to train next, given the records (`planner.py`; `later.py` and `rules.py` the
  later stages' rules; `estimates.py` and `status.py` what stages cost and have left).
- The records (`records.py`: one typed row per finished run, one JSONL file per record), read
  from run folders by `runs.py`, timed by `timing.py`; a run's identity is the hash of its
  resolved config (`identity.py`).
- Running the runs (`jobs.py` a run and its command, `steps.py` what happens around train.py
  under the run's claim, `runner.py` the drive loop, `stages.py` a protocol's stage), each once,
  by any number of drivers: claims on storage every node sees (`claims.py`), on this machine's
  cores or accelerators (`executors.LocalExecutor`, `slots.py`) or a Ray cluster
  (`ray_executor.RayExecutor`, `pip install acl-jax[ray]`).
- The report (`reporting.py`: the tables any protocol gets, and markdown filled from them;
  `stage_tables.py`, `summary.py`, `later_tables.py`, `holm.py`, `classes.py`, `tables.py`,
  `fmt.py` build them); `aggregate.py` summarises an ad-hoc sweep over its seeds.

Shared storage. On a cluster, every node must see the same files at the same paths: the
checkout the commands run, the workdirs, their claims and the study's records, e.g. on NFS or
a GCS-fuse mount. Claims are taken by exclusive create (O_CREAT | O_EXCL), atomic on such
storage, where flock is not: the workdir's flock (`acl_jax.provenance.workdir_lock`) guards a
run within one host, as the second line. The hosts' clocks must agree to well within the lease.

Nothing here imports jax; `ray` is imported by RayExecutor alone.
"""
__all__ = ["load", "report", "run"]


def __getattr__(name):
  # The API loads on first use, so that the light readers (`from acl_jax.study import
  # records, runs`) import nothing heavy: the report brings numpy.
  # pylint: disable=import-outside-toplevel
  if name == "load":
    from acl_jax.study.loader import load
    return load
  if name == "run":
    from acl_jax.study.stages import run
    return run
  if name == "report":
    from acl_jax.study.reporting import report
    return report
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
