r"""RESULTS.md's tables and results/PILOTS.md, rebuilt from the run records and the protocol.

  python -m scripts.report            # RESULTS.md's tables, results/PILOTS.md, results/figures/
  python -m scripts.report --check    # exit 1, naming what differs from the records

A table sits in RESULTS.md (or a results/*.md beside it) between marker lines naming it:

  <!-- table: claims -->
  ...written by this script...
  <!-- /table -->

and TABLES below says how each is built: from the protocol (a `Protocol`, `--protocol`; this
project's is studies/papers.py), the decisions its gates take on the records
(acl_jax/study/planner.py) and the records (results/records/). A table with nothing recorded
yet is one "*pending*" line naming what it waits on. The paired statistics and verdicts are
the protocol's (`protocol.interval`, `Protocol.verdict`). results/PILOTS.md is written whole:
the short-budget pilots from before the protocol, which decide nothing.
tests/test_records.py runs the check.
"""
import argparse
import collections
import os
import re
import sys

import numpy as np

from acl_jax.study import later, loader, planner, protocol as proto, records, report as lib, rules
from acl_jax.study import status as study_status
from acl_jax.study.fmt import mean_sd as fmt_mean, span, table
from acl_jax.study.report import (Ctx, _stage1_tasks, budget_table, ce_seed0,
                                  comparison_label, context, deviations_table, task_budget,
                                  later_pending, lr_table, not_shown, pending,
                                  protocol_tasks_table, shown_verdict, stage1_scores_table,
                                  stage1_table, verdict_text, weak_baseline)
from acl_jax.study.tables import (axis_table, budget_text, by_seed, early_exit_table,
                                  exit_score, exits_of, fmt_paired, label, methods_table,
                                  multi_exit_table, pilot_score, pts, select,
                                  split_of)
from scripts import classes, holm, later_tables, sweep

REPO = records.REPO
FIGURES = os.path.join(REPO, "results", "figures")
PILOTS_MD = os.path.join(REPO, "results", "PILOTS.md")
# The reports whose table blocks are rebuilt from the records: the summary, and per-stage
# detail beside it.
REPORTS = (os.path.join(REPO, "RESULTS.md"), os.path.join(REPO, "results", "STAGE1.md"),
           *(os.path.join(REPO, "results", f"STAGE{s}.md") for s in (2, 3)),
           os.path.join(REPO, "results", "CLASSES.md"))
VERDICT_WORDS = proto.VERDICT_WORDS
GATED = ("acl", "scl_grad")  # the stage-1 methods whose ACL-Grad gate acts
ANGLE_PRESET = "all"  # loss.angle_params of the presets (configs/common.py)


# ---- formatting and reading rows ----------------------------------------------------------


# ---- the protocol's state -----------------------------------------------------------------


def rule_test_name(p: proto.Protocol, r) -> str:
  """A later stage's rule as the Holm family names it: task and claim."""
  return f"{label(p, r.task)} {p.claims[r.claim].split(' (')[0]}"


def exit_test_name(p: proto.Protocol, r: proto.ExitRule, baseline: str) -> str:
  """An exit rule's contrast against one baseline as the Holm family names it."""
  return f"{rule_test_name(p, r)}: vs {baseline.upper()}"


def exit_holm_standing(ctx: Ctx, stage: int) -> str:
  """Where a stage's shallow-exit contrasts stand in the Holm family (scripts/holm.py)."""
  names = {f"{ctx.p.label(r.method)} − {ctx.p.label(b)}": exit_test_name(ctx.p, r, b)
           for r in ctx.p.rules.get(stage, ()) if isinstance(r, proto.ExitRule)
           for b in r.baselines}
  return holm.standing(holm_tests(ctx), names, holm_registered(ctx.p))


def holm_registered(p: proto.Protocol) -> int:
  """How many comparisons the protocol registers for the Holm family: stage 1's, and each
  later rule's (an exit rule's, one per baseline)."""
  return len(p.comparisons) + sum(len(r.baselines) if isinstance(r, proto.ExitRule) else 1
                                  for rules in p.rules.values() for r in rules)


def holm_tests(ctx: Ctx) -> list[holm.Test]:
  """Every registered comparison with a verdict (stage 1's, then the later rules'), with the
  one-sided p-value of what it asserts (scripts/holm.py)."""
  p = ctx.p
  out = []
  for c, v in ctx.d.verdicts.items():
    if v.final and c.task not in ctx.d.withheld:
      out.append(holm.Test(f"{label(p, c.task)} {comparison_label(p, c)}", v.word,
                           holm.p_of(v, c.kind, p.tasks[c.task].margin)))
  for s, later_rules in sorted(p.rules.items()):
    for r in later_rules:
      name = rule_test_name(p, r)
      if isinstance(r, proto.ExitRule):
        for b in r.baselines:
          e = later.exit_result(p, ctx.idx, s, r, b)
          if e is not None and e.contrast.final:
            word = {"beats": "holds", "worse": "fails"}.get(e.contrast.word, e.contrast.word)
            out.append(holm.Test(exit_test_name(p, r, b), word,
                                 holm.p_of(e.contrast, "superior", 0)))
      elif isinstance(r, proto.RangeRule):
        got = later.range_result(p, ctx.idx, s, r)
        if got is not None and got[1][0] != "undecided":
          word, _, _, v = got[1]
          out.append(holm.Test(name, word, holm.p_of(v, "superior", 0) if word in (
              "holds", "fails") else 1.0))
      elif isinstance(r, proto.StableRule):
        got = later.stable_result(p, ctx.idx, s, r)
        if got is not None and got[1][0] != "undecided":
          word, v = got[1]
          m = p.tasks[r.task].margin
          pv = (max(holm.p_above(v, -m), holm.p_below(v, m)) if word == "stable" else
                min(holm.p_above(v, m), holm.p_below(v, -m)) if word == "unstable" else 1.0)
          out.append(holm.Test(name, word, pv))
      else:
        v = later.comparison_result(p, ctx.idx, s, r)
        if v is not None and v.final:
          out.append(holm.Test(f"{label(p, r.task)} {comparison_label(p, r)}", v.word,
                               holm.p_of(v, r.kind, p.tasks[r.task].margin)))
  return out


