"""The tables any protocol gets from its comparisons and gates (reporting.py puts them in a
report's table blocks).

`context(protocol, records)` holds the records and the planner's decisions on them
(`planner.decisions`), from which every table here is built:
the comparisons with their verdicts (`stage1_table`), the scores per method and task, the lr
pick, the budget check, the protocol's tasks and its deviations. A table with nothing
recorded yet is one "*pending*" line naming what it waits on.

Imports nothing heavy.
"""
import collections
import dataclasses

from acl_jax.study import estimates, later, planner, protocol as proto
from acl_jax.study.fmt import mean_sd as fmt_mean, span, table
from acl_jax.study.tables import axis_table, label, multi_exit_table, pts, select

METRIC_NAMES = {"accuracy": "accuracy (%)", "f1": "F1 (%)", "mcc": "MCC x100"}


@dataclasses.dataclass
class Ctx:
  """The records, stage 1's decisions on them, the rows by (record, run name), and every
  task's gate decisions (stage 1's and the later stages' new tasks')."""
  p: proto.Protocol
  rs: dict[str, list[dict]]
  d: planner.Decisions
  idx: dict[tuple[str, str], dict]
  tasks: dict[str, planner.TaskState]


def context(p: proto.Protocol, rs: dict[str, list[dict]]) -> Ctx:
  d = planner.decisions(p, rs)
  idx = {(s, r["run"]): r for s, rows in rs.items() for r in rows}
  return Ctx(p, rs, d, idx, planner.task_states(p, idx, d))






def _stage1_tasks(p: proto.Protocol) -> tuple[str, ...]:
  return tuple(dict.fromkeys(c.task for c in p.comparisons))


def awaited(p: proto.Protocol, d: planner.Decisions) -> str:
  """What stage 1's tasks wait on, tasks grouped by it."""
  groups = {}
  for t in dict.fromkeys(c.task for c in p.comparisons):
    if t in d.waiting:
      groups.setdefault(d.waiting[t], []).append(label(p, t))
  return "; ".join(f"{', '.join(ts)}: {w}" for w, ts in groups.items())


def pending(p: proto.Protocol, what: str, d: planner.Decisions) -> str:
  """One italic line: what is not recorded yet, and what stage 1's gates wait on."""
  wait = awaited(p, d)
  return f"*pending*: {what}." + (f" Awaited: {wait}." if wait else "") + "\n"


def progress(ctx: Ctx, c: proto.Comparison, seeds) -> tuple[int, int]:
  """(runs recorded, runs) of both arms of a comparison at the seeds."""
  a, b = planner.comparison_rows(ctx.p, ctx.idx, ctx.d.tasks[c.task], c, seeds)
  return sum(r is not None for r in a + b), len(a + b)


def ce_seed0(p: proto.Protocol, st: planner.TaskState) -> tuple[str | None, float | None]:
  """(lr, CE seed 0's dev score there) at the task's pick, or the grid's pick while CE at
  lr_high is awaited; (None, None) before the grid is complete."""
  if st.lr is not None:
    return st.lr, planner.picked_score(p, st)
  if len(st.lr_scores) < len(p.lr_grid):
    return None, None
  lr = p.pick_lr(st.lr_scores, p.tasks[st.task].unit)
  return lr, st.lr_scores.get(lr)


def shown_verdict(ctx: Ctx, c: proto.Comparison) -> proto.Verdict | None:
  """A comparison's verdict so far, None while not complete or while its task's anchor gap
  is unexplained (planner.anchor_withheld)."""
  return None if c.task in ctx.d.withheld else ctx.d.verdicts.get(c)


def not_shown(ctx: Ctx, c: proto.Comparison) -> str:
  p = ctx.p
  if c.task in ctx.d.withheld:
    return f"withheld: {ctx.d.withheld[c.task]}"
  k, n = progress(ctx, c, p.look_seeds[0])
  return f"pending ({k} of {n} runs recorded)"


def task_budget(ctx: Ctx, task: str) -> str:
  """"RTE 3 epochs, lr 5e-5": the task's budget as its runs trained it (a fixed number of
  steps where they set num_steps, as a `runlocal` study does), or "RTE pending"."""
  p = ctx.p
  st = ctx.tasks.get(task)
  if not (st and st.epochs):
    return f"{label(p, task)} pending"
  steps = {r.get("budget", {}).get("num_steps") or 0 for rows in ctx.rs.values() for r in rows
           if r.get("task") == task and r.get("sweep") in p.stage_record.values()}
  if len(steps) == 1 and (n := steps.pop()) > 0:
    return f"{label(p, task)} {n} step{'' if n == 1 else 's'}, lr {st.lr}"
  return f"{label(p, task)} {proto.epochs_text(st.epochs)}, lr {st.lr}"


