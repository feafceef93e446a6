"""The tables that sum a study up, for any protocol: each claim with its verdicts so far
(`claims_table`: stage 1's comparisons, the later stages' rules, the cost rules and what is
untestable), the Holm correction over every registered comparison (`holm_tests`), what each
stage has cost in machine-hours (`stage_hours_table`), and each rerun beside its original
(`reruns_table`). Each takes the report's context (`stage_tables.Ctx`).

Imports nothing heavy.
"""
import collections
import re

from acl_jax.study import (classes, holm, later, protocol as proto, records, rules,
                           status as study_status)
from acl_jax.study.fmt import table
from acl_jax.study.stage_tables import (Ctx, comparison_label, later_pending, not_shown,
                                        shown_verdict, task_budget, verdict_text,
                                        weak_baseline)
from acl_jax.study.tables import label


def rule_test_name(p: proto.Protocol, r) -> str:
  """A later stage's rule as the Holm family names it: task and claim."""
  return f"{label(p, r.task)} {p.claims[r.claim].split(' (')[0]}"


def exit_test_name(p: proto.Protocol, r: proto.ExitRule, baseline: str) -> str:
  """An exit rule's contrast against one baseline as the Holm family names it."""
  return f"{rule_test_name(p, r)}: vs {baseline.upper()}"


def exit_holm_standing(ctx: Ctx, stage: int) -> str:
  """Where a stage's shallow-exit contrasts stand in the Holm family (holm.py)."""
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
  one-sided p-value of what it asserts (holm.py)."""
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


def claims_table(ctx: Ctx) -> str:
  """Per claim of the protocol: the paper's number, each stage-1 comparison's look so far, a tally
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
    tally = ", ".join(f"{w} {words[w]}" for w in (*proto.VERDICT_WORDS, "pending") if words[w])
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
  header = [f"claim ({p.claims_source})" if p.claims_source else "claim", "paper",
            f"ours, per comparison: mean [{100 * p.decide_level:g}% interval] "
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
  for stage, t in study_status.stage_totals(ctx.p, ctx.rs, records.REPO).items():
    hours = t.hours() + (f" ({t.untimed} untimed or partly timed)" if t.untimed else "")
    whole = "; ".join(f"{len(runs)} runs, {sec / 3600:.1f} h" + (
        f" ({what})" if what != "all" else "") for what, runs, sec in t.whole)
    machines = sorted({_vector_isa(r["timed_on"]) for r in t.recorded
                       if "seconds" in r and r.get("timed_on")})
    rows.append([stage, len(t.recorded), hours, whole, "; ".join(machines) or "—"])
  return table(["stage", "runs recorded", "machine-h recorded", "whole stage (estimate)",
                "timed on"], rows)