def _trained(row: dict) -> str:
  return f"`{(row.get('code') or ['unknown'])[0][:7]}` on {row.get('timed_on', 'unknown')}"


def reruns_table(ctx: Ctx) -> str:
  """Each rerun (scripts/rerun.py) beside its original: revisions, CPUs, the scored number,
  every dev evaluation, and the params hash."""
  p = ctx.p
  out = []
  for sweep, rows in sorted(ctx.rs.items()):
    if not sweep.startswith("rerun_"):
      continue
    for r in rows:
      old = ctx.idx.get((r["rerun_of"], r["run"]))
      if old is None:
        continue
      evals = sum(a == b for a, b in zip(old["evals"], r["evals"]))
      was, now = (x.get("train", {}).get("params_sha256", "") for x in (old, r))
      out.append([f"`{r['run']}` ({r['rerun_of']})", _trained(old), _trained(r)
                  + (f", `XLA_FLAGS={r['xla_flags']}`" if r.get("xla_flags") else ""),
                  f"{p.score(old):.4f}", f"{p.score(r):.4f}",
                  f"{evals} of {len(old['evals'])}" + ("" if len(r["evals"]) == len(
                      old["evals"]) else f" ({len(r['evals'])} now)"),
                  "yes" if was == now else f"no (`{was[:8]}` / `{now[:8]}`)"])
  if not out:
    return "*pending*: no rerun is recorded.\n"
  return table(["run (record)", "trained at, on", "rerun at, on", "score then", "score now",
                "dev evaluations equal", "params hash equal"], out)


# ---- RESULTS.md's tables ------------------------------------------------------------------

def claims_table(ctx: Ctx) -> str:
  """Per claim of SPEC §1: the paper's number, each stage-1 comparison's look so far, a tally
  of the verdicts and the budgets; the later stages' claims pending; the cost claims
  (`cost_row`); the untestable ones."""
  p = ctx.p
  rows = []
  for key in dict.fromkeys(c.claim for c in p.comparisons):
    text, comps = p.claims[key], [c for c in p.comparisons if c.claim == key]
    tasks, methods, bases = ({getattr(c, f) for c in comps} for f in ("task", "method",
                                                                       "baseline"))
    cells, words = [], collections.Counter()
    for c in comps:  # each comparison named by what tells it from the claim's others
      name = " ".join(([label(p, c.task)] if len(tasks) > 1 else [])
                      + ([comparison_label(p, c)] if len(methods) > 1 else
                         [f"vs {p.label(c.baseline)}"] if len(bases) > 1 else []))
      v = shown_verdict(ctx, c)
      if v is None:
        cells.append(f"{name} {not_shown(ctx, c)}")
        words["pending"] += 1
      else:
        cells.append(f"{name} {verdict_text(v, weak_baseline(ctx, c, v))}"
                     f"{classes.note(p, ctx.rs, c.task, c.method)}")
        words[v.word] += 1
    # a later stage's arm of exactly these methods tests the claim on another task
    later_tasks = []
    for s, later_rules in sorted(p.rules.items()):
      for r in later_rules:
        if r.claim == key and isinstance(r, proto.Comparison):
          later_tasks.append(r.task)
          got = later.claim_word(p, ctx.idx, s, r)
          cells.append(f"{label(p, r.task)} " + (got[1] + classes.note(p, ctx.rs, r.task, r.method)
                                              if got else later_pending(
              ctx, s, {(r.task, r.method), (r.task, r.baseline)})))
          words[got[0] if got else "pending"] += 1
    tally = ", ".join(f"{w} {words[w]}" for w in (*VERDICT_WORDS, "pending") if words[w])
    if sum(words.values()) == 1:  # one comparison: its verdict, not a count of one
      tally = next(iter(words))
    budgets = [task_budget(ctx, t) for t in dict.fromkeys([*(c.task for c in comps),
                                                           *later_tasks])]
    rows.append([text, p.sources.get(key, "—"), "; ".join(cells),
                 "pending" if set(words) == {"pending"} else tally, "; ".join(budgets)])
  for key, s in p.later_claims():
    paper = p.sources.get(key, "—")
    # every stage's rules of the claim (stage 3 tests the shallow-exit claim again, against
    # 2ST and ALT): each decided one's cell, each other's pending note
    mine = [(st, r) for st in sorted(p.rules) for r in p.rules[st] if r.claim == key]
    got = [later.claim_word(p, ctx.idx, st, r) for st, r in mine]
    if all(g is None for g in got):
      pairs = {(r.task, m) for _, r in mine for m in later.rule_methods(r)}
      rows.append([p.claims[key], paper, later_pending(ctx, s, pairs), f"pending: stage {s}",
                   "—"])
      continue
    cells, tally, waiting = [], collections.Counter(), {}
    for (st, r), g in zip(mine, got):
      if g is None:  # one note per stage for the rules still before their first look
        waiting.setdefault(st, set()).update((r.task, m) for m in later.rule_methods(r))
        tally["pending"] += 1
      else:
        cells.append(f"{label(p, r.task)} " + (f"{p.label(r.method)} " if isinstance(
            r, proto.Comparison) else "") + g[1])
        tally[g[0]] += 1
    cells += [f"the others {later_pending(ctx, st, pairs)}" for st, pairs in waiting.items()]
    rows.append([p.claims[key], paper, "; ".join(cells),
                 exits_over_stages(ctx, mine, got) or
                 ", ".join(f"{w} {n}" for w, n in tally.items()),
                 "; ".join(dict.fromkeys(task_budget(ctx, r.task) for _, r in mine))])
  rows += [cost_row(ctx, rule) for rule in p.cost_rules]
  rows += [list(r) for r in p.untestable]
  header = ["claim (SPEC §1)", "paper", "ours, per comparison: mean [97.5% interval] "
            "(seeds ahead / seeds) verdict", "verdict", "budget"]
  if not p.sources:  # no claim has a published number: no column of dashes
    header, rows = [header[0], *header[2:]], [[r[0], *r[2:]] for r in rows]
  return table(header, rows)


