"""The run records and the reports built from them: RESULTS.md's tables and results/PILOTS.md
are what the committed records give, and each table reads synthetic records as the protocol
says. Fast: no training, no data."""
import dataclasses
import json
import math
import os
import re

import numpy as np
import pytest
from scipy import stats

from acl_jax.study import (loader, planner, protocol as proto, records, reporting, stage_tables,
                           summary)
from acl_jax.study import tables, timing
from scripts import report
from studies import papers, papers_pilots, papers_report
from studies.papers import MULTI_EXIT_EXTRA, PAPERS as p
from tests import helpers

RESULTS = os.path.join(helpers.REPO, "RESULTS.md")
S1 = p.stage_record[1]


def _pilot(row):
  return tables.pilot_score(p, row)


def test_committed_reports_are_what_the_committed_records_give():
  """Every table block of RESULTS.md, and results/PILOTS.md, equal scripts/report.py's output
  on results/records/ (run `python -m scripts.report` after a sweep adds rows)."""
  texts = {path: open(path).read() for path in papers_report.REPORTS}
  blocks = [b[1] for text in texts.values() for b in reporting.BLOCK.findall(text)]
  assert sorted(blocks) == sorted(papers_report.TABLES), "a table is missing, or rendered twice"
  rs = records.read_all()
  for path, text in texts.items():
    _, changed = papers_report.render(p, text, rs)
    assert not changed, f"{path}: tables differ from the records: {changed}"
  assert open(papers_pilots.PILOTS_MD).read() == papers_pilots.pilots_md(p, rs), (
      "results/PILOTS.md differs from the records")


def test_at_base_size_reads_each_backbone_from_its_own_protocol_and_records(monkeypatch):
  """RESULTS.md's "At base size" puts MiniLM-L6's verdict (this protocol, results/records)
  beside MPNet-base's (BASE, results/records/base). Pointed at the same records through a
  protocol with BASE's comparisons, both columns agree; with BASE's own, none is decided yet
  or each is BASE's."""
  ctx = stage_tables.context(p, records.read_all())
  like_base = dataclasses.replace(p, comparisons=papers.BASE.comparisons,
                                  claims={**p.claims, **papers.BASE.claims},
                                  rules={2: papers.BASE_STAGE2_RULES},
                                  arms={2: papers.BASE_STAGE2}, stages=papers.BASE.stages,
                                  described=())
  monkeypatch.setattr(papers_report.papers, "BASE", like_base)
  monkeypatch.setattr(papers_report, "BASE_RECORDS", records.RECORDS)
  rows = [r.split(" | ") for r in papers_report.base_size_table(ctx).splitlines()[2:8]]
  assert len(rows) == 6 and all(r[2] == r[3].rstrip(" |") for r in rows), rows
  assert rows[0][2].startswith("-3.54 [-6.81, -0.26] (0/5) lower")  # RTE ACL − CE, stage 1
  monkeypatch.undo()
  text = papers_report.base_size_table(ctx)
  base = stage_tables.context(papers.BASE, records.read_all(papers_report.BASE_RECORDS))
  cell = lambda cx, c: (stage_tables.not_shown(cx, c) if stage_tables.shown_verdict(cx, c) is None
                        else stage_tables.verdict_text(stage_tables.shown_verdict(cx, c)))
  for c, line in zip(papers.BASE.comparisons, text.splitlines()[2:8]):
    mine = next(m for m in p.comparisons if (m.task, m.method, m.baseline) == (c.task, c.method,
                                                                              c.baseline))
    assert line.endswith(f"| {cell(ctx, mine)} | {cell(base, c)} |"), line
  assert "| not testable: 6 layers in all | RTE: " in text
  # the shallow-exit row reads MiniLM's rule of the same method and baselines (stage 2's, on
  # SST-2), not stage 3's against 2ST and ALT
  exits = next(ln for ln in text.splitlines() if "exits 1-6 − 7-12" in ln)
  assert "SST-2, stage 2: vs JT" in exits and "2ST" not in exits


def test_stage4_report_is_what_its_records_give():
  """results/STAGE4.md's table blocks equal the BASE protocol's tables on results/records/base
  (scripts/report.py rebuilds them with RESULTS.md's): no stage-4 number is typed by hand."""
  base = loader.load("studies.papers:BASE")
  text = open(papers_report.BASE_REPORTS[0]).read()
  names = [b[1] for b in reporting.BLOCK.findall(text)]
  assert {"claims", "lr", "budget", "stage1", "stage_hours", "devices", "stage2_exit6",
          "stage2_exits"} <= set(names)
  assert len(names) == len(set(names)), "a table is rendered twice"
  _, changed = reporting.fill(base, text, records.read_all(papers_report.BASE_RECORDS),
                              papers_report.BASE_TABLES)
  assert not changed, f"results/STAGE4.md: tables differ from the records: {changed}"


def test_committed_records_are_whole():
  """Every committed row names its record, run, task, method and seed, has a budget and its
  scores (a cost record's: its timings), its name spells its settings, and no run appears
  twice in a file."""
  rs = records.read_all()
  assert rs, "results/records/ holds no record"
  for sweep, rows in rs.items():
    path = records.path_of(sweep)
    assert len(rows) == sum(1 for line in open(path) if line.strip()), f"{sweep}: duplicate run"
    for r in rows:
      assert r["sweep"] == sweep and r["run"] and r["task"] and r["method"], r.get("run")
      assert isinstance(r["seed"], int) and r["budget"].get("batch_size"), r["run"]
      assert (r.get("final") or r.get("latest") or r.get("steps")  # a cost row: its rounds
              or r.get("step_seconds")), f"{r['run']}: no scores"
      settings = records.parse_name(r["run"])
      assert settings["task"] == r["task"], r["run"]
      assert settings.get("method", r["method"]) == r["method"], r["run"]
      extra = {k: v for k, v in settings.items() if k not in records.OWN}
      # an imported row without overrides states its settings as fields
      assert extra == r.get("overrides", {k: str(r.get(k)) for k in extra}), r["run"]


def test_protocol_prose_states_the_protocol():
  """RESULTS.md's protocol section says in words what studies/papers.py fixes as data."""
  text = " ".join(open(RESULTS).read().split())
  for lr in (*p.lr_grid, p.lr_high):
    assert lr in text
  assert f"within {p.lr_tie:g} points ({p.lr_tie * 2:g} MCC point)" in text
  assert f"more than {p.budget_gain:g} points ({p.budget_gain * 2:g} MCC points)" in text
  for task, score in p.anchors.items():
    assert f"{p.tasks[task].label} {score:g}" in text
  assert f"**{100 * p.decide_level:g}%**" in text and f"**{100 * p.describe_level:g}%**" in text
  seeds = p.look_seeds
  assert f"Seeds {seeds[0][0]}-{seeds[0][-1]} first" in text
  assert f"adds seeds {seeds[1][0]} and {seeds[1][1]}" in text
  assert f"{len(seeds[0]) + len(seeds[1])} seeds at most" in text
  margins = re.search(r"above minus the margin \((.*?)\)", text).group(1)
  for c in p.comparisons:  # each label's margin is the first number standing alone after it
    task = p.tasks[c.task]
    m = re.search(fr"\b{re.escape(task.label)}\b.*?(?<= )(\d+(?:\.\d+)?)(?=[ ,]|$)", margins)
    assert m and float(m.group(1)) == task.margin, task.label


# ---- synthetic records --------------------------------------------------------------------