def later_pending(ctx: Ctx, stage: int, pairs: set[tuple[str, str]]) -> str:
  """"pending: stage N (k of n runs recorded)": the stage's known runs of these (task,
  method) pairs, and how many of them are in its record."""
  p = ctx.p
  runs = [r for r in estimates.later_stage_runs(p, stage, ctx.d.tasks)
          if (r.task, r.method) in pairs and r.sweep == p.stage_record[stage]]
  done = sum((r.sweep, r.name) in ctx.idx for r in runs)
  return f"pending: stage {stage} ({done} of {len(runs)} runs recorded)"


def verdict_text(v: proto.Verdict, note: str = "") -> str:
  return f"{v.mean:+.2f} {span(*v.decide)} ({v.ahead}/{v.n}) {v.word}{note}"


def weak_baseline(ctx: Ctx, c: proto.Comparison, v: proto.Verdict) -> str:
  """A note for a "matches or beats" or "beats" whose baseline is itself below CE: the
  baseline − CE paired difference on the same seeds, where its deciding interval lies
  wholly below zero; "" otherwise."""
  p = ctx.p
  if c.baseline == "ce" or v.word not in ("beats", "matches or beats"):
    return ""
  st = ctx.d.tasks[c.task]
  seeds = p.look_seeds[0] + (p.look_seeds[1] if v.look == 2 else ())
  against_ce = proto.Comparison(c.claim, c.task, c.baseline, "ce", c.kind)
  base, ce = planner.comparison_rows(p, ctx.idx, st, against_ce, seeds)
  if None in base or None in ce:
    return ""
  mean, lo, hi = proto.interval(planner.diffs(p, base, ce), p.decide_level)
  if hi >= 0:
    return ""
  return f" (baseline weak: {p.label(c.baseline)} − CE {mean:+.2f} {span(lo, hi)})"


def comparison_label(p, c: proto.Comparison) -> str:
  return f"{p.label(c.method)} − {p.label(c.baseline)}"


def protocol_tasks_table(ctx: Ctx) -> str:
  p = ctx.p
  del ctx
  first = p.first_stages()
  rows = [[t.label, first.get(t.name, "—"), f"`{t.config}:{t.config_task}`", t.max_length,
           t.epochs,
           t.scored, METRIC_NAMES.get(t.metric, t.metric), f"{t.margin:g}",
           f"{label(p, p.lr_from[t.name])}'s" if t.name in p.lr_from else "CE's pick"]
          for t in p.tasks.values()]
  return table(["task", "stage", "config", "max length", "epochs", "scored on", "metric",
                "margin (points)", "lr"], rows)


def deviations_table(ctx: Ctx) -> str:
  p = ctx.p
  del ctx
  if not p.deviations:
    return "None.\n"
  return table(["what changed", "why"], [list(x) for x in p.deviations])


def lr_why(p: proto.Protocol, st: planner.TaskState) -> str:
  if len(st.lr_scores) < len(p.lr_grid):
    return f"waits on {st.waiting}"
  tie = p.lr_tie * p.tasks[st.task].unit
  if len(p.lr_grid) == 1:
    why = "the protocol's one rate"
  else:
    pick = p.pick_lr(st.lr_scores, p.tasks[st.task].unit)
    best = st.lr_scores[pick]
    gap = min(best - st.lr_scores[x] for x in p.lr_grid if x != pick) if best == max(
        st.lr_scores.values()) else 0.0
    why = (f"tie (within {tie:g}): {p.lr_preferred}" if gap <= tie else
           f"{pick} better by {gap:.2f}")
  if st.anchor_missed:
    why += f"; CE missed its anchor: {p.lr_high} " + (
        "awaited" if st.high_score is None else
        f"better by more than {tie:g}, taken" if st.lr == p.lr_high else
        f"not better by more than {tie:g}, not taken")
  return why


def lr_table(ctx: Ctx) -> str:
  p = ctx.p
  tasks = [t for t in _stage1_tasks(p) if t not in p.lr_from]
  if not any(ctx.d.tasks[t].lr_scores for t in tasks):
    return pending(p, "no CE run of the lr grid is recorded yet", ctx.d)
  # lr_high trains only where CE misses an anchor: a protocol without anchors has no column
  high = bool(p.anchors)
  rows = [[label(p, t), *(pts(ctx.d.tasks[t].lr_scores.get(lr)) for lr in p.lr_grid),
           *([pts(ctx.d.tasks[t].high_score)] if high else []), ctx.d.tasks[t].lr or "—",
           lr_why(p, ctx.d.tasks[t])] for t in tasks]
  follow = collections.defaultdict(list)
  for t, src in p.lr_from.items():
    follow[src].append(label(p, t))
  notes = "".join(f"{', '.join(ts)} take {label(p, src)}'s rate. " for src, ts in follow.items())
  return table(["task", *(f"CE dev, lr {lr}" for lr in p.lr_grid),
                *([f"CE dev, lr {p.lr_high}"] if high else []), "pick", "why"], rows) + (
      f"\nCE seed 0, final weights' dev score, points. {notes}".rstrip() + "\n")