def exits_over_stages(ctx: Ctx, mine: list, got: list) -> str | None:
  """A claim tested by exit rules in more than one stage holds when it holds against every
  baseline of every stage (`rules.exit_claim` over all their contrasts): that word, then
  each stage's. None for any other claim, or before every stage's first look."""
  if len(mine) < 2 or not all(isinstance(r, proto.ExitRule) for _, r in mine) or None in got:
    return None
  contrasts = [later.exit_result(ctx.p, ctx.idx, st, r, b).contrast
               for st, r in mine for b in r.baselines]
  return (f"{rules.exit_claim(contrasts)} over all {len(contrasts)} baselines ("
          + ", ".join(f"stage {st}: {g[0]}" for (st, _), g in zip(mine, got)) + ")")


def cost_row(ctx: Ctx, rule: proto.CostRule) -> list:
  """A cost claim's row: its verdict on each CPU that measured it, from the rule's record
  (`benchmarks/cost_claims.py`: a row per method and CPU, its rounds' step seconds, and for
  the method its loss term's)."""
  p = ctx.p
  by_cpu = collections.defaultdict(dict)
  for r in ctx.rs.get(rule.record, []):
    if r.get("task") == rule.task:
      by_cpu[r.get("timed_on", "")][r["method"]] = r
  cells, words, budget = [], collections.Counter(), "—"
  for cpu, got in sorted(by_cpu.items()):
    if rule.method not in got or (rule.kind == "ratio" and rule.baseline not in got):
      continue
    mine = got[rule.method]
    other = (mine["term_seconds"] if rule.kind == "share"
             else got[rule.baseline]["step_seconds"])
    v = rules.cost_verdict(p, rule, mine["step_seconds"], other)
    what = (f"{100 * v.mean:.2f}% [{100 * v.low:.2f}, {100 * v.high:.2f}] of the step"
            if rule.kind == "share" else f"{v.mean:.3f}x [{v.low:.3f}, {v.high:.3f}]")
    cells.append(f"{what} ({v.n} rounds; {_vector_isa(study_status.cpu_of(mine))}): "
                 f"{v.word}")
    words[v.word] += 1
    b = mine["budget"]
    budget = f"{label(p, rule.task)} B{b['batch_size']} L{b['max_length']}, train step"
  if not cells:
    return [p.claims[rule.claim], p.sources.get(rule.claim, "—"),
            f"pending: no `{rule.record}` record yet (benchmarks/cost_claims.py)", "pending", "—"]
  return [p.claims[rule.claim], p.sources.get(rule.claim, "—"), "; ".join(cells),
          ", ".join(f"{w} {n}" for w, n in words.items()), budget]


def _vector_isa(machine: str) -> str:
  """A "timed on" with its ISA list cut to the kinds that tell CPUs apart (AMX, AVX-512, AVX2):
  "AMD EPYC (family 25, model 17; AVX-512), 2 cores". The records keep the whole list."""
  def cut(m):
    isa = m.group(2).split(", ")
    widest = next((k for k in ("AVX-512", "AVX2") if k in isa), None)
    kinds = ["AMX"] * ("AMX" in isa) + [widest] * (widest is not None)
    return f"{m.group(1)}; {', '.join(kinds)})" if kinds else m.group(0)
  return re.sub(r"(\(family \d+, model \d+); ([^)]*)\)", cut, machine)


def stage_hours_table(ctx: Ctx) -> str:
  """Per stage: runs recorded (a reused row once), their measured machine-hours, the whole
  stage's estimate (the protocol's cost model at the measured rates) and the machine."""
  rows = []
  for stage, t in study_status.stage_totals(ctx.p, ctx.rs, REPO).items():
    hours = t.hours() + (f" ({t.untimed} untimed or partly timed)" if t.untimed else "")
    whole = "; ".join(f"{len(runs)} runs, {sec / 3600:.1f} h" + (
        f" ({what})" if what != "all" else "") for what, runs, sec in t.whole)
    machines = sorted({_vector_isa(r["timed_on"]) for r in t.recorded
                       if "seconds" in r and r.get("timed_on")})
    rows.append([stage, len(t.recorded), hours, whole, "; ".join(machines) or "—"])
  return table(["stage", "runs recorded", "machine-h recorded", "whole stage (estimate)",
                "timed on"], rows)


def mr_anchor(p: proto.Protocol, rows: list[dict]) -> str:
  """Our CE against HF PyTorch on MR, paired by seed (the protocol's hf_anchor record)."""
  name, what = p.hf_anchor
  ours = {r["seed"]: p.score(r) for r in rows if r.get("framework") == "jax"}
  ref = {r["seed"]: p.score(r) for r in rows if r.get("framework") == "torch"}
  seeds = sorted(set(ours) & set(ref))
  if not seeds:
    return f"*pending*: no seed of `{name}` has both frameworks recorded ({what}).\n"
  d = [ours[s] - ref[s] for s in seeds]
  mean, lo, hi = proto.interval(d, p.describe_level)
  m = p.tasks["mr"].margin
  if len(d) < 2:
    reading, cell = "one seed: no interval", f"{mean:+.2f}"
  else:
    cell = f"{mean:+.2f} {span(lo, hi)}"
    # The registered rule is equivalence within ± the margin; whether the interval contains
    # zero is description (DEVIATIONS).
    reading = (f"equivalent within ±{m:g}" if -m < lo and hi < m else
               f"not shown equivalent within ±{m:g} (the registered rule: the interval "
               "reaches past it)") + ("; no difference detected (the interval contains 0)"
                                      if lo <= 0 <= hi else
                                      "; differ (the interval excludes 0)")
  return table(["task", "seeds", "ours (JAX)", "HF PyTorch", "ours − HF, per seed",
                f"mean [{100 * p.describe_level:g}% interval]", "reading"],
               [["MR", ", ".join(map(str, seeds)), fmt_mean([ours[s] for s in seeds]),
                 fmt_mean([ref[s] for s in seeds]), ", ".join(f"{x:+.2f}" for x in d), cell,
                 reading]]) + f"\n{what}; test accuracy of the final weights, points.\n"