def _row(run: planner.Run, value: float, **extra) -> dict:
  """A recorded row of a planned run scoring `value` points (dev and the scored split)."""
  settings = dict(run.settings)
  t = p.tasks[run.task]
  scores = {t.metric: value / 100}
  # What the protocol must not score: an earlier epoch's dev and the best-dev checkpoint
  # (`final`), each off the final weights' value by an amount that varies with method and
  # seed, so that scoring either field moves the paired differences and the verdicts.
  seed = int(settings["seed"])
  decoy = {t.metric: (value + 4.0 * ((3 * seed + len(run.method)) % 4) - 5.0) / 100}
  row = {"sweep": run.sweep, "run": run.name, "task": run.task, "method": run.method,
         "seed": seed,
         "overrides": {k: v for k, v in settings.items() if k not in records.OWN},
         "budget": {"num_epochs": run.epochs, "batch_size": 32, "lr": float(_lr_of(run))},
         "evals": [{"step": 0, "dev": decoy}, {"step": 1, "dev": scores}],
         "final": {"dev": decoy}, "train": {},
         "seconds": 600.0 * run.epochs, "timed_on": "Test CPU, 2 cores"}
  if t.scored != "dev":
    row["latest"] = {t.scored: scores}
    row["final"][t.scored] = decoy
  if run.method in papers_report.GATED:
    row["train"]["gate_on_fraction"] = 0.995 if run.sweep == S1 else 0.5
  return {**row, **extra}


# CE seed 0 by lr: RTE ties (5e-5), MRPC picks 2e-5, CoLA misses its anchor and takes 1e-4.
LR_SCORES = {"rte": {"2e-5": 69.0, "5e-5": 69.3}, "mrpc": {"2e-5": 89.5, "5e-5": 88.0},
             "cola": {"2e-5": 40.0, "5e-5": 40.5, "1e-4": 46.0},
             "sst2": {"2e-5": 91.5, "5e-5": 91.6}, "mr": {"2e-5": 80.0, "5e-5": 80.2},
             "r8": {"2e-5": 97.0, "5e-5": 97.1}}
DOUBLING = {"sst2": 2.4}  # twice the epochs gains this much (else 0.5): SST-2 doubles
# Each method's offset from CE, seed by seed, so that the verdicts are known (EXPECTED).
OFFSETS = {
    ("rte", "acl"): [1.0, 1.2, 1.1], ("rte", "scl"): [0.1, -0.1, 0.0, 0.2, -0.2],
    ("rte", "scl_grad"): [2.1, -2.1, 1.0],  # undecided; its seeds 3-4 are not recorded
    ("mrpc", "acl"): [-0.2, 0.1, 0.0, -0.1, -0.1], ("mrpc", "scl"): [0.5, 0.6, 0.4, 0.5, 0.4],
    ("cola", "acl"): [0.0, 0.1, -0.1], ("cola", "scl"): [10.0, 11.0, 12.0],
    ("cola", "scl_grad"): [10.5, 11.6, 12.7],
    ("sst2", "acl"): [0.2, 0.3, 0.25], ("sst2", "scl"): [0.1, 0.0, 0.2, 0.1, 0.0],
    ("sst2", "gloss"): [1.0, 1.1, 0.9],
    ("mr", "gloss"): [0.5, 0.6, 0.4], ("r8", "gloss"): [-0.1, 0.1, 0.0, 0.05, -0.05]}
EXPECTED = {
    ("rte", "acl", "ce"): ("beats", 1), ("rte", "acl", "scl"): ("beats", 1),
    ("rte", "scl_grad", "scl"): ("undecided", 1),
    ("mrpc", "acl", "ce"): ("matches or beats", 1),
    ("mrpc", "acl", "scl"): ("within the margin, lower", 2),
    ("cola", "acl", "ce"): ("matches or beats", 1), ("cola", "acl", "scl"): ("worse", 1),
    ("cola", "scl_grad", "scl"): ("beats", 1),
    ("sst2", "acl", "ce"): ("beats", 1), ("sst2", "acl", "scl"): ("matches or beats", 1),
    ("sst2", "gloss", "ce"): ("beats", 1), ("sst2", "gloss", "scl"): ("beats", 1),
    ("sst2", "scl", "ce"): ("inconclusive", 2),
    ("mr", "gloss", "ce"): ("beats", 1), ("r8", "gloss", "ce"): ("inconclusive", 2)}


def _lr_of(run: planner.Run) -> str:
  named = dict(run.settings).get("optim.lr")
  return named or next(s.split("=")[1] for s in run.sets if s.startswith("optim.lr="))


def _value(run: planner.Run, offsets=OFFSETS) -> float:
  seed = int(dict(run.settings)["seed"])
  if run.sweep == p.lr_record:
    return LR_SCORES[run.task][_lr_of(run)]
  base = LR_SCORES[run.task].get(_lr_of(run), 0.0)
  if run.sweep == p.budget_record:
    return base + DOUBLING.get(run.task, 0.5)
  ce = max(LR_SCORES[run.task].values()) + 0.3 * seed
  off = offsets.get((run.task, run.method), [0.0] * 5)
  return ce + off[seed % len(off)]


def _complete(value=_value, withhold=lambda run: False) -> dict[str, list[dict]]:
  """The records of a whole stage 1: every run its gates release, trained in their order."""
  rs = {}
  while True:
    have = {(s, r["run"]) for s, rows in rs.items() for r in rows}
    new = [r for r in planner.decisions(p, rs).ready if not withhold(r)
           and (r.sweep, r.name) not in have]
    if not new:
      return rs
    for run in dict.fromkeys(new):
      reused = run.sweep == S1 and run.method == "ce" and dict(run.settings)["seed"] == "0"
      rs.setdefault(run.sweep, []).append(
          _row(run, value(run), **({"reused_from": p.lr_record} if reused else {})))


def _rte_grad_second_look(run):
  return (run.task, run.method) in (("rte", "scl_grad"), ("rte", "scl")) and int(
      dict(run.settings)["seed"]) >= p.look_seeds[1][0]


@pytest.fixture(scope="module")
def complete():
  return _complete(withhold=_rte_grad_second_look)


def _cells(tbl: str) -> list[list[str]]:
  return [[c.strip() for c in line.strip("|").split("|")] for line in tbl.splitlines()
          if line.startswith("|") and not line.startswith("|---")][1:]