def budget_table(ctx: Ctx) -> str:
  p = ctx.p
  if p.budget_gain is None:
    return "The protocol has no budget check: each task trains its own epochs.\n"
  if not ctx.rs.get(p.budget_record):
    return pending(p, "no budget-check run is recorded yet", ctx.d)
  rows = []
  for t in dict.fromkeys([*_stage1_tasks(p), *ctx.tasks]):  # a later stage's new tasks last
    st, e = ctx.tasks[t], p.tasks[t].epochs
    base = doubled = None
    if st.lr:
      base = ctx.idx.get((p.lr_record, planner.lr_run(p, t, st.lr).name))
      doubled = ctx.idx.get((p.budget_record, planner.budget_run(p, t, st.lr).name))
    base, doubled = (p.dev_score(r) if r else None for r in (base, doubled))
    gain = p.budget_gain * p.tasks[t].unit
    if st.epochs is None:
      decision = f"waits on {st.waiting}"
    else:
      decision = (f"doubles to {st.epochs} (gain > {gain:g})" if st.epochs != e else
                  f"keeps {e} (gain ≤ {gain:g})")
    diff = f"{doubled - base:+.2f}" if base is not None and doubled is not None else "—"
    rows.append([label(p, t), st.lr or "—", e, pts(base), pts(doubled), diff, decision])
  return table(["task", "lr", "epochs", "CE seed 0 (dev)", "CE seed 0, twice the epochs",
                "difference", "epochs from here"], rows)


def stage1_table(ctx: Ctx) -> str:
  """One row per stage-1 comparison: its paired differences' intervals and verdict so far."""
  p = ctx.p
  if not any(shown_verdict(ctx, c) for c in p.comparisons):
    n = len(ctx.rs.get(p.stage_record[1], []))
    held = "; ".join(f"{label(p, t)} withheld: {why}" for t, why in ctx.d.withheld.items())
    return pending(p, f"no comparison has a complete first look yet ({n} comparison "
                   f"run{'s' * (n != 1)} recorded)" + (f". {held}" if held else ""), ctx.d)
  rows = []
  for c in sorted(p.comparisons, key=lambda c: _stage1_tasks(p).index(c.task)):
    v = shown_verdict(ctx, c)
    if v is None:
      rows.append(verdict_row(p, c, None, not_shown(ctx, c)))
      continue
    word = ""
    if v.word == "undecided":
      k, n = progress(ctx, c, p.look_seeds[1])
      word = f" (second look: {k} of {n} runs recorded)"
    rows.append(verdict_row(p, c, v, word + weak_baseline(ctx, c, v)))
  return verdict_table(p, rows)


def verdict_row(p: proto.Protocol, c: proto.Comparison, v: proto.Verdict | None,
                note: str = "") -> list:
  """A comparison's row of `verdict_table`: `note` follows the verdict, or stands in its place
  while there is none (`v` None)."""
  test = f"lower end > {-p.tasks[c.task].margin:g}" if c.kind == "noninferior" else (
      "lower end > 0")
  if v is None:
    return [label(p, c.task), comparison_label(p, c), test, *[""] * 6, note, ""]
  word = v.word + (f": any effect lies in {span(*v.decide)}" if v.word == "inconclusive"
                   else "")
  return [label(p, c.task), comparison_label(p, c), test, v.n, f"{v.mean:+.2f}",
          span(*v.decide), span(*v.describe), f"{v.ahead}/{v.n}", v.look, word + note,
          f"{v.resolvable:.2f}"]


def verdict_table(p: proto.Protocol, rows: list[list]) -> str:
  return table(["task", "method − baseline", "passes if", "seeds", "mean",
                f"{100 * p.decide_level:g}% interval", f"{100 * p.describe_level:g}% interval",
                "ahead", "look", "verdict",
                f"resolvable ({100 * p.power:g}% power)"], rows)


