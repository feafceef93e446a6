"""One device kind per pair (`Protocol.same_device_pairs`): the runs of a task at one seed in
a stage's record are paired with each other (each method against its baselines), so they train
on one kind of device: every CPU is one kind, each accelerator (as a row's `timed_on` names it,
`status.accelerator_of`) another.

`hold_back` is the sweep's side: on a host of one kind, a released run waits while a run it is
paired with was recorded on another kind, or was started on one (the kind a sweep stamps in a
run's workdir when it hands the run out: `stamp`), so drivers of two kinds running at once, or
a part-trained run resumed elsewhere, keep to it too; a host of that kind trains it. `mixed` is
the report's: the pairs that mix kinds anyway (a run trained by hand, by a Ray cluster of mixed
nodes, whose node the planner cannot know, or by a host whose kind is not known).

Imports nothing heavy.
"""
import os

from acl_jax.study import identity, planner, protocol as proto, status

CPU = "CPU"


def kind_of(row: dict) -> str:
  """The device kind a recorded run trained on: its accelerator's name, else "CPU"."""
  return status.accelerator_of(row) or CPU


def _key(record: str, task: str, seed) -> tuple[str, str, int]:
  return record, task, int(seed)


def recorded_kinds(p: proto.Protocol, rows: dict) -> dict[tuple, dict[str, list[str]]]:
  """{(stage record, task, seed): {device kind: the runs recorded on it}} over the stages'
  own records (a row taken from another record, `reused_from`, keeps its run's kind)."""
  out = {}
  for record in dict.fromkeys(p.stage_record.values()):
    for r in rows.get(record, []):
      if "task" in r and "seed" in r:
        out.setdefault(_key(record, r["task"], r["seed"]), {}).setdefault(
            kind_of(r), []).append(r["run"])
  return out


def mixed(p: proto.Protocol, rows: dict) -> dict[tuple, dict[str, list[str]]]:
  """The (stage record, task, seed) groups whose recorded runs trained on more than one kind."""
  return {k: v for k, v in recorded_kinds(p, rows).items() if len(v) > 1}


STAMP = "device_kind"  # in a run's workdir: the kind of the host that started it


def stamp(workdir: str, kind: str) -> None:
  """Marks a run's workdir as started on a host of device `kind`."""
  with open(os.path.join(workdir, STAMP), "w") as f:
    f.write(kind + "\n")


def stamped(workdir: str) -> str | None:
  """The kind a run's workdir was started on (`stamp`), or None."""
  try:
    with open(os.path.join(workdir, STAMP)) as f:
      return f.read().strip() or None
  except OSError:
    return None


def hold_back(p: proto.Protocol, rows: dict, ready: list[planner.Run], kind: str,
              checkout: str, workdir_of=None) -> tuple[list[planner.Run], dict[str, str]]:
  """(the released runs a host of device `kind` may train, {run name: why it waits} of those
  it may not). With `p.same_device_pairs` off, every run. A run waits while its group (stage
  record, task, seed) holds a run of another kind: recorded in the stage's record, recorded
  elsewhere and to be taken from there (the lr grid's CE seed 0), or started and not yet
  recorded (its workdir's `stamp`; `workdir_of(run)` names the folder). A run taken from
  another record trains nothing and never waits."""
  if not p.same_device_pairs:
    return ready, {}
  kinds = {k: set(v) for k, v in recorded_kinds(p, rows).items()}
  elsewhere, copied = {}, set()
  key = lambda run: _key(run.sweep, run.task, dict(run.settings)["seed"])
  for run in ready:
    if run.sweep not in p.stage_record.values():
      continue
    if run.sweep not in elsewhere:
      elsewhere[run.sweep] = identity.recorded_elsewhere(run.sweep, rows, checkout)
    row = elsewhere[run.sweep].get(
        identity.settings_identity(run.config, run.sets, dict(run.settings), checkout))
    started = stamped(workdir_of(run)) if workdir_of else None
    if row is not None:
      copied.add(run.name)
      kinds.setdefault(key(run), set()).add(kind_of(row))
    elif started:
      kinds.setdefault(key(run), set()).add(started)
  keep, waits = [], {}
  for run in ready:
    there = kinds.get(key(run), set()) if run.sweep in p.stage_record.values() else set()
    if run.name in copied or not there - {kind}:
      keep.append(run)
    elif len(there) > 1:
      waits[run.name] = (f"its pair already mixes {' and '.join(sorted(there))}; train the "
                         "pair again on one kind")
    else:
      waits[run.name] = (f"waits for a host of its pair's device kind ({next(iter(there))}; "
                         f"this one: {kind})")
  return keep, waits