def test_verdicts_of_a_complete_stage1(complete):
  ctx = stage_tables.context(p, complete)
  got = {(c.task, c.method, c.baseline): (v.word, v.look) for c, v in ctx.d.verdicts.items()}
  assert got == EXPECTED
  rows = {(r[0], r[1]): r for r in _cells(stage_tables.stage1_table(ctx))}
  assert len(rows) == len(p.comparisons)
  rte = rows[("RTE", "ACL (Embed+Grad) − CE")]
  assert rte[2] == "lower end > -2" and rte[3] == "3" and rte[4] == "+1.10"
  d = [1.0, 1.2, 1.1]
  half = stats.t.ppf(0.5 + p.decide_level / 2, 2) * np.std(d, ddof=1) / math.sqrt(3)
  assert rte[5] == f"[{1.1 - half:+.2f}, {1.1 + half:+.2f}]" and rte[7:10] == ["3/3", "1", "beats"]
  mde = (stats.t.ppf(0.5 + p.decide_level / 2, 2) + stats.t.ppf(p.power, 2)) * np.std(
      d, ddof=1) / math.sqrt(3)
  assert rte[10] == f"{mde:.2f}"
  grad = rows[("RTE", "CE+SCL+Grad − CE+SCL")]
  assert grad[2] == "lower end > 0"
  assert grad[9] == "undecided (second look: 0 of 4 runs recorded)"
  sst = rows[("SST-2", "CE+SCL − CE")]
  assert sst[3] == "5" and sst[8] == "2" and sst[9] == f"inconclusive: any effect lies in {sst[5]}"
  assert rows[("CoLA", "ACL (Embed+Grad) − CE+SCL")][9] == "worse"
  claims = summary.claims_table(ctx)
  acl = next(r for r in _cells(claims) if r[0] == p.claims["acl"])
  assert acl[2].startswith("RTE vs CE +1.10 [") and "(3/3) beats; RTE vs CE+SCL" in acl[2]
  assert acl[3] == "beats 3, matches or beats 3, within the margin, lower 1, worse 1"
  assert acl[4] == ("RTE 3 epochs, lr 5e-5; MRPC 3 epochs, lr 2e-5; CoLA 3 epochs, lr 1e-4; "
                    "SST-2 2 epochs, lr 5e-5")
  gloss = next(r for r in _cells(claims) if r[0] == p.claims["gloss"])
  assert "R52 pending: stage 2 (0 of 6 runs recorded)" in gloss[2]
  assert "20NG pending: stage 3 (0 of 6 runs recorded)" in gloss[2]
  exits = next(r for r in _cells(claims) if r[0] == p.claims["exits"])
  assert exits[1:4] == ["largest gains at shallow exits",
                        "pending: stage 2 (0 of 9 runs recorded)", "pending: stage 2"]
  # a recorded stage-2 run moves the count: the cell is read from the records
  st = ctx.d.tasks["sst2"]
  run = planner.method_run(p, p.stage_record[2], st, "jt", 0, MULTI_EXIT_EXTRA)
  more = dict(complete, **{p.stage_record[2]: [_row(run, 90.0)]})
  exits = next(r for r in _cells(summary.claims_table(stage_tables.context(p, more)))
               if r[0] == p.claims["exits"])
  assert exits[2] == "pending: stage 2 (1 of 9 runs recorded)"
  assert "not testable here" in claims and "pending: no `cost` record yet" in claims


def test_lr_budget_anchor_and_score_tables(complete):
  ctx = stage_tables.context(p, complete)
  lr = {r[0]: r for r in _cells(stage_tables.lr_table(ctx))}
  assert lr["RTE"][1:] == ["69.00", "69.30", "—", "5e-5", "tie (within 0.5): 5e-5"]
  assert lr["MRPC"][4:] == ["2e-5", "2e-5 better by 1.50"]
  assert lr["CoLA"][3:] == ["46.00", "1e-4", "tie (within 1): 5e-5; CE missed its anchor: 1e-4 "
                            "better by more than 1, taken"]
  assert "R52, Ohsumed, 20NG take R8's rate." in stage_tables.lr_table(ctx)
  budget = {r[0]: r for r in _cells(stage_tables.budget_table(ctx))}
  assert budget["SST-2"][1:] == ["5e-5", "1", "91.60", "94.00", "+2.40",
                                 "doubles to 2 (gain > 1.5)"]
  assert budget["CoLA"][-2:] == ["+0.50", "keeps 3 (gain ≤ 3)"]
  assert budget["R52"][1:3] == ["5e-5", "3"]  # a later stage's own check, at R8's rate
  assert budget["R52"][-1] == "waits on the budget check"
  assert papers_report.anchors_table(ctx).startswith("*pending*: no seed of `anchor_mr_hf`")
  glue = {r[0]: r for r in _cells(papers_report.glue_anchor(ctx))}
  assert glue["CoLA"][1:4] == ["1e-4", "46.00", "46.30 ± 0.30 (n=3)"]
  assert glue["CoLA"][5:] == ["-1.50", "3", "yes at 5e-5 (40.50): CE at 1e-4 tried"]
  assert glue["RTE"][-1] == "no"
  scores = {r[0]: r[1:] for r in _cells(stage_tables.stage1_scores_table(ctx))}
  assert scores["CE"][0] == "69.60 ± 0.30 (n=3)" and scores["CE"][3].endswith("(n=5)")
  assert scores["ACL (Embed+Grad)"][0] == "70.70 ± 0.36 (n=3)"
  assert scores["CE+G-Loss (sigma fixed)"][:3] == ["", "", ""]  # no G-Loss arm on RTE-CoLA
  gate = {tuple(r[:4]): r[4:] for r in _cells(papers_report.gate_table(ctx))}
  assert gate["RTE", "ACL (Embed+Grad)", "encoder", f"`{p.gate_record}`"] == ["0", "50.0%"]
  cola = [r for r in complete[S1] if (r["task"], r["method"]) == ("cola", "scl_grad")]
  seeds, fracs = gate["CoLA", "CE+SCL+Grad", "all", f"`{S1}`"]
  assert seeds == ", ".join(str(r["seed"]) for r in sorted(cola, key=lambda r: r["seed"]))
  assert fracs == ", ".join(["99.5%"] * len(cola))
  assert sum(len(s.split(", ")) for s, _ in gate.values()) == len(
      [r for r in complete[S1] if r["method"] in papers_report.GATED]) + len(p.diagnostics)


def test_mr_anchor_reads_agreement_and_equivalence():
  def rows(ours, ref):
    return [{"seed": s, "framework": f, "task": "mr", "latest": {"test": {"accuracy": v / 100}}}
            for f, vs in (("jax", ours), ("torch", ref)) for s, v in enumerate(vs)]
  near = _cells(papers_report.mr_anchor(p, rows([82.0, 82.2, 82.1], [82.1, 82.2, 82.0])))[0]
  # the registered rule (equivalence within ±1) leads; containing 0 is description
  assert near[4] == "-0.10, +0.00, +0.10" and near[6] == "equivalent within ±1; " \
      "no difference detected (the interval contains 0)"
  wide = _cells(papers_report.mr_anchor(p, rows([82.0, 83.0, 81.0], [82.5, 82.0, 82.0])))[0]
  assert wide[6].startswith("not shown equivalent within ±1") and "contains 0" in wide[6]
  off = _cells(papers_report.mr_anchor(p, rows([80.0, 80.1, 80.2], [82.0, 82.2, 82.1])))[0]
  assert off[6].endswith("differ (the interval excludes 0)")
  assert papers_report.mr_anchor(p, []).startswith("*pending*: ")


def test_stage_hours_count_a_reused_run_once(complete):
  ctx = stage_tables.context(p, complete)
  own = [r for name in (p.lr_record, p.budget_record, p.gate_record, S1)
         for r in complete.get(name, [])
         if not r.get("reused_from")]
  stage = {r[0]: r for r in _cells(summary.stage_hours_table(ctx))}
  assert stage["1"][1] == str(len(own)) and len(own) < sum(
      len(complete.get(n, [])) for n in (p.lr_record, p.budget_record, p.gate_record, S1))
  assert stage["1"][2] == f"{sum(r['seconds'] for r in own) / 3600:.1f}"
  assert stage["1"][4] == "Test CPU, 2 cores" and stage["2"][1:3] == ["0", "0.0"]
  assert re.fullmatch(r"\d+ runs, [\d.]+ h \(first looks\); \d+ runs, [\d.]+ h \(every second "
                      r"look\)", stage["1"][3])


def test_stage_hours_name_each_cpu_by_its_vector_isa():
  """The table cuts a machine's ISA list to what tells the kinds apart (AMX, then AVX-512 or
  AVX2); a machine named without family and model stays as it is."""
  full = "(family 6, model 207; AMX, AVX-512, AVX512-BF16, AVX512-VNNI, AVX2, FMA)"
  assert summary._vector_isa(f"GPU, host Xeon {full}, 16 cores") == \
      "GPU, host Xeon (family 6, model 207; AMX, AVX-512), 16 cores"
  assert summary._vector_isa("AMD EPYC (family 25, model 1; AVX2, FMA), 2 cores") == \
      "AMD EPYC (family 25, model 1; AVX2), 2 cores"
  for kept in ("AMD EPYC, 2 cores", "CPU (family 6, model 1; FMA), 2 cores"):
    assert summary._vector_isa(kept) == kept


