"""What a study has cost and has left, in the machine's own units: each recorded run's
machine seconds (its CPU seconds over the cores of the machine it ran on, from the row), the
rates per epoch they give, and per stage the runs recorded, the runs known to be left and the
whole stage's estimate (the protocol's cost model, `Protocol.estimate_seconds`).

`status` is `scripts/sweep.py --status`; the report's compute table reads `stage_totals`.
Imports nothing heavy.
"""
import dataclasses
import re

import numpy as np

from acl_jax.study import estimates, identity, planner, protocol as proto


def cores_of(row: dict) -> int | None:
  """The core count of the machine a row was timed on (its `timed_on`: "..., N cores")."""
  m = re.search(r"(\d+) (?:CPU )?cores", row.get("timed_on") or "")
  return int(m.group(1)) if m else None


def accelerator_of(row: dict) -> str:
  """The accelerator a row's run trained on, as its `timed_on` names it before ", host "
  ("NVIDIA H200 GPU x1, host <CPU>, 16 cores": "NVIDIA H200 GPU"); "" for a CPU run."""
  timed = row.get("timed_on") or ""
  if ", host " not in timed:
    return ""
  return re.sub(r"\s*(\(.*\)|x\d+)$", "", timed.split(", host ")[0]).strip()


def machine_seconds(row: dict) -> float:
  """A recorded run's seconds of the whole machine it ran on: its CPU seconds over that
  machine's cores (from the row's `timed_on`), where both are recorded, else its wall time
  over the runs that shared the machine (`--workers`). Wall time also counts the waits
  behind other work on the machine; CPU time does not. A run trained on an accelerator
  (`accelerator_of`) counts its wall time over the runs that shared it: the accelerator's
  seconds, which are not the host CPU's. Attempts stopped with their runner (killed) add
  their wall time to their last output (`lost_seconds`) over the runs that shared the
  machine: no CPU time of theirs was measured."""
  cores = cores_of(row)
  lost = row.get("lost_seconds", 0.0) / row.get("workers", 1)
  if "cpu_seconds" in row and cores and not accelerator_of(row):
    return row["cpu_seconds"] / cores + lost
  return row.get("seconds", 0.0) / row.get("workers", 1) + lost


def measured_rates(rows: dict[str, list[dict]], keep=None,
                   accelerator: str = "") -> dict[tuple[str, str], float]:
  """{(task, method): mean machine seconds per epoch} over the recorded CPU runs that measured
  their time (a reused row is the same run, counted once), or over those `keep(row)` keeps.
  A run trained on an accelerator is no CPU rate: with `accelerator` (as `accelerator_of`
  names it), the runs trained on that one instead."""
  acc = {}
  for rs in rows.values():
    for r in rs:
      epochs = r.get("budget", {}).get("num_epochs")
      # (an anchor's rows time other programs: HF PyTorch, a benchmark's child)
      if ("seconds" in r and not r.get("reused_from") and epochs and "framework" not in r
          and not r.get("timing_incomplete") and accelerator_of(r) == accelerator
          and (keep is None or keep(r))):
        acc.setdefault((r["task"], r["method"]), []).append(machine_seconds(r) / epochs)
  return {k: float(np.mean(v)) for k, v in acc.items()}


def cpu_of(row: dict) -> str:
  """The CPU a row was timed on, as `acl_jax.cpuinfo.describe()` names it without the core
  count ("" where the row names none)."""
  cpu = re.sub(r"(^|, )\d+ (?:CPU )?cores.*$", "", row.get("timed_on") or "")
  return "" if "not recorded" in cpu else cpu


@dataclasses.dataclass(frozen=True)
class HostRates:
  """Seconds per epoch as one CPU runs them (`rates_on`): `rates` for the cost model, and how
  they were found: `factor`, this CPU's seconds over the other CPUs' for the same (task,
  method), the median over the `pairs` timed on both; `own`, the pairs timed on it."""
  rates: dict
  factor: float
  pairs: int
  own: int


def rates_on(rows: dict[str, list[dict]], cpu: str, accelerator: str = "") -> HostRates:
  """The measured rates for a machine with this CPU (`cpu_of`'s form), or whose runs train on
  `accelerator` (`accelerator_of`'s form). A (task, method) timed on it keeps its own rate;
  every other is the other CPUs' rate times `factor`, learned from the pairs timed both here
  and elsewhere (1.0 before any is). The same records then plan a deadline right on a CPU
  twice as slow as the one most runs were timed on, or on a GPU fifty times as fast, as soon
  as one run has finished on it."""
  if accelerator:
    here = measured_rates(rows, accelerator=accelerator)
    elsewhere = measured_rates(rows)
  else:
    here = measured_rates(rows, lambda r: bool(cpu) and cpu_of(r) == cpu)
    elsewhere = measured_rates(rows, lambda r: not cpu or cpu_of(r) != cpu)
  shared = [here[k] / elsewhere[k] for k in here if k in elsewhere and elsewhere[k] > 0]
  factor = float(np.median(shared)) if shared else 1.0
  return HostRates({**{k: v * factor for k, v in elsewhere.items()}, **here}, factor,
                   len(shared), len(here))