def later_comparisons_table(ctx: Ctx, stage: int) -> str:
  """One row per plain comparison among a later stage's rules, as `stage1_table`'s: its
  paired differences' intervals and verdict so far, at the look its seeds allow."""
  p = ctx.p
  comps = [r for r in p.rules.get(stage, ()) if isinstance(r, proto.Comparison)]
  if not comps:
    return f"Stage {stage} has no plain comparison.\n"
  rows = []
  for c in comps:
    v = later.comparison_result(p, ctx.idx, stage, c)
    if v is None:
      rows.append(verdict_row(p, c, None, later_pending(ctx, stage, {(c.task, c.method),
                                                                    (c.task, c.baseline)})))
    else:
      rows.append(verdict_row(p, c, v, " (seeds 3-4 follow)" if v.word == "undecided" else ""))
  return verdict_table(p, rows)


def stage1_scores_table(ctx: Ctx) -> str:
  p = ctx.p
  rows = ctx.rs.get(p.stage_record[1], [])
  if not rows:
    return pending(p, "no stage-1 comparison run is recorded yet", ctx.d)
  methods = list(dict.fromkeys(m for c in p.comparisons for m in (c.baseline, c.method)))
  arms = {(c.task, m) for c in p.comparisons for m in (c.baseline, c.method)}
  out = []
  for m in methods:
    cells = ["" if (t, m) not in arms else "withheld" if t in ctx.d.withheld else
             fmt_mean([x for x in (p.score(r) for r in select(rows, t, m)) if x is not None])
             for t in _stage1_tasks(p)]
    out.append([p.label(m), *cells])
  return table(["method", *(f"{label(p, t)} ({p.tasks[t].scored} {p.tasks[t].metric})"
                            for t in _stage1_tasks(p))], out)


def arm_rows(ctx: Ctx, stage: int, arm: proto.Arm, method: str, grid=()) -> list[dict] | None:
  """The rows of an arm's method (at one grid point) at the first look's seeds, each with the
  grid point among its overrides (a preset point is the earlier stage's run); None while any
  is unrecorded."""
  fw = (("framework", arm.framework),) if arm.framework != "jax" else ()
  rows = [later.find(ctx.p, ctx.idx, stage, arm.task, method, s, fw + tuple(grid))
          for s in ctx.p.first_seeds(arm)]
  if None in rows:
    return None
  return [dict(r, overrides={**r.get("overrides", {}), **dict(grid)}) for r in rows]


def arm_tables(ctx: Ctx, stage: int) -> str:
  """Every arm of a later stage, from the protocol: a curve per method over each swept field
  (the score of the final weights at every value, and its spread), the score at every exit
  of multi-exit methods, and each other method's score (HF PyTorch's, for a torch arm);
  each once its first look is recorded."""
  p, out, plain = ctx.p, [], []
  for arm in p.arms.get(stage, ()):
    what = f"{label(p, arm.task)}, {', '.join(p.label(m) for m in arm.methods)}"
    if arm.framework != "jax":
      what += f" ({arm.framework})"
    for field, values in arm.grid:
      curves = {m: [arm_rows(ctx, stage, arm, m, ((field, v),)) for v in values]
                for m in arm.methods}
      if any(None in rs for rs in curves.values()):
        out.append(f"{what} over `{field}`: *pending* (first look not recorded).\n")
        continue
      text, _ = axis_table(p, field, {p.label(m): [r for rs in got for r in rs]
                                      for m, got in curves.items()}, score=p.score)
      out.append(f"{what} over `{field}` ({p.tasks[arm.task].scored} "
                 f"{p.tasks[arm.task].metric}, points):\n\n{text}")
    exits = [m for m in arm.methods if m in p.multi_exit and arm.framework == "jax"]
    for m in [] if arm.grid else [m for m in arm.methods if m not in exits]:
      got = arm_rows(ctx, stage, arm, m)
      task = p.tasks[arm.task]
      plain.append([label(p, arm.task), p.label(m) + ("" if arm.framework == "jax" else
                                                      f" ({arm.framework})"),
                    f"{task.scored} {task.metric}", "*pending*" if got is None else
                    fmt_mean([p.score(r) for r in got if p.score(r) is not None])])
    if exits and not arm.grid:
      # the gains are over the protocol's first multi-exit method: where this arm does not
      # train it, its runs of the same settings from the stage that did (`later.find`)
      base = p.multi_exit[0]
      got = [arm_rows(ctx, stage, arm, m) for m in ([] if base in exits else [base]) + exits]
      if None in got:
        out.append(f"{what}, per exit: *pending* (first look not recorded).\n")
        continue
      out.append(multi_exit_table(p, [r for rs in got for r in rs], arm.task,
                                  final_weights=True))
  if plain:
    out.append(table(["task", "method", "scored", "final weights, points"], plain))
  return "\n".join(out) if out else f"*pending*: stage {stage} has no arms.\n"