def test_pending_text_where_records_are_missing(complete):
  empty = stage_tables.context(p, {})
  for name in ("lr", "budget", "stage1", "stage1_scores", "gate"):
    text = papers_report.TABLES[name](empty)
    assert text.startswith("*pending*: ") and text.count("\n") == 1, name
    assert "Awaited: RTE, MRPC, CoLA, SST-2, MR, R8: the lr grid." in text, name
  assert "(0 of 6 runs recorded)" in summary.claims_table(empty)
  deviations = _cells(stage_tables.deviations_table(empty))
  assert len(deviations) == len(p.deviations) > 0
  for (what, why), row in zip(p.deviations, deviations):
    assert row == [what, why]  # in the protocol's order, each with its reason
  partial = {k: [r for r in v if not (r["task"] == "r8" and r["method"] == "gloss")]
             for k, v in complete.items()}
  ctx = stage_tables.context(p, partial)
  assert "R8 pending (3 of 6 runs recorded)" in summary.claims_table(ctx)
  r8 = next(r for r in _cells(stage_tables.stage1_table(ctx)) if r[0] == "R8")
  assert r8[9] == "pending (3 of 6 runs recorded)"
  early = {p.lr_record: [r for r in complete[p.lr_record] if r["task"] == "rte"]}
  text = stage_tables.budget_table(stage_tables.context(p, early))
  assert text.startswith("*pending*: no budget-check run") and "RTE: the budget check" in text


def _cost_rows(cpu: str, gloss: list[float], scl: list[float], term: list[float]):
  """A cost record's rows, as benchmarks/cost_claims.py writes them, for one CPU."""
  kind = cpu.split(" ")[0]
  return [records.make_row(
      sweep="cost", run=f"task=mr,method={m},cpu={kind}", task="mr", method=m, seed=0,
      overrides={"cpu": kind}, budget={"batch_size": 32, "max_length": 64},
      step_seconds=steps, **({"term_seconds": term} if m == "gloss" else {}),
      timed_on=f"{cpu}, 2 cores", code=["x"]) for m, steps in (("gloss", gloss), ("scl", scl))]


def test_cost_claims_read_their_record_per_cpu():
  """Each CPU's rows give the claims their own verdict: the share from the G-Loss term over
  G-Loss's step, the ratio from G-Loss's step over SCL's, never the other way round."""
  share, ratio = (f"| {p.claims[k]} |" for k in ("gloss_share", "gloss_epoch"))
  pending = summary.claims_table(stage_tables.context(p, {}))
  for claim in (share, ratio):
    row = next(line for line in pending.splitlines() if line.startswith(claim))
    assert "pending: no `cost` record yet" in row
  rows = (_cost_rows("Zen (family 25, model 1; AVX2, FMA)", [0.50, 0.52, 0.48],
                     [0.50, 0.52, 0.48], [0.0005, 0.00052, 0.00048])
          + _cost_rows("Xeon (family 6, model 143; AMX, AVX-512, AVX2)", [0.80, 0.82, 0.78],
                       [1.00, 1.025, 0.975], [0.04, 0.041, 0.039]))
  cells = {r[0]: r for r in _cells(summary.claims_table(stage_tables.context(p, {"cost": rows})))}
  got = cells[p.claims["gloss_share"]]
  assert got[2] == ("5.00% [5.00, 5.00] of the step (3 rounds; Xeon (family 6, model 143; "
                    "AMX, AVX-512)): fails; 0.10% [0.10, 0.10] of the step (3 rounds; Zen "
                    "(family 25, model 1; AVX2)): holds")  # the CPUs in name order
  assert (got[3], got[4]) == ("fails 1, holds 1", "MR B32 L64, train step")
  got = cells[p.claims["gloss_epoch"]]
  assert got[2].startswith("0.800x [0.800, 0.800] (3 rounds; Xeon") and \
      got[2].endswith("1.000x [1.000, 1.000] (3 rounds; Zen (family 25, model 1; AVX2)): fails")
  assert got[3] == "holds 1, fails 1"


def test_results_stay_under_30kb_when_stage1_is_complete():
  """Every comparison at its second look: the most rows stage 1 can record."""
  sign = {"scl": 1, "acl": -1, "scl_grad": 2, "gloss": -2}
  noisy = {(t, m): [f * x for x in (3.0, -3.0, 2.0, -2.0, 1.0)] for t in p.tasks
           for m, f in sign.items()}
  rs = _complete(lambda run: _value(run, noisy))
  d = planner.decisions(p, rs)
  assert d.verdicts and all(v.look == 2 for v in d.verdicts.values())
  # the committed pilots, anchors, gate angles and the rest; not the later stages' rows,
  # trained at the committed stage 1's decisions, which the synthetic one need not share
  later_records = {p.stage_record[s] for s in p.stages if s > 1}
  rs.update({k: v for k, v in records.read_all().items()
             if k not in rs and k not in later_records})
  text, changed = papers_report.render(p, open(RESULTS).read(), rs)
  _, detail = papers_report.render(p, open(papers_report.REPORTS[1]).read(), rs)
  assert "stage1_scores" in changed and {"stage1", "gate"} <= set(detail)
  assert len(text.encode()) < 30 * 1024, len(text.encode())


def _later_row(run: planner.Run, value: float) -> dict:
  """A stage-2/3 row: multi-exit runs with per-exit scores and an early-exit curve."""
  row = _row(run, value)
  if run.early_exit:
    dev = row["evals"][-1]["dev"]
    for m in range(1, 7):
      dev[f"exit_{m}/accuracy"] = (value - 2.0 * (6 - m)) / 100
    row["early_exit"] = {"entropy": [
        {"mean_layers": float(m), "metric": dev[f"exit_{m}/accuracy"],
         "full_metric": dev["exit_6/accuracy"], "num_layers": 6} for m in (2, 4)]}
  return row


def _complete_all(value) -> dict[str, list[dict]]:
  """Stages 1, 2 and 3 recorded whole, every later rule taken to its second look."""
  rs = _complete(value)
  for stage in (2, 3):
    while True:
      ready, _ = planner.later_stage_ready(p, stage, rs)
      if not ready:
        break
      for run in ready:
        rs.setdefault(run.sweep, []).append(_later_row(run, value(run)))
  return rs


def _every_stage_value(run: planner.Run) -> float:
  """A run's score when every stage is recorded: the tasks new in later stages at 90 in
  their gates, each method off CE by a seed-dependent wobble."""
  seed = int(dict(run.settings)["seed"])
  if run.sweep in (p.lr_record, p.budget_record) and run.task not in LR_SCORES:
    return 90.0
  wobble = 3.0 * ((-1) ** seed) * (1 + seed % 3) * (0 if run.method == "ce" else 1)
  return (_value(run) if run.task in LR_SCORES else 90.0 + 0.3 * seed) + wobble