def stage_runs(p: proto.Protocol, stage: int, rows: dict,
               d: planner.Decisions | None = None) -> tuple[list[planner.Run], dict]:
  """(the stage's runs still to train, known now; what each task waits on). `d`: the
  planner's decisions on `rows`, where already made."""
  d = d or planner.decisions(p, rows)
  if stage == 1:
    return d.ready, d.waiting
  return planner.later_stage_ready(p, stage, rows, d)


def stage_of_row(p: proto.Protocol, record: str, row: dict, first: dict[str, int]) -> int | None:
  """The stage a recorded run belongs to: its record's, or for lr and budget runs its task's."""
  if record in (p.lr_record, p.budget_record):
    return first.get(row.get("task"))
  if record == p.gate_record:
    return 1
  return next((s for s, name in p.stage_record.items() if name == record), None)


@dataclasses.dataclass
class StageTotals:
  """A stage's recorded runs (each once), their CPU machines' seconds, the runs known to be
  left and the whole stage's runs (stage 1: through the first looks, and with every second
  look); `accelerated`: {accelerator: (runs, its seconds)} of the runs trained on one."""
  recorded: list
  seconds: float
  untimed: int
  left: list
  left_s: float
  whole: list  # [(what, runs, machine seconds)]
  waiting: dict
  accelerated: dict = dataclasses.field(default_factory=dict)

  def hours(self) -> str:
    """The recorded machine-hours, e.g. "3.3; NVIDIA H200 GPU: 18 runs, 0.1 h"."""
    return "; ".join([_hours(self.seconds)] + [f"{name}: {n} runs, {_hours(sec)} h"
                                               for name, (n, sec) in self.accelerated.items()])


def stage_totals(p: proto.Protocol, rows: dict, checkout: str,
                 d: planner.Decisions | None = None) -> dict[int, StageTotals]:
  """Per stage: `StageTotals`. `checkout`: where the protocol's configs resolve (a run
  recorded under another record is counted there, once: `identity.not_reused`); `d` as in
  `stage_runs`."""
  rates = measured_rates(rows)
  est = lambda runs: p.estimate_runs(runs, rates)
  d = d or planner.decisions(p, rows)
  first, second = estimates.whole_stage1(p, d.tasks)
  whole = {1: [("first looks", first, est(first)),
               ("every second look", first + second, est(first + second))]}
  for s in sorted(p.arms):
    runs = identity.not_reused(estimates.later_stage_runs(p, s, d.tasks), rows, checkout)
    more = identity.not_reused(
        estimates.later_stage_runs(p, s, d.tasks, second_looks=True), rows, checkout)
    whole[s] = [("first looks", runs, est(runs)), ("every second look", more, est(more))]
  of_task, out = p.first_stages(), {}
  for stage in p.stages:
    done = [r for name, rs in rows.items() for r in rs
            if stage_of_row(p, name, r, of_task) == stage and not r.get("reused_from")]
    left, waiting = stage_runs(p, stage, rows, d)
    left = identity.not_reused(left, rows, checkout)
    cpu_s, accelerated = 0.0, {}
    for r in done:
      name = accelerator_of(r)
      if name:
        n, sec = accelerated.get(name, (0, 0.0))
        accelerated[name] = (n + 1, sec + machine_seconds(r))
      else:
        cpu_s += machine_seconds(r)
    out[stage] = StageTotals(done, cpu_s,
                             sum("seconds" not in r or bool(r.get("timing_incomplete"))
                                 for r in done), left, est(left),
                             whole.get(stage, []), waiting, dict(sorted(accelerated.items())))
  return out


@dataclasses.dataclass(frozen=True)
class CpuBudget:
  """A protocol's CPU budget as its records stand (`cpu_budget`), in machine seconds: the cap,
  the CPU seconds recorded, the estimate of every first-look run left, and the second looks
  released now, {(stage, task): their runs' estimate}, that start on a CPU (`admitted`) or
  are left to an accelerator (`trimmed`)."""
  cap_s: float
  recorded_s: float
  first_left_s: float
  admitted: dict
  trimmed: dict