def glue_anchor(ctx: Ctx) -> str:
  """CE at the picked lr on GLUE dev against the published MiniLM scores (upper bounds)."""
  p = ctx.p
  tasks = [t for t in _stage1_tasks(p) if t in p.anchors]
  if not any(ctx.d.tasks[t].lr_scores for t in tasks):
    return pending(p, "GLUE: no CE run of the lr grid is recorded yet", ctx.d)
  rows = []
  for t in tasks:
    st, anchor, margin = ctx.d.tasks[t], p.anchors[t], p.tasks[t].margin
    lr, s0 = ce_seed0(p, st)
    if s0 is None:
      rows.append([label(p, t), "—", "—", "—", f"{anchor:g}", "—", f"{margin:g}",
                   f"pending ({st.waiting})"])
      continue
    s1 = p.stage_record[1]
    ce = [ctx.idx.get((s1, planner.method_run(p, s1, st, "ce", s).name))
          for s in p.look_seeds[0]] if st.epochs else []
    got = [p.score(r) for r in ce if r is not None]
    mean = fmt_mean(got) if ce and len(got) == len(ce) else (
        f"pending ({len(got)} of {len(p.look_seeds[0])})")
    missed = "no"
    if st.anchor_missed:
      grid = p.pick_lr(st.lr_scores, p.tasks[t].unit)
      missed = (f"yes at {grid} ({st.lr_scores[grid]:.2f}): CE at {p.lr_high} "
                + ("awaited" if st.lr is None else "tried"))
    rows.append([label(p, t), lr, pts(s0), mean, f"{anchor:g}", f"{s0 - anchor:+.2f}",
                 f"{margin:g}", missed])
  return table(["task", "lr", "CE seed 0, first budget", "CE seeds 0-2, task's budget",
                "published (upper bound)", "CE seed 0 − published", "margin",
                "misses by more than the margin"], rows) + (
      "\nDev scores of the final weights, points. The anchor is read before the budget check,"
      " at the lr grid's epochs; seeds 0-2 train at the task's budget (Budget check)."
      f" Published: {p.anchor_source}.\n")


def _lr_name(p: proto.Protocol, lr: float) -> str | None:
  """The protocol's spelling of a learning rate (0.0001 -> "1e-4"), None if not one of its."""
  return next((x for x in (*p.lr_grid, p.lr_high) if proto.same_lr(x, lr)), None)


def _our_ce(ctx: Ctx, task: str, lr: float, epochs, seed: int) -> dict | None:
  """Our CE seed 0 at this lr and number of epochs as the protocol recorded it (the lr grid's
  run at the task's budget, or the budget check's at twice it); None if not recorded."""
  p = ctx.p
  t, name = p.tasks[task], _lr_name(p, lr)
  if name is None or seed != 0:
    return None
  if epochs == t.epochs:
    return ctx.idx.get((p.lr_record, planner.lr_run(p, task, name).name))
  if epochs == 2 * t.epochs:
    return ctx.idx.get((p.budget_record, planner.budget_run(p, task, name).name))
  return None


def glue_hf_anchor(ctx: Ctx) -> str:
  """Our CE against HF PyTorch on GLUE tasks at the same settings (the protocol's
  glue_hf_anchor record). Our side
  is the benchmark's own run, or else the protocol's recorded CE run at those settings."""
  p = ctx.p
  name, what = p.glue_hf_anchor
  by = {}
  for r in ctx.rs.get(name, []):
    key = (r["task"], r["budget"]["lr"], r["budget"].get("num_epochs"), r["seed"])
    by.setdefault(key, {})[r["framework"]] = p.dev_score(r)
  out = []
  for (t, lr, epochs, seed), v in sorted(by.items(),
                                         key=lambda kv: _stage1_tasks(p).index(kv[0][0])):
    ours_from = "this benchmark"
    if "jax" not in v:
      row = _our_ce(ctx, t, lr, epochs, seed)
      v["jax"] = row and p.dev_score(row)
      ours_from = f"`{row['sweep']}` record" if row else ""
    if v.get("jax") is not None and "torch" in v:
      out.append([label(p, t), _lr_name(p, lr) or f"{lr:g}",
                  "—" if epochs is None else epochs, seed,
                  pts(v["jax"]), pts(v["torch"]), f"{v['jax'] - v['torch']:+.2f}", ours_from])
  if not out:
    return (f"*pending*: no GLUE task has both frameworks in `{name}` ({what}); it runs where "
            "CE misses its published anchor.\n")
  return table(["task", "lr", "epochs", "seed", "ours (JAX)", "HF PyTorch", "ours − HF",
                "ours from"], out) + f"\n{what}; points.\n"


def anchors_table(ctx: Ctx) -> str:
  p = ctx.p
  return (mr_anchor(p, ctx.rs.get(p.hf_anchor[0], [])) + "\n" + glue_anchor(ctx) + "\n"
          + glue_hf_anchor(ctx))


def gate_table(ctx: Ctx) -> str:
  p = ctx.p
  rows = [(p.stage_record[1], r) for r in ctx.rs.get(p.stage_record[1], [])
          if r["method"] in GATED or "gate_on_fraction" in r.get("train", {})]
  rows += [(p.gate_record, r) for r in ctx.rs.get(p.gate_record, [])]
  if not rows:
    return pending(p, "no gated run is recorded yet", ctx.d)
  order = {t: i for i, t in enumerate(p.tasks)}
  groups: dict = {}  # one row per task, method, angle and record; its seeds in order
  for rec, r in sorted(rows, key=lambda x: (order[x[1]["task"]], x[0], x[1]["method"],
                                            x[1]["seed"])):
    angle = r.get("overrides", {}).get("loss.angle_params", ANGLE_PRESET)
    groups.setdefault((r["task"], r["method"], angle, rec), []).append(r)
  out = []
  for (task, method, angle, rec), runs in groups.items():
    fracs = [r.get("train", {}).get("gate_on_fraction") for r in runs]
    out.append([label(p, task), p.label(method), angle, f"`{rec}`",
                ", ".join(str(r["seed"]) for r in runs),
                ", ".join("—" if f is None else f"{100 * f:.1f}%" for f in fracs)])
  return table(["task", "method", "angle over", "record", "seeds", "gate on (steps), per seed"],
               out)