def test_results_stay_under_30kb_when_every_stage_is_complete():
  """Every stage recorded, every comparison and rule at its second look."""
  rs = _complete_all(_every_stage_value)
  assert rs.get(p.stage_record[3]), "stage 3 was not released"
  rs.update({k: v for k, v in records.read_all().items() if k not in rs})
  text, changed = papers_report.render(p, open(RESULTS).read(), rs)
  assert "claims" in changed and "pending: stage" not in text.split("## Protocol")[0]
  others = next(line for line in text.splitlines() if line.startswith(f"| {p.claims['others']}"))
  assert "RTE CE+ACL-Embed " in others and "MR CE+SCL " in others  # each names its method
  gloss = next(line for line in text.splitlines() if line.startswith(f"| {p.claims['gloss']}"))
  budgets = gloss.split(" | ")[-1]  # stage 1's tasks' budgets, then the later stages'
  assert all(f"{t} 3 epochs, lr" in budgets for t in ("MR", "R8", "R52", "Ohsumed", "20NG"))
  stage3 = _cells(papers_report.TABLES["stage3_comparisons"](stage_tables.context(p, rs)))
  assert len(stage3) == sum(isinstance(r, proto.Comparison) for r in p.rules[3])
  assert all(r[3] == "5" and r[8] == "2" and r[9].split(":")[0] in proto.VERDICT_WORDS
             for r in stage3)  # every one at its second look, with a verdict
  # the Holm family is whole: every registered comparison has its final verdict
  assert len(summary.holm_tests(stage_tables.context(p, rs))) == summary.holm_registered(p)
  assert f"among all {summary.holm_registered(p)} registered comparisons," in text
  assert len(text.encode()) < 30 * 1024, len(text.encode())


# ---- the pilots and the command line ------------------------------------------------------

def _pilot_rows(sweep, task, method, values, **overrides):
  """Pilot-like rows: one per seed, `values` the test accuracy in points."""
  return [{"sweep": sweep, "run": f"task={task},method={method},seed={s}", "task": task,
           "method": method, "seed": s, "overrides": dict(overrides), "budget": {},
           "evals": [{"step": 1, "dev": {"accuracy": v / 100}}],
           "final": {"test": {"accuracy": v / 100}}} for s, v in enumerate(values)]


def test_pilot_paired_differences_and_t_interval():
  ce = _pilot_rows("p", "mr", "ce", [80.0, 81.0, 82.0, 80.5, 81.5])
  good = _pilot_rows("p", "mr", "gloss", [80.6, 81.4, 82.7, 81.0, 82.1])
  mixed = _pilot_rows("p", "mr", "scl", [81.0, 80.0, 83.0, 80.5, 81.0])
  d = tables.paired_diffs(good, ce, _pilot)
  np.testing.assert_allclose(d, [0.6, 0.4, 0.7, 0.5, 0.6], atol=1e-9)
  half = stats.t.ppf(0.975, 4) * np.std(d, ddof=1) / math.sqrt(5)
  assert tables.fmt_paired(d) == f"+0.56 [{0.56 - half:+.2f}, {0.56 + half:+.2f}] (5/5)"
  # a tie: not ahead
  assert tables.fmt_paired(tables.paired_diffs(mixed, ce, _pilot)).endswith("(2/5)")
  assert tables.fmt_paired(d[:1]) == "+0.60 (1/1)"
  acl = _pilot_rows("p", "mr", "acl", [81.0, 82.0, 90.0, 1.0, 1.0])[:3]  # seed 2: no CE partner
  assert tables.paired_diffs(acl, ce[:2], _pilot) == pytest.approx([1.0, 1.0])
  lam = _pilot_rows("p", "mr", "scl", [70.0], **{"loss.lam": "0.9"}) + _pilot_rows(
      "p", "mr", "scl", [75.0], **{"loss.lam": "0.1"})
  assert [r["overrides"] for r in tables.select(lam, "mr", "scl", loss__lam="0.1")] == [
      {"loss.lam": "0.1"}]
  assert tables.select(lam, "mr", "scl", loss__combine=None) == lam  # the field is absent


def test_pilots_report_labels_every_pilot():
  rs = records.read_all()
  text = papers_pilots.pilots_md(p, rs)
  for name in p.pilots:
    summary = papers_pilots.PILOT_SUMMARIES.get(name)
    if summary:  # the summary committed then, shown whole
      with open(os.path.join(helpers.REPO, summary[1])) as f:
        assert f"`{summary[1]}`" in text and f.read() in text
    else:
      assert f"`results/records/{name}.jsonl`" in text
  heads = re.findall(r"^## .*$", text, re.M)
  assert len(heads) == len(p.pilots)
  assert all(h.endswith("(short-budget pilot; decides nothing)") for h in heads)
  for _, name, _, _ in papers_pilots.figure_specs(p, rs):
    assert f"](figures/{name})" in text
    assert os.path.isfile(os.path.join(papers_pilots.FIGURES, name)), name


def test_report_check_finds_stale_tables(tmp_path):
  rec = tmp_path / "records"
  rec.mkdir()
  doc, pilots = tmp_path / "R.md", tmp_path / "PILOTS.md"
  doc.write_text("x\n<!-- table: lr -->\n| old |\n<!-- /table -->\n")
  args = ["--file", str(doc), "--records", str(rec), "--pilots", str(pilots), "--no_figures"]
  assert report.main(args + ["--check"]) == 1
  assert report.main(args) == 0
  assert "<!-- table: lr -->\n*pending*: no CE run of the lr grid" in doc.read_text()
  assert pilots.read_text().startswith("# Pilots")
  assert report.main(args + ["--check"]) == 0
  run = planner.lr_run(p, "rte", "2e-5")
  (rec / f"{p.lr_record}.jsonl").write_text(json.dumps(_row(run, 60.0)) + "\n")
  assert report.main(args + ["--check"]) == 1
  assert report.main(args) == 0 and "| RTE | 60.00 | — |" in doc.read_text()
  doc.write_text("<!-- table: nosuch -->\n<!-- /table -->\n")
  with pytest.raises(SystemExit, match="block .nosuch. that no table builds"):
    report.main(args + ["--check"])


def test_row_from_a_run_folder(tmp_path):
  wd = tmp_path / "run"
  wd.mkdir()
  (wd / "config.json").write_text(json.dumps({"num_steps": 0, "num_epochs": 3, "batch_size": 32,
                                              "task": {"max_length": 64},
                                              "optim": {"lr": 2e-5}}))
  (wd / "metrics.jsonl").write_text(
      json.dumps({"step": 10, "kind": "train", "loss": 1.0}) + "\n"
      + json.dumps({"step": 78, "kind": "dev", "accuracy": 0.6, "num_examples": 277.0}) + "\n"
      + '{"step": 156, "kind": "dev", "accur')  # cut by a crash: skipped
  (wd / "results.json").write_text(json.dumps(
      {"checkpoint_step": 78, "dev": {"accuracy": 0.6, "num_examples": 277},
       "train": {"final_step": 234, "best_step": 78, "early_stopped_at": 234,
                 "code_versions": ["r1"]}}))
  (wd / "results_latest.json").write_text(json.dumps(
      {"checkpoint_step": 234, "dev": {"accuracy": 0.55}}))
  row = records.row_from_run(str(wd), "glue", {"task": "rte", "method": "ce", "seed": "2"},
                             "configs/glue.py:rte,ce", ["num_epochs=3"])
  assert row["run"] == "task=rte,method=ce,seed=2" and row["seed"] == 2
  assert row["budget"] == {"num_steps": 0, "num_epochs": 3, "batch_size": 32, "max_length": 64,
                           "lr": 2e-5, "steps_run": 234, "early_stopped_at": 234}
  assert row["evals"] == [{"step": 78, "dev": {"accuracy": 0.6}}]
  assert row["latest"] == {"checkpoint_step": 234, "dev": {"accuracy": 0.55}}
  assert row["code"] == ["r1"] and "code_versions" not in row["train"]
  (wd / "results.json").write_text(json.dumps({"dev": {"accuracy": 0.6}}))  # eval.py only
  with pytest.raises(ValueError, match="not a finished run"):
    records.row_from_run(str(wd), "glue", {"task": "rte", "method": "ce", "seed": "2"})
  bad = tmp_path / "bad.jsonl"
  bad.write_text('{"run": "a"}\n{oops\n')
  with pytest.raises(ValueError, match=r"bad.jsonl:2 is not a JSON row"):
    records.read(str(bad))