def cpu_budget(p: proto.Protocol, rows: dict, checkout: str,
               totals: dict[int, StageTotals] | None = None) -> CpuBudget | None:
  """`Protocol.cpu_budget_h` applied to the records (None without one). The second looks
  released now are taken stage by stage in the planner's order: a look with a recorded run
  is admitted (it finishes); another is admitted while the CPU seconds recorded, the first
  looks left and the looks admitted before it, plus its own estimate, fit in the cap.
  `totals`: `stage_totals` on the same rows, where already computed."""
  if p.cpu_budget_h is None:
    return None
  rates = measured_rates(rows)
  est = lambda runs: p.estimate_runs(runs, rates)
  totals = stage_totals(p, rows, checkout) if totals is None else totals
  done = {(name, r["run"]) for name, rs in rows.items() for r in rs}
  first_left = est([r for t in totals.values() for _, runs, _ in t.whole[:1] for r in runs
                    if (r.sweep, r.name) not in done])
  recorded = sum(t.seconds for t in totals.values())
  spent, admitted, trimmed = recorded + first_left, {}, {}
  for stage, t in totals.items():
    looks = {}
    for r in t.left:
      if planner.second_look(p, r):
        looks.setdefault((stage, r.task), []).append(r)
    for (s, task), runs in looks.items():
      record = p.stage_record[s]
      started = any(r.get("task") == task and "seed" in r
                    and planner.in_second_look(p, record, r["seed"])
                    for r in rows.get(record, []))
      sec = est(runs)
      if started or spent + sec <= 3600 * p.cpu_budget_h:
        admitted[(s, task)], spent = sec, spent + sec
      else:
        trimmed[(s, task)] = sec
  return CpuBudget(3600 * p.cpu_budget_h, recorded, first_left, admitted, trimmed)


def budget_lines(p: proto.Protocol, b: CpuBudget) -> list[str]:
  """The CPU budget in words, for `status` and the sweep."""
  look = lambda key, sec: f"{p.tasks[key[1]].label} (stage {key[0]}, {_hours(sec)} h)"
  out = [f"CPU budget {_hours(b.cap_s)} machine-h: {_hours(b.recorded_s)} recorded on CPUs, "
         f"{_hours(b.first_left_s)} estimated for the first looks left."]
  if b.admitted:
    out.append("Second looks that start on a CPU: "
               + ", ".join(look(k, v) for k, v in b.admitted.items()) + ".")
  if b.trimmed:
    out.append("Second looks past the budget, trained only on an accelerator (until then "
               "the comparison keeps its first look's verdict): "
               + ", ".join(look(k, v) for k, v in b.trimmed.items()) + ".")
  return out


def _hours(seconds: float) -> str:
  return f"{seconds / 3600:.1f}"


def status(p: proto.Protocol, rows: dict, checkout: str, show_runs: bool = False) -> str:
  """Markdown: per stage, the runs recorded and their measured machine-hours (of the machine
  each ran on: `machine_seconds`; an accelerator's apart), the runs known to be left and
  their estimate from the recorded run times (the protocol's cost model), the whole stage's
  estimate, and what waits on what."""
  rates = measured_rates(rows)
  lines = ["| stage | runs recorded | machine-h recorded | runs left (known now) | machine-h left "
           "(estimate) | whole stage, machine-h (estimate) |", "|---|---|---|---|---|---|"]
  out_runs, notes = [], []
  totals = stage_totals(p, rows, checkout)
  for stage, t in totals.items():
    whole = ", ".join(f"{_hours(sec)} ({what})" for what, _, sec in t.whole)
    lines.append(f"| {stage} | {len(t.recorded)} | {t.hours()} | {len(t.left)} | "
                 f"{_hours(t.left_s)} | {whole} |")
    if show_runs:
      out_runs += [f"- stage {stage}, {r.sweep}: {r.name} "
                   f"(~{p.estimate_runs([r], rates) / 60:.0f}"
                   " machine-min)" for r in t.left]
    notes += [f"- stage {stage}, {task}: waits on {w}" for task, w in t.waiting.items()]
  out = "\n".join(lines) + "\n"
  if notes:
    out += ("\nRuns that gates have not yet asked for (a task's comparisons wait on its lr, "
            "anchor and budget checks; second looks on the first):\n" + "\n".join(notes) + "\n")
  budget = cpu_budget(p, rows, checkout, totals)
  if budget is not None:
    out += "\n" + "\n".join(budget_lines(p, budget)) + "\n"
  if out_runs:
    out += "\nStill to train, in order:\n" + "\n".join(out_runs) + "\n"
  return out