GATE_ANGLES = "gate_angles"  # scripts/grad_conflict.py --record: angles by partition


def gate_angles_table(ctx: Ctx) -> str:
  """Why ACL's gate stays on: per run of the GATE_ANGLES record, the CE/contrastive angle over
  all parameters and over each partition, and the label embeddings' share of each gradient."""
  p = ctx.p
  rows = ctx.rs.get(GATE_ANGLES, [])
  if not rows:
    return ("*pending*: no run of `scripts/grad_conflict.py --record "
            f"results/records/{GATE_ANGLES}.jsonl` is recorded yet.\n")

  def measured(steps, key):  # None for a row recorded before the partition was measured
    return None if any(key not in s for s in steps) else np.array([s[key] for s in steps])

  def cell(steps, key):
    a = measured(steps, key)
    return "—" if a is None else f"{np.median(a):.1f}° ({100 * (a > 90).mean():.0f}%)"

  out = []
  for r in rows:
    st = r["steps"]
    share = lambda k: "—" if (a := measured(st, k)) is None else f"{100 * np.median(a):.0f}%"
    for k, name in (("acl", "CE vs ACL-Embed"), ("scl", "CE vs SCL")):
      out.append([label(p, r["task"]), p.label(r["method"]), name, cell(st, k),
                  cell(st, f"{k}_encoder"), cell(st, f"{k}_top"),
                  cell(st, "acl_classifier") if k == "acl" else "— (SCL does not train them)",
                  f"CE {share('ce_classifier_share')}, ACL-Embed {share('acl_classifier_share')}"
                  if k == "acl" else "—"])
  b = rows[0]["budget"]
  return table(["task", "trained with", "angle", "all parameters", "encoder weights "
                "(`angle_params=encoder`)", "top layer and heads", "label embeddings alone",
                "label embeddings' share of |g|², median"], out) + (
      f"\nMedian angle over the steps (steps above 90° in brackets); {len(rows[0]['steps'])} "
      f"steps, B{b['batch_size']}, L{b['max_length']}, lr {b['lr']:g}, seed "
      f"{rows[0]['seed']}; the angles of gradients taken on each step's batch and dropout key, "
      "before the step.\n")


TABLES = {
    "claims": claims_table, "protocol_tasks": protocol_tasks_table,
    "stage_hours": stage_hours_table, "deviations": deviations_table,
    "anchors": anchors_table, "lr": lr_table, "budget": budget_table, "stage1": stage1_table,
    "stage1_scores": stage1_scores_table, "gate": gate_table,
    "gate_angles": gate_angles_table,
    "classes": lambda ctx: classes.table(ctx.p, ctx.rs, ctx.p.labels),
    "holm": lambda ctx: holm.table(holm_tests(ctx)),
    "reruns": reruns_table,
    **{name: (lambda ctx, name=name: later_tables.stage2_md(ctx.p, ctx.idx, ctx.p.labels)[name])
       for name in ("stage2_exits", "stage2_lambda", "stage2_gamma_keep")},
    "stage3_exits": lambda ctx: later_tables.stage3_exits(ctx.p, ctx.idx, ctx.p.labels),
    "holm_summary": lambda ctx: holm.summary(holm_tests(ctx), holm_registered(ctx.p)),
    "stage3_exits_holm": lambda ctx: exit_holm_standing(ctx, 3),
    **{f"stage{s}_arms": (lambda ctx, s=s: lib.arm_tables(ctx, s)) for s in (2, 3)},
    "described": lambda ctx: later_tables.described_tables(ctx.p, ctx.idx, ctx.p.labels),
    **{f"stage{s}_comparisons": (lambda ctx, s=s: lib.later_comparisons_table(ctx, s))
       for s in (2, 3)},
}


def render(p: proto.Protocol, text: str, rs: dict) -> tuple[str, list[str]]:
  """(text with every table block rebuilt from the records, names of blocks that changed)."""
  ctx = context(p, rs)
  return lib.render(text, {name: (lambda build=build: build(ctx))
                           for name, build in TABLES.items()})


# ---- the pilots (results/PILOTS.md) -------------------------------------------------------


def lambda_curves(rows: list[dict]) -> dict:
  curves = {"CE+SCL": select(rows, "mr", "scl", loss__combine=None),
            "ACL": select(rows, "mr", "acl"),
            "CE+SCL, additive (CE + λ SCL)": select(rows, "mr", "scl", loss__combine="additive")}
  return {k: v for k, v in curves.items() if v}


def lambda_table(p: proto.Protocol, rows: list[dict], which=None) -> str:
  out, per_seed = axis_table(p, "loss.lam", lambda_curves(rows), which)
  if "ACL" in per_seed:
    out += ("\nSpread over λ seed by seed, minus ACL's on the same seed (points; mean, 95% "
            "t-interval, seeds on which the curve moved more than ACL's):\n\n"
            "| curve | spread − ACL's spread |\n|---|---|\n")
    for name, sp in per_seed.items():
      if name != "ACL":
        d = [sp[s] - per_seed["ACL"][s] for s in sorted(sp) if s in per_seed["ACL"]]
        out += f"| {name} | {fmt_paired(d)} |\n"
  return out