def test_glue_hf_anchor_pairs_a_torch_run_with_our_recorded_ce(complete):
  def hf(task, lr, epochs, value, framework="torch"):
    return {"sweep": p.glue_hf_anchor[0], "run": f"task={task},framework={framework}",
            "task": task, "framework": framework, "seed": 0,
            "method": "ce", "budget": {"lr": lr, "num_epochs": epochs},
            "evals": [{"step": None, "dev": {p.tasks[task].metric: value / 100}}]}
  rs = {**complete, p.glue_hf_anchor[0]: [
      hf("cola", 1e-4, 3, 41.0),  # ours: the lr grid's CoLA run at 1e-4 (46.00)
      hf("sst2", 5e-5, 2, 92.0),  # ours: the budget check's SST-2 run at twice 1 epoch (94.00)
      hf("rte", 5e-5, 3, 60.0), hf("rte", 5e-5, 3, 61.5, "jax"),  # both sides benchmarked
      hf("mrpc", 1e-4, 3, 80.0)]}  # MRPC never ran CE at 1e-4: nothing to pair
  rows = _cells(papers_report.glue_hf_anchor(stage_tables.context(p, rs)))
  assert rows == [["RTE", "5e-5", "3", "0", "61.50", "60.00", "+1.50", "this benchmark"],
                  ["CoLA", "1e-4", "3", "0", "46.00", "41.00", "+5.00", f"`{p.lr_record}` record"],
                  ["SST-2", "5e-5", "2", "0", "94.00", "92.00", "+2.00",
                   f"`{p.budget_record}` record"]]
  assert papers_report.glue_hf_anchor(stage_tables.context(p, complete)).startswith("*pending*")


def test_gate_angles_table_reads_each_partition():
  steps = [{"acl": 80.0, "acl_encoder": 95.0, "acl_top": 70.0, "acl_classifier": 40.0,
            "scl": 91.0, "scl_encoder": 92.0, "scl_top": 89.0,
            "ce_classifier_share": 0.5, "acl_classifier_share": 0.2},
           {"acl": 84.0, "acl_encoder": 85.0, "acl_top": 72.0, "acl_classifier": 50.0,
            "scl": 89.0, "scl_encoder": 94.0, "scl_top": 87.0,
            "ce_classifier_share": 0.3, "acl_classifier_share": 0.4}]
  row = {"sweep": papers_report.GATE_ANGLES, "run": "task=rte,method=acl,seed=0", "task": "rte",
         "method": "acl", "seed": 0, "steps": steps,
         "budget": {"num_steps": 2, "batch_size": 32, "max_length": 128, "lr": 1e-4}}
  ctx = stage_tables.context(p, {papers_report.GATE_ANGLES: [row]})
  got = _cells(papers_report.gate_angles_table(ctx))
  assert got[0] == ["RTE", "ACL (Embed+Grad)", "CE vs ACL-Embed", "82.0° (0%)", "90.0° (50%)",
                    "71.0° (0%)", "45.0° (0%)", "CE 40%, ACL-Embed 30%"]
  assert got[1][:6] == ["RTE", "ACL (Embed+Grad)", "CE vs SCL", "90.0° (50%)", "93.0° (100%)",
                        "88.0° (0%)"]
  assert "2 steps, B32, L128, lr 0.0001, seed 0" in papers_report.gate_angles_table(ctx)
  assert papers_report.gate_angles_table(stage_tables.context(p, {})).startswith("*pending*")


def _low_mrpc(run):
  """MRPC 5 points lower everywhere: CE at 2e-5 (84.50) misses the published 88.9 by more
  than 1, and CE at 1e-4 (84.00) does not replace it."""
  if run.sweep == p.lr_record and run.task == "mrpc" and _lr_of(run) == p.lr_high:
    return 84.0
  return _value(run) - (5.0 if run.task == "mrpc" else 0.0)


def test_a_task_that_misses_its_anchor_is_read_only_with_its_hf_run():
  rs = _complete(value=_low_mrpc,
                 withhold=lambda r: _rte_grad_second_look(r) or r.framework == "torch")
  ctx = stage_tables.context(p, rs)
  assert set(ctx.d.withheld) == {"mrpc"}
  # the planner asks for the HF run the reading waits on, as a run of the protocol
  assert [r.name for r in ctx.d.ready if r.sweep == p.glue_hf_anchor[0]] == [
      "task=mrpc,method=ce,framework=torch,seed=0"]
  assert "CE at lr 2e-5 (84.50) misses the published 88.9 by more than 1" in (
      ctx.d.withheld["mrpc"])
  rows = {(r[0], r[1]): r for r in _cells(stage_tables.stage1_table(ctx))}
  assert rows[("MRPC", "ACL (Embed+Grad) − CE")][9].startswith("withheld: CE at lr 2e-5")
  assert rows[("RTE", "ACL (Embed+Grad) − CE")][9] == "beats"
  assert "MRPC vs CE withheld: " in summary.claims_table(ctx)
  hf = {"sweep": p.glue_hf_anchor[0], "run": "task=mrpc,framework=torch", "task": "mrpc",
        "framework": "torch", "seed": 0, "method": "ce",
        "budget": {"lr": 2e-5, "num_epochs": p.tasks["mrpc"].epochs},
        "evals": [{"step": None, "dev": {"f1": 0.83}}]}
  for wrong in ({"lr": 5e-5}, {"num_epochs": 2 * p.tasks["mrpc"].epochs}):
    other = dict(hf, budget={**hf["budget"], **wrong})
    assert "mrpc" in stage_tables.context(p, {**rs, p.glue_hf_anchor[0]: [other]}).d.withheld
  ctx = stage_tables.context(p, {**rs, p.glue_hf_anchor[0]: [hf]})
  assert not ctx.d.withheld
  rows = {(r[0], r[1]): r for r in _cells(stage_tables.stage1_table(ctx))}
  assert rows[("MRPC", "ACL (Embed+Grad) − CE")][9] == "matches or beats"


def test_a_row_trained_at_another_lr_is_refused_not_paired(complete):
  rows = [dict(r) for r in complete[S1]]
  i = next(i for i, r in enumerate(rows) if r["task"] == "rte" and r["method"] == "acl")
  rows[i]["budget"] = {**rows[i]["budget"], "lr": 2e-5}
  with pytest.raises(ValueError, match=r"task=rte,method=acl,seed=\d trained at lr 2e-05, 3 "
                     r"epochs, but rte's decisions are lr 5e-5, 3 epochs; move the row out"):
    planner.decisions(p, {**complete, S1: rows})


def test_a_later_stage_row_trained_at_another_budget_is_refused_not_read():
  """Stage 2's rows are checked against their task's lr and epochs as stage 1's are: the
  rules' lookups name runs without either."""
  rs = _complete_all(_every_stage_value)
  rows = [dict(r) for r in rs[p.stage_record[2]]]
  i = next(i for i, r in enumerate(rows) if r["task"] == "sst2" and r["method"] == "acl_cl")
  rows[i]["budget"] = {**rows[i]["budget"], "num_epochs": rows[i]["budget"]["num_epochs"] + 1}
  bad = {**rs, p.stage_record[2]: rows}
  with pytest.raises(ValueError, match=fr"{rows[i]['run']} trained at lr .* but sst2's "
                     r"decisions are .*; move the row out"):
    stage_tables.context(p, bad)
  with pytest.raises(ValueError, match="move the row out"):
    planner.later_stage_ready(p, 3, bad)
  stage_tables.context(p, rs)  # as recorded: read


