"""Running a study's runs: each run once, on this machine or across a cluster, by any number
of drivers.

A run is one command (a `train.py` process) that writes its own workdir; `executors.RunSpec`
names it, its command and what it needs. An executor runs the specs it is given and yields a
`RunResult` (exit code, wall and CPU seconds, host) as each ends:

- `LocalExecutor` (no extra dependencies): this machine, one run per slot: per CUDA device,
  per TPU chip, or per core, each pinned to its own cores (`slots.local_slots`).
- `RayExecutor` (`ray_executor.py`, `pip install acl-jax[ray]`): one Ray task per run,
  scheduled by the run's cpus, gpus and custom resources (e.g. TPU) on the nodes of a Ray
  cluster, and pinned to as many cores of its node as it asked for.

Both claim a run before it starts (`claims`): a run finished before, or claimed by a live owner
elsewhere, is not started. So several drivers may hand out the same runs at once, and a
killed driver or worker leaves claims that go stale (dead owner, or a heartbeat older than the
lease) for the next driver to take over; its run resumes from its checkpoints.

Shared storage. On a cluster, every node must see the same files at the same paths: the
checkout the commands run, the workdirs, their claims and the study's records, e.g. on NFS or
a GCS-fuse mount. Claims are taken by exclusive create (O_CREAT | O_EXCL), atomic on such
storage, where flock is not: the workdir's flock (`acl_jax.provenance.workdir_lock`) guards a
run within one host, as the second line. The hosts' clocks must agree to well within the lease.

A finished run is read back from its folder by `runs.read(workdir)` (a `RunFolder`: its config,
scores, dev evaluations, budget and machine time), the one reader of those files that the
study's records are made from (`records`: one typed row per finished run, one JSONL file per
record). `status` gives what the recorded runs cost in machine-hours and what is left, per
stage; `aggregate` summarises an ad-hoc sweep's runs over their seeds.

Nothing here imports jax; `ray` is imported by RayExecutor alone.
"""
