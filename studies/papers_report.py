"""This project's report: RESULTS.md's tables and the detail beside it (results/STAGE*.md,
CLASSES.md), filled from studies/papers.py's protocol and results/records.

Every table any protocol gets (acl_jax/study/reporting.py's TABLES) plus this study's own:
its anchors (our CE against HF PyTorch on MR, and against the published MiniLM scores on GLUE
dev), ACL's gate (how often it was on), the gate's angles by parameter partition, and its
later stages' exit, λ and γ rules in full. The
pilots from before the protocol are studies/papers_pilots.py's.

  python -m scripts.report            # these tables, results/PILOTS.md, results/figures/
  python -m scripts.report --check    # exit 1, naming what differs from the records
"""
import os

import numpy as np

from acl_jax.study import (devices, later, later_tables, planner, protocol as proto, records,
                           reporting, stage_tables)
from acl_jax.study.fmt import mean_sd as fmt_mean, span, table
from acl_jax.study.stage_tables import Ctx, _stage1_tasks, ce_seed0, pending
from acl_jax.study.tables import label, pts
from studies import papers

REPO = records.REPO
# The reports whose table blocks are rebuilt from the records: the summary, and per-stage
# detail beside it.
REPORTS = (os.path.join(REPO, "RESULTS.md"), os.path.join(REPO, "results", "STAGE1.md"),
           *(os.path.join(REPO, "results", f"STAGE{s}.md") for s in (2, 3)),
           os.path.join(REPO, "results", "CLASSES.md"))
# Stage 4 (studies/papers.py's BASE protocol) has records and a report of its own; its tables
# are those any protocol gets.
BASE_RECORDS = os.path.join(REPO, "results", "records", "base")
BASE_REPORTS = (os.path.join(REPO, "results", "STAGE4.md"),)
GATED = ("acl", "scl_grad")  # the stage-1 methods whose ACL-Grad gate acts
ANGLE_PRESET = "all"  # loss.angle_params of the presets (configs/common.py)


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
    **reporting.TABLES, "anchors": anchors_table, "gate": gate_table,
    "base_size": lambda ctx: base_size_table(ctx),  # (defined below)
    "gate_angles": gate_angles_table,
    # results/STAGE2.md and STAGE3.md: this study's exit, λ and γ rules in full
    **{name: (lambda ctx, name=name: later_tables.stage2_md(ctx.p, ctx.idx, ctx.p.labels)[name])
       for name in ("stage2_exits", "stage2_lambda", "stage2_gamma_keep")},
    "stage3_exits": lambda ctx: later_tables.stage3_exits(ctx.p, ctx.idx, ctx.p.labels),
}


def devices_table(ctx: Ctx) -> str:
  """Each stage's runs by device kind, and the pairs (a task's runs at one seed in a stage's
  record) that mix kinds, which `Protocol.same_device_pairs` rules out."""
  kinds = devices.recorded_kinds(ctx.p, ctx.rs)
  out = []
  for stage, record in sorted(ctx.p.stage_record.items()):
    count = {}
    for (rec, _, _), by_kind in kinds.items():
      if rec == record:
        for kind, runs in by_kind.items():
          count[kind] = count.get(kind, 0) + len(runs)
    out.append([str(stage), "; ".join(f"{k}: {n} run{'s' * (n != 1)}"
                                      for k, n in sorted(count.items()))
                or "none yet"])
  mixed = devices.mixed(ctx.p, ctx.rs)
  note = ("No pair mixes device kinds." if not mixed else
          "**Pairs that mix device kinds** (the protocol rules them out; train the group again "
          "on one kind): " + "; ".join(
              f"{label(ctx.p, task)} seed {seed} ({', '.join(f'{k}: {len(v)}' for k, v in sorted(by.items()))})"
              for (_, task, seed), by in sorted(mixed.items())) + ".")
  return table(["stage", "runs recorded in the stage's record, by device kind"], out) + (
      f"\n{note} Every CPU is one kind; each accelerator another.\n")


def _comparison_cell(ctx: Ctx, c: proto.Comparison) -> str:
  v = stage_tables.shown_verdict(ctx, c)
  return stage_tables.not_shown(ctx, c) if v is None else stage_tables.verdict_text(v)


def _rules_cell(ctx: Ctx, like: proto.ExitRule) -> str | None:
  """Each later stage's rules of `like`'s claim, method and baselines, on their tasks:
  "SST-2, stage 2: <cell>; ..." (no stage named where the protocol has one later stage); None
  where it has no such rule."""
  cells = []
  for stage, rules in sorted(ctx.p.rules.items()):
    for r in rules:
      if isinstance(r, proto.ExitRule) and (r.claim, r.method, r.baselines) == (
          like.claim, like.method, like.baselines):
        got = later.claim_word(ctx.p, ctx.idx, stage, r)
        where = f", stage {stage}" if len(ctx.p.rules) > 1 else ""  # (stage 4 has one)
        cells.append(f"{label(ctx.p, r.task)}{where}: " + (got[1] if got else "pending"))
  return "; ".join(cells) or None


def base_size_table(ctx: Ctx) -> str:
  """RESULTS.md's "At base size": each stage-4 claim's comparisons and rules, all-MiniLM-L6-v2's
  verdict (this protocol's, on the same task and methods) beside all-mpnet-base-v2's (the
  BASE protocol's, on results/records/base)."""
  base = stage_tables.context(papers.BASE, records.read_all(BASE_RECORDS))
  bp, rows, shown = base.p, [], set()

  def claim(key):  # a claim's text on its first row only
    text = "" if key in shown else bp.claims[key]
    shown.add(key)
    return text

  for c in bp.comparisons:
    mine = next((m for m in ctx.p.comparisons
                 if (m.task, m.method, m.baseline) == (c.task, c.method, c.baseline)), None)
    rows.append([claim(c.claim), f"{label(bp, c.task)}: {stage_tables.comparison_label(bp, c)}",
                 _comparison_cell(ctx, mine) if mine else "not compared",
                 _comparison_cell(base, c)])
  for r in (r for rs in bp.rules.values() for r in rs if isinstance(r, proto.ExitRule)):
    what = (f"{bp.label(r.method)} vs {', '.join(map(bp.label, r.baselines))}: exit"
            + (f"s {r.shallow[0]}-{r.shallow[-1]} − {r.deep[0]}-{r.deep[-1]}" if r.deep
               else f" {', '.join(map(str, r.shallow))}"))
    rows.append([claim(r.claim), what, _rules_cell(ctx, r) or "not testable: 6 layers in all",
                 _rules_cell(base, r)])
  return table(["claim", "comparison", "all-MiniLM-L6-v2 (6 layers)",
                "all-mpnet-base-v2 (12 layers)"], rows) + (
      f"\nMean paired difference, points [{100 * ctx.p.decide_level:g}% interval] (seeds ahead "
      "/ seeds), verdict; each backbone's own lr, budget and seeds.\n")


# Stage 4's report (results/STAGE4.md): the tables any protocol gets, and where each run trained.
BASE_TABLES = {
    **reporting.TABLES, "devices": devices_table,
    # 4b's two exit rules, each laid out as stage 2's (exit 6 alone; exits 1-6 against 7-12)
    **{f"stage2_{rule.claim}": (lambda ctx, rule=rule: later_tables.exits_table(
        ctx.p, ctx.idx, rule, ctx.p.labels)) for rule in papers.BASE_STAGE2_RULES},
}


def render(p: proto.Protocol, text: str, rs: dict) -> tuple[str, list[str]]:
  """(text with every table block rebuilt from the records, names of blocks that changed)."""
  return reporting.fill(p, text, rs, TABLES)