def test_a_float32_rounded_lr_is_the_same_rate(complete):
  rows = [dict(r) for r in complete[S1]]
  i = next(i for i, r in enumerate(rows) if r["task"] == "rte" and r["method"] == "acl")
  lr32 = float(np.float32(5e-5))  # 4.999999873689376e-05: what a float32 config stores
  assert lr32 != 5e-5
  rows[i]["budget"] = {**rows[i]["budget"], "lr": lr32}
  assert (planner.decisions(p, {**complete, S1: rows}).verdicts
          == planner.decisions(p, complete).verdicts)
  assert papers_report._lr_name(p, lr32) == "5e-5" and papers_report._lr_name(p, 3e-5) is None
  assert not proto.same_lr(None, 5e-5) and not proto.same_lr("2e-5", "5e-5")


def test_later_stages_wait_on_the_stage_before():
  part = _complete(withhold=_rte_grad_second_look)  # RTE's second look still to train
  left = len(planner.decisions(p, part).ready)
  ready, waiting = planner.later_stage_ready(p, 2, part)
  assert left and not ready
  assert waiting == {t: f"stage 1 to finish ({left} runs ready there now, 0 tasks waiting on "
                        "its gates)" for t in {a.task for a in p.arms[2]}}
  ready, waiting = planner.later_stage_ready(p, 3, part)  # stage 2 waits, so stage 3 does
  n2 = len({a.task for a in p.arms[2]})
  assert not ready and set(waiting.values()) == {
      f"stage 2 to finish (0 runs ready there now, {n2} tasks waiting on its gates)"}
  assert set(waiting) == {a.task for a in p.arms[3]}


def test_later_stages_wait_on_each_tasks_lr_and_budget():
  complete = _complete()
  assert not planner.decisions(p, complete).ready
  ready, waiting = planner.later_stage_ready(p, 2, complete)
  r52 = [r for r in ready if r.task == "r52"]
  # R52 takes R8's rate (5e-5), then its own budget check, before any of its stage-2 runs
  assert [(r.sweep, r.name) for r in r52] == [
      (p.lr_record, planner.lr_run(p, "r52", "5e-5").name),
      (p.budget_record, planner.budget_run(p, "r52", "5e-5").name)]
  assert waiting == {"r52": "the budget check"}
  assert {r.task for r in ready} == {"r52", "sst2", "mr", "rte", "mrpc", "cola"} & {
      a.task for a in p.arms[2]}
  sst2 = [r for r in ready if r.task == "sst2"]
  assert sst2 and all(r.epochs == 2 for r in sst2)  # SST-2 doubled in stage 1
  gates = {p.lr_record: [_row(r52[0], 90.0)], p.budget_record: [_row(r52[1], 90.5)]}
  rs = {k: complete.get(k, []) + gates.get(k, []) for k in {*complete, *gates}}
  ready, waiting = planner.later_stage_ready(p, 2, rs)
  assert not waiting and {r.epochs for r in ready if r.task == "r52"} == {p.tasks["r52"].epochs}
  assert all(r.sweep == p.stage_record[2] for r in ready)
  # stage 3 waits on stage 2, R52's runs included
  assert not planner.later_stage_ready(p, 3, rs)[0]


def test_every_read_task_that_misses_its_anchor_has_its_gap_explained():
  """RESULTS.md explains the gap of each task whose verdicts the missed anchor no longer
  withholds (its HF PyTorch run is recorded): a bullet under "Gaps explained"."""
  text = open(papers_report.REPORTS[1]).read()
  gaps = text.split("**Gaps explained.**", 1)[1].split("\n## ", 1)[0]
  d = planner.decisions(p, records.read_all())
  for task, st in d.tasks.items():
    score = planner.picked_score(p, st)
    if task in d.withheld or score is None or not p.misses_anchor(task, score):
      continue
    assert f"- *{p.tasks[task].label}.* CE at the picked lr ({st.lr})" in gaps, task


def test_glue_hf_anchor_rows_name_their_epochs(tmp_path):
  """Two HF runs at one lr and different budgets are two rows, not one skipped."""
  from scripts import import_vs_hf  # pylint: disable=import-outside-toplevel
  run = {"task": "sst2", "framework": "torch", "seed": 0, "wall_s": 1.0, "max_length": 64,
         "final_dev": {"accuracy": 0.9}}
  data = {"settings": {"lr": 5e-5, "batch": 32}, "machine": {"cpu_model": "x", "git": "abc"},
          "runs": [dict(run, epochs=1), dict(run, epochs=2)]}
  path = tmp_path / "vs_hf.json"
  path.write_text(json.dumps(data))
  rows = import_vs_hf.rows_of(str(path))
  assert [r["run"] for r in rows] == [
      "task=sst2,framework=torch,optim.lr=5e-05,num_epochs=1,seed=0",
      "task=sst2,framework=torch,optim.lr=5e-05,num_epochs=2,seed=0"]
  for r in rows:
    assert {k: v for k, v in records.parse_name(r["run"]).items()
            if k not in records.OWN} == r["overrides"]


def test_no_two_runs_share_one_timing():
  """Two different runs (other params) with the same wall and CPU seconds is a copied timing,
  not a measurement: such a row keeps no seconds (it counts as untimed, and adds nothing to a
  stage's machine-hours), marked timing_incomplete or not."""
  seen = {}
  for rows in records.read_all().values():
    for r in rows:
      if r.get("reused_from") or "cpu_seconds" not in r:
        continue
      key = (r["seconds"], r["cpu_seconds"])
      params = r.get("train", {}).get("params_sha256")
      other = seen.setdefault(key, (r["run"], params))
      assert other[1] == params, f"{r['run']} has the timing of {other[0]}"


def test_a_row_takes_only_its_own_folders_timing(tmp_path):
  """A sweep_time.json written for another run (a copied folder) leaves the row untimed; a
  folder whose training was not timed here records no CPU seconds."""
  wd = tmp_path / "task=r8,method=ce,seed=3"
  wd.mkdir()
  (wd / "results.json").write_text(json.dumps({"train": {}, "checkpoint_step": 1}))
  timing.add_time(str(wd), 10.0, attempt=True, cpu=9.0)
  row = records.row_from_run(str(wd), "s", {"task": "r8", "method": "ce", "seed": "3"})
  assert (row["seconds"], row["cpu_seconds"]) == (10.0, 9.0) and row["time_spans"]
  copy = tmp_path / "task=r8,method=ce,seed=4"
  copy.mkdir()
  for name in ("results.json", records.RUN_TIME):
    (copy / name).write_text((wd / name).read_text())
  row = records.row_from_run(str(copy), "s", {"task": "r8", "method": "ce", "seed": "4"})
  assert "seconds" not in row and "cpu_seconds" not in row
  evals_only = tmp_path / "task=r8,method=ce,seed=5"
  evals_only.mkdir()
  (evals_only / "results.json").write_text((wd / "results.json").read_text())
  timing.add_time(str(evals_only), 5.0, cpu=4.0)  # an eval.py step, no training attempt
  row = records.row_from_run(str(evals_only), "s", {"task": "r8", "method": "ce", "seed": "5"})
  assert row["seconds"] == 5.0 and "cpu_seconds" not in row


def test_the_report_refuses_a_records_folder_that_does_not_exist(tmp_path):
  """A misspelt --records is named, not read as a study with no run."""
  doc = tmp_path / "REPORT.md"
  doc.write_text("<!-- table: claims -->\n<!-- /table -->\n")
  with pytest.raises(ValueError, match=r"--records .*recrods: no such folder"):
    report.main(["--protocol", "studies/example_csv.py", "--records",
                 str(tmp_path / "recrods"), "--file", str(doc)])
  assert doc.read_text() == "<!-- table: claims -->\n<!-- /table -->\n"