def gloss_axis_tables(p: proto.Protocol, rows: list[dict]) -> str:
  out = ""
  for axis, name in (("loss.gamma_keep", "gamma_keep"), ("loss.sigma", "sigma")):
    rs = [r for r in select(rows, "mr", "gloss") if axis in r["overrides"]]
    if rs:
      out += ("\n" if out else "") + axis_table(p, axis, {f"CE+G-Loss over {name}": rs})[0]
  return out


def grad_conflict_table(p: proto.Protocol, rows: list[dict]) -> str:
  lines = ["| task | trained with | angle | steps > 90° | median | p10–p90 | top-layer gate "
           "agrees |", "|---|---|---|---|---|---|---|"]
  for r in rows:
    for k, name in (("scl", "CE vs SCL"), ("acl", "CE vs ACL-Embed")):
      a = np.array([s[k] for s in r["steps"]])
      top = np.array([s[k + "_top"] for s in r["steps"]])
      lines.append(
          f"| {label(p, r['task'])} | {p.label(r['method'])} | {name} | "
          f"{100 * (a > 90).mean():.0f}% | {np.median(a):.1f}° | "
          f"{np.percentile(a, 10):.1f}–{np.percentile(a, 90):.1f}° | "
          f"{100 * ((a <= 90) == (top <= 90)).mean():.0f}% |")
  r0 = rows[0]["budget"]
  return ("\n".join(lines) + f"\n\nBudget: {len(rows[0]['steps'])} steps per run, "
          f"B{r0['batch_size']}, lr {r0['lr']:g}, seed 0, MiniLM-L6.\n")


def single_mr_rows(rs: dict) -> list[dict]:
  """pilot_single_mr's CE and G-Loss rows plus the preset points of the λ and gamma_keep grids
  (λ 0.9 for CE+SCL, 0.5 for ACL, gamma_keep 0.7: the same runs as the presets)."""
  lam, ga = rs.get("pilot_lambda_mr", []), rs.get("pilot_gloss_ablation_mr", [])
  return (rs["pilot_single_mr"]
          + [dict(r, method="scl") for r in select(lam, "mr", "scl", loss__lam="0.9",
                                                   loss__combine=None)]
          + [dict(r, method="acl") for r in select(lam, "mr", "acl", loss__lam="0.5")]
          + select(ga, "mr", "gloss", loss__gamma_keep="0.7"))


# record -> (title, how it was run, its tables)
PILOT_SECTIONS = {
    "pilot_glue": (
        "Single-exit methods on GLUE",
        "MRPC, CoLA and RTE, 3 seeds, 200 steps (CoLA 800 steps at max length 48), the "
        "checkpoint picked on dev every 100 steps and scored on the same dev set.",
        lambda p, rs: methods_table(p, rs["pilot_glue"], ("sst2", "cola", "mrpc", "rte"),
                                 ("ce", "scl", "acl_embed", "acl", "gloss"), paper=False)),
    "pilot_single_mr": (
        "Single-exit methods on MR",
        "3 seeds, 200 steps (one epoch), plain CE, the checkpoint picked on dev macro-F1 at "
        "steps 100 and 200. The CE+SCL, ACL and CE+G-Loss rows are the preset points of the λ "
        "and gamma_keep pilots below.",
        lambda p, rs: methods_table(p, single_mr_rows(rs), ["mr"], ("ce", "scl", "acl", "gloss"))),
    "pilot_lambda_mr": (
        "λ sensitivity on MR: CE+SCL against ACL",
        "λ 0.1-0.9, 3 seeds, 200 steps, plain CE; CE+SCL also in ACL's additive form (CE + λ "
        "SCL, `loss.combine=additive`); with and without checkpoint selection.",
        lambda p, rs: ("Selected checkpoints:\n\n" + lambda_table(p, rs["pilot_lambda_mr"])
                    + "\nFinal weights (no checkpoint selection):\n\n"
                    + lambda_table(p, rs["pilot_lambda_mr"], which="latest")
                    + f"\nBudget: {budget_text(rs['pilot_lambda_mr'])}.\n")),
    "pilot_gloss_ablation_mr": (
        "G-Loss gamma_keep and sigma on MR",
        "one axis at a time around the preset (gamma_keep 0.7, sigma 0.667, λ 0.8), 3 seeds, "
        "200 steps, plain CE.",
        lambda p, rs: (gloss_axis_tables(p, rs["pilot_gloss_ablation_mr"])
                    + f"\nBudget: {budget_text(rs['pilot_gloss_ablation_mr'])}.\n")),
    "pilot_multi_exit": (
        "Multi-exit strategies and early exit",
        "seed 0 only, 300 steps (0.14 epoch of SST-2, 1.5 of MR), mean-pooled exits, the "
        "checkpoint picked on the dev exit mean every 100 steps; MR's per-exit scores on test; "
        "the entropy early-exit policy on dev, timed on a per-batch path, not the pooled one of "
        "`acl_jax.exits` (BENCHMARKS.md, early exit).",
        lambda p, rs: (multi_exit_table(p, rs["pilot_multi_exit"], "sst2") + "\n"
                    + multi_exit_table(p, rs["pilot_multi_exit"], "mr") + "\nEarly exit (entropy "
                    "policy, dev; the largest mean layer speed-up within 1 point of the full "
                    "model):\n\n" + early_exit_table(p, rs["pilot_multi_exit"])
                    + f"\nBudget: {budget_text(rs['pilot_multi_exit'])}, seed 0.\n")),
    "pilot_grad_conflict": (
        "Gradient conflict between CE and the contrastive terms",
        "`scripts/grad_conflict.py`, fine-tuning once with CE+SCL and once with CE+ACL-Embed "
        "(ungated); at every step the angle between CE's gradient and each contrastive one on "
        "the same batch and dropout key, over all parameters and over the top layer and heads.",
        lambda p, rs: grad_conflict_table(p, rs["pilot_grad_conflict"])),
}


# A pilot whose run folders were not kept as a record: the summary committed at the time,
# restored from git into results/pilots/ and shown as it was.
PILOT_SUMMARIES = {
    "pilot_textgcn_more": (
        "R52, Ohsumed and 20NG: CE against CE+G-Loss",
        "results/pilots/textgcn_more.md",
        "CE and CE+G-Loss (sigma fixed), 3 seeds, 200 steps at B32, max length 64, lr 5e-5, "
        "the better of steps 100 and 200 on dev macro-F1 tested. Its run folders were not "
        "kept; this is the summary committed then (seed 0 at 8eb3b93, seeds 0-2 at 6f58147), "
        "restored from git."),
}


def pilots_md(p: proto.Protocol, rs: dict) -> str:
  """results/PILOTS.md: every pilot's tables and figures, each labelled as deciding nothing."""
  figs = figure_specs(p, rs)
  out = ["# Pilots\n",
         "Short-budget runs (100-800 steps) from before the protocol in `studies/papers.py`, "
         "kept as records (`results/records/pilot_*.jsonl`), or as the summary committed then "
         "where the runs were not kept (`results/pilots/`). Each is a **short-budget pilot "
         "that decides nothing**: RESULTS.md's verdicts come from the protocol's runs alone. "
         "Generated by `python -m scripts.report`; the intervals here are 95% t-intervals.\n"]
  for name in p.pilots:
    if name in PILOT_SUMMARIES:
      title, path, how = PILOT_SUMMARIES[name]
      with open(os.path.join(REPO, path)) as f:
        out.append(f"## {title} (short-budget pilot; decides nothing)\n\n`{path}`: {how}\n\n"
                   f"{f.read()}")
      continue
    if name not in PILOT_SECTIONS or not rs.get(name):
      continue
    title, how, build = PILOT_SECTIONS[name]
    out.append(f"## {title} (short-budget pilot; decides nothing)\n\n"
               f"`results/records/{name}.jsonl`: {how}\n\n{build(p, rs)}")
    shown = [f"![{cap}](figures/{file})" for rec, file, cap, _ in figs if rec == name]
    if shown:
      out.append("\n".join(shown) + "\n")
  return "\n".join(out)


# ---- figures ------------------------------------------------------------------------------

def _plt():
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  return plt


def _save(fig, ax_or_axes, path, title=None, grid=True, legend=8):
  plt = _plt()
  for ax in np.ravel(ax_or_axes):
    if grid:
      ax.grid(alpha=0.3)
    ax.legend(fontsize=legend)
  if title:
    fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def _errorbar(ax, xs, ys, name, capsize=3):
  ax.errorbar(xs, [np.mean(y) for y in ys], yerr=[np.std(y, ddof=1) if len(y) > 1 else 0
                                                  for y in ys],
              marker="o", capsize=capsize, label=name)


def curve_figure(p: proto.Protocol, axis, curves, path, title, baseline=None, logx=False):
  """Mean ± std over seeds per axis value of each curve, over CE's band."""
  fig, ax = _plt().subplots(figsize=(6.5, 4))
  v = list(by_seed(baseline or [], lambda r: pilot_score(p, r)).values())
  if v:
    ax.axhspan(np.mean(v) - np.std(v, ddof=1), np.mean(v) + np.std(v, ddof=1), color="gray",
               alpha=0.2)
    ax.axhline(np.mean(v), color="gray", ls="--", label=f"CE (n={len(v)}, ± std)")
  for name, rs in curves.items():
    xs = sorted({float(r["overrides"][axis]) for r in rs})
    ys = [[pilot_score(p, r) for r in rs if float(r["overrides"][axis]) == x] for x in xs]
    _errorbar(ax, xs, ys, f"{name} (n={min(len(y) for y in ys)})")
  if logx:
    ax.set_xscale("log")
  ax.set_xlabel(axis)
  ax.set_ylabel("MR test accuracy (%)")
  ax.set_title(title, fontsize=10)
  _save(fig, ax, path)


def _task_panels(p: proto.Protocol, rows, path, title, draw):
  """One panel per multi-exit task with rows (SST-2, MR), `draw(ax, task)` filling each."""
  tasks = [t for t in ("sst2", "mr") if select(rows, t)]
  fig, axes = _plt().subplots(1, len(tasks), figsize=(5.5 * len(tasks), 3.8), squeeze=False)
  for ax, t in zip(axes[0], tasks):
    draw(ax, t)
    ax.set_ylabel(f"{p.tasks[t].metric} (%)")
  _save(fig, axes, path, title)


def per_exit_figure(p: proto.Protocol, rows, path, title):
  def draw(ax, t):
    rs = select(rows, t)
    split, exits = split_of(rs), exits_of(rs[0])
    for meth in p.multi_exit:
      ys = [list(by_seed(select(rs, t, meth), lambda r, m=m: exit_score(p, r, m, split)).values())
            for m in exits]
      if all(ys):
        _errorbar(ax, exits, ys, p.label(meth), capsize=2)
    ax.set_title(f"{label(p, t)} ({split})", fontsize=10)
    ax.set_xlabel("exit (layer)")
  _task_panels(p, rows, path, title, draw)


def quality_speed_figure(p: proto.Protocol, rows, path, title):
  def draw(ax, t):
    for meth in p.multi_exit:
      es = [e for r in select(rows, t, meth) for e in r.get("early_exit", {}).get("entropy", [])]
      thr = sorted({e["threshold"] for e in es})
      if thr:
        ax.plot([np.mean([e["layer_speedup"] for e in es if e["threshold"] == x]) for x in thr],
                [np.mean([100 * e["metric"] for e in es if e["threshold"] == x]) for x in thr],
                marker="o", label=p.label(meth))
    ax.set_title(f"{label(p, t)} dev, entropy policy", fontsize=10)
    ax.set_xlabel("layer speed-up (6 / mean layers)")
  _task_panels(p, rows, path, title, draw)