def test_a_claim_of_one_comparison_reads_its_verdict_not_a_count():
  """A study whose claim has one comparison: its verdict column is that comparison's word
  ("beats"), not a tally of one ("beats 1"); without a published number, no paper column."""
  t = proto.Task("t", "T", "configs/glue.py", 64, 3, "accuracy", "dev", 1.0,
                 sets=("task.data_dir=/d",))
  q = proto.Protocol(name="x", tasks={"t": t}, claims={"c": "ACL matches CE"}, stages={1: ""},
                     comparisons=(proto.Comparison("c", "t", "acl", "ce", "noninferior"),),
                     lr_grid=("5e-5",), lr_preferred="5e-5", budget_gain=None)
  rows = {}
  for _ in range(3):
    for r in planner.decisions(q, rows).ready:
      seed = int(dict(r.settings)["seed"])
      rows.setdefault(r.sweep, []).append(
          {"sweep": r.sweep, "run": r.name, "task": "t", "method": r.method, "seed": seed,
           "budget": {"lr": 5e-5, "num_epochs": 3, "num_steps": 0},
           "evals": [{"step": 9, "dev": {"accuracy": 0.8 + 0.01 * seed
                                         + (0.02 if r.method == "acl" else 0)}}]})
  lines = summary.claims_table(stage_tables.context(q, rows)).splitlines()
  # The study's own words: no "SPEC §1" it does not name, its own deciding level.
  assert lines[0].startswith("| claim | ours, per comparison: mean [97.5% interval]")
  (line,) = [x for x in lines if x.startswith("| ACL matches CE")]
  cells = [c.strip() for c in line.strip("|").split("|")]
  assert cells == ["ACL matches CE", "+2.00 [+2.00, +2.00] (3/3) beats", "beats",
                   "T 3 epochs, lr 5e-5"]


def test_committed_records_give_the_pinned_verdicts():
  """A few verdicts computed afresh from the committed records, each by the path that decides
  it (stage 1: planner.decisions; stages 2 and 3: later.claim_word), not read from a rendered
  table: a change to what a stage scores (the best-dev checkpoint instead of the final weights,
  say) fails here even with every table regenerated. Each moves when the later stages score
  `final` instead of the final weights."""
  from acl_jax.study import later  # pylint: disable=import-outside-toplevel
  rs = records.read_all()
  idx = {(k, r["run"]): r for k, rows in rs.items() for r in rows}
  fmt = lambda v: (f"{v.mean:+.2f} [{v.decide[0]:+.2f}, {v.decide[1]:+.2f}] ({v.ahead}/{v.n}) "
                   f"{v.word}")
  stage1 = planner.decisions(p, rs).verdicts
  pinned1 = {("rte", "acl", "scl"): "-4.84 [-10.82, +1.14] (1/5) inconclusive",
             ("mr", "gloss", "ce"): "-0.48 [-0.73, -0.23] (0/5) worse"}
  for (task, method, baseline), want in pinned1.items():
    v = next(v for c, v in stage1.items()
             if (c.task, c.method, c.baseline) == (task, method, baseline))
    assert fmt(v) == want, (task, method, baseline)
  cells = {}
  for stage, rules in p.rules.items():
    for rule in rules:
      got = later.claim_word(p, idx, stage, rule)
      key = (stage, rule.claim, rule.task, getattr(rule, "method", ""),
             getattr(rule, "baseline", ""))
      cells[key] = got and got[1]
  pinned = {
      (2, "lambda", "mrpc", "", ""): (
          "range of seed means ACL (Embed+Grad) 0.36 (floor 1.12), CE+SCL 0.52 (floor 1.50); "
          "per-seed range CE+SCL − ACL (Embed+Grad) +0.15 [-0.70, +1.01]: inconclusive"),
      (2, "gloss", "r52", "gloss", "ce"): "+0.16 [-0.04, +0.35] (4/5) inconclusive",
      (3, "others", "rte", "acl_embed", "ce"):
          "-3.54 [-6.81, -0.26] (0/5) lower; non-inferiority not shown",
      (3, "others", "cola", "triplet", "ce"): "-2.11 [-4.61, +0.38] (0/5) inconclusive",
      (3, "others", "mr", "acl_embed", "ce"): "+0.23 [-0.93, +1.40] (2/3) matches or beats",
      (3, "others", "mr", "acl", "ce"): "+0.23 [-0.93, +1.40] (2/3) matches or beats",
      (3, "gloss", "ohsumed", "gloss", "ce"): "-0.84 [-1.58, -0.09] (0/5) worse",
  }
  for key, want in pinned.items():
    assert cells[key] == want, key


def _stage3_text() -> str:
  return " ".join(open(papers_report.REPORTS[3]).read().split())


def test_stage3_names_each_pair_across_devices():
  """results/STAGE3.md lists every later comparison that pairs runs trained on different
  devices (a CPU and an accelerator, as each row's timed_on names it), with its seeds."""
  from acl_jax.study import later, status  # pylint: disable=import-outside-toplevel
  rs = records.read_all()
  idx = {(k, r["run"]): r for k, rows in rs.items() for r in rows}
  want = []
  for stage, rules in p.rules.items():
    for c in rules:
      if not isinstance(c, proto.Comparison):
        continue
      seeds = []
      for s in p.look_seeds[0] + p.look_seeds[1]:
        a = later.find(p, idx, stage, c.task, c.method, s)
        b = later.find(p, idx, stage, c.task, c.baseline, s)
        if a and b and status.accelerator_of(a) != status.accelerator_of(b):
          seeds.append(str(s))
      if seeds:
        want.append(f"- {p.tasks[c.task].label} {p.label(c.method)} − {p.label(c.baseline)}: "
                    f"seed{'s' * (len(seeds) > 1)} {', '.join(seeds)}")
  text = open(papers_report.REPORTS[3]).read()
  block = text.split("**Pairs across devices.**", 1)[1].split("\n\n", 2)[1]
  assert want and block.splitlines() == want


def test_stage3_reading_names_the_tasks_whose_seeds_resolve_the_margin():
  """The stage-3 reading names exactly the tasks where some comparison's seeds resolve a
  difference no larger than the task's margin (`resolvable`, at its deciding look)."""
  from acl_jax.study import later  # pylint: disable=import-outside-toplevel
  rs = records.read_all()
  idx = {(k, r["run"]): r for k, rows in rs.items() for r in rows}
  want = set()
  for c in p.rules[3]:
    if isinstance(c, proto.Comparison):
      v = later.comparison_result(p, idx, 3, c)
      if v is not None and v.resolvable <= p.tasks[c.task].margin:
        want.add(p.tasks[c.task].label)
  named = re.search(r"On (.+?) the seeds resolve differences no larger than the margin",
                    _stage3_text()).group(1)
  assert want and set(re.split(r", | and ", named)) == want


def test_stage3_exit_reading_quotes_the_matched_cost_intervals():
  """Where an exit rule's matched-cost comparison is undecided, the reading says a gain at a
  fixed cost is "not shown" and quotes each baseline's 97.5% interval, not that there is none."""
  from acl_jax.study import later  # pylint: disable=import-outside-toplevel
  rs = records.read_all()
  idx = {(k, r["run"]): r for k, rows in rs.items() for r in rows}
  text = _stage3_text().replace("−", "-")
  sentence = next(" ".join(para.split()).replace("−", "-")
                  for para in open(papers_report.REPORTS[3]).read().split("\n\n")
                  if "more accurate at a fixed cost" in " ".join(para.split()))
  for rule in p.rules[3]:
    if isinstance(rule, proto.ExitRule):
      for b in rule.baselines:
        m = later.exit_result(p, idx, 3, rule, b).matched
        assert m.decide[0] < 0 < m.decide[1], "the reading below is for straddling intervals"
        assert f"[{m.decide[0]:+.2f}, {m.decide[1]:+.2f}] against {p.label(b)}" in sentence
  assert "is not shown" in sentence and "does not make" not in text