def angles_figure(p: proto.Protocol, rows, path):
  fig, axes = _plt().subplots(1, len(rows), figsize=(4.2 * len(rows), 3.4), squeeze=False)
  every = [s[k] for r in rows for s in r["steps"] for k in ("scl", "acl")]
  bins = np.arange(np.floor(min(every)) - 1, np.ceil(max(every)) + 2, 1.0)
  for ax, r in zip(axes[0], rows):
    for k, name in (("scl", "CE vs SCL"), ("acl", "CE vs ACL-Embed")):
      ax.hist([s[k] for s in r["steps"]], bins=bins, alpha=0.6, label=name)
    ax.axvline(90, color="k", lw=0.8, ls="--")
    ax.set_title(f"{label(p, r['task'])}: training with {p.label(r['method'])}", fontsize=9)
    ax.set_xlabel("gradient angle (degrees)")
  _save(fig, axes, path, grid=False, legend=7)


def figure_specs(p: proto.Protocol, rs: dict) -> list[tuple]:
  """(record, file name, caption, draw(path)) of every figure the records support."""
  out = []
  base = select(rs.get("pilot_single_mr", []), "mr", "ce")
  if rs.get("pilot_lambda_mr"):
    curves = {k.split(" (")[0].replace(",", ""): v
              for k, v in lambda_curves(rs["pilot_lambda_mr"]).items()}
    out.append(("pilot_lambda_mr", "pilot_lambda_mr.png", "λ sensitivity on MR, pilot",
                lambda path: curve_figure(p, "loss.lam", curves, path,
                                       "λ sensitivity on MR (pilot_lambda_mr)", base)))
  for axis, logx in (("loss.gamma_keep", False), ("loss.sigma", True)):
    rows = [r for r in rs.get("pilot_gloss_ablation_mr", []) if axis in r["overrides"]]
    if rows:
      name = axis.split(".")[-1]
      out.append(("pilot_gloss_ablation_mr", f"pilot_gloss_ablation_mr_{name}.png",
                  f"G-Loss {name}, MR, pilot",
                  lambda path, a=axis, r=rows, x=logx: curve_figure(p, 
                      a, {"CE+G-Loss": r}, path, f"G-Loss {a} on MR (pilot_gloss_ablation_mr)",
                      base, x)))
  me = rs.get("pilot_multi_exit")
  if me:
    out.append(("pilot_multi_exit", "pilot_multi_exit_per_exit.png", "per-exit scores, pilot",
                lambda path: per_exit_figure(p, me, path, "Per-exit score, MiniLM-L6, "
                                             "mean-pooled exits (pilot_multi_exit)")))
    out.append(("pilot_multi_exit", "pilot_multi_exit_quality_speed.png", "early exit, pilot",
                lambda path: quality_speed_figure(p, me, path, "Early exit, mean over seeds "
                                               "(pilot_multi_exit)")))
  if rs.get("pilot_grad_conflict"):
    out.append(("pilot_grad_conflict", "pilot_grad_conflict.png", "gradient angles, pilot",
                lambda path: angles_figure(p, rs["pilot_grad_conflict"], path)))
  return out


def figures(p: proto.Protocol, rs: dict, out: str = FIGURES) -> list[str]:
  """Writes every figure the records support; returns their paths."""
  os.makedirs(out, exist_ok=True)
  made = []
  for _, name, _, draw in figure_specs(p, rs):
    draw(os.path.join(out, name))
    made.append(os.path.join(out, name))
  return made


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--protocol", default=loader.DEFAULT,
                  help="the study's Protocol: module:NAME or a .py file (default: this "
                  "project's, studies.papers:PAPERS)")
  ap.add_argument("--file", action="append",
                  help="a report whose table blocks to rebuild (repeatable); default: this "
                  "project's REPORTS, with its own protocol")
  ap.add_argument("--pilots", default=PILOTS_MD, help="the pilots' report, written whole")
  ap.add_argument("--records", default="",
                  help="the records folder (default: this project's results/records, with "
                  "its own protocol)")
  ap.add_argument("--check", action="store_true",
                  help="only compare; exit 1 naming the tables that differ from the records")
  ap.add_argument("--no_figures", action="store_true")
  a = ap.parse_args(argv)
  p = sweep.load_protocol(a.protocol)
  own = a.protocol == loader.DEFAULT
  if not (own or (a.file and a.records)):
    raise SystemExit(f"--protocol {a.protocol}: name its records folder (--records) and the "
                     "report(s) to fill (--file: a markdown file with <!-- table: NAME --> "
                     "blocks; README, \"Your own study\").")
  if a.records and not os.path.isdir(a.records):  # else read as a study with no run
    raise sweep.errors.UserError(f"--records {a.records}: no such folder; name the folder "
                                 "the study's sweep records its runs in.")
  rs = records.read_all(a.records or records.RECORDS)
  changed, rewritten = [], {}
  for path in a.file or REPORTS:
    if not os.path.isfile(path):
      raise SystemExit(f"--file {path}: no such report; create it with the table blocks "
                       f"to fill ({', '.join(TABLES)}).")
    text = open(path).read()
    new, names = render(p, text, rs)
    changed += [f"{os.path.basename(path)}: {n}" for n in names]
    if new != text:
      rewritten[path] = new
  # The pilots' report is written for a protocol that has pilots.
  pilots = pilots_md(p, rs) if p.pilots and a.pilots else None
  old = open(a.pilots).read() if pilots is not None and os.path.isfile(a.pilots) else None
  if a.check:
    changed += [os.path.relpath(a.pilots, REPO)] if pilots != old else []
    if changed:
      print(f"tables that differ from the records: {', '.join(changed)}; run "
            "scripts/report.py.")
      return 1
    return 0
  for path, new in rewritten.items():
    with open(path, "w") as f:
      f.write(new)
  if pilots != old:
    with open(a.pilots, "w") as f:
      f.write(pilots)
    changed.append(os.path.relpath(a.pilots, REPO))
  print(f"rewritten: {', '.join(changed) or 'none (in sync)'}")
  if not a.no_figures and p.pilots:
    for path in figures(p, rs):
      print(f"wrote {os.path.relpath(path, REPO)}")
  return 0


if __name__ == "__main__":
  sys.exit(sweep.user_errors(main))
