"""Stages 2 and 3 read from records under their rules (acl_jax/study/later.py), on synthetic rows
whose answers are known."""
import dataclasses

import pytest

from acl_jax.study import later, stage_tables, summary
from studies.papers import PAPERS as p

S1, S2 = p.stage_record[1], p.stage_record[2]
SEEDS = p.look_seeds[0]


def _multi_exit_row(method, seed, gains, base=80.0):
  """A multi-exit SST-2 row: exit m scores base + m + gains[m] (+ a seed wobble)."""
  acc = {m: (base + m + gains.get(m, 0.0) + 0.1 * seed) / 100 for m in range(1, 7)}
  dev = {f"exit_{m}/accuracy": a for m, a in acc.items()}
  dev["accuracy"] = acc[6]
  # the early-exit curve: at 2 layers exit 2's score, at 4 layers exit 4's
  curve = [{"mean_layers": float(m), "metric": acc[m], "full_metric": acc[6], "num_layers": 6}
           for m in (2, 4)]
  return {"run": later.run_name("sst2", method, seed), "task": "sst2", "method": method,
          "seed": seed, "evals": [{"step": 1, "dev": dev}], "early_exit": {"entropy": curve}}


def _idx(rows, sweep=S2):
  return {(sweep, r["run"]): r for r in rows}


SHALLOW = {1: 3.0, 2: 2.5, 3: 2.0, 4: 0.3, 5: 0.2, 6: 0.1}
DEEP = {1: 0.1, 2: 0.2, 3: 0.3, 4: 2.0, 5: 2.5, 6: 3.0}
RULE = p.rules[2][0]


def test_exit_rule_holds_when_the_shallow_exits_gain_most():
  rows = [_multi_exit_row(m, s, g) for s in SEEDS
          for m, g in (("acl_cl", {k: v + 0.05 * s for k, v in SHALLOW.items()}), ("jt", {}),
                       ("kd", {}))]
  res = later.exit_result(p, _idx(rows), 2, RULE, "jt")
  assert res.look == 1 and res.contrast.word == "beats"
  assert res.contrast.mean == pytest.approx((7.5 - 0.6) / 3 + 0, abs=0.2)
  assert res.per_exit[1][0] == pytest.approx(3.05, abs=1e-6)
  # at 3 mean layers: halfway between exits 2 and 4 on both curves
  assert res.matched.mean == pytest.approx((2.5 + 0.3) / 2 + 0.05, abs=1e-6)
  word, cell = later.claim_word(p, _idx(rows), 2, RULE)
  assert word == "holds" and cell.startswith("vs JT shallow − deep +")


def test_exit_rule_fails_when_the_deep_exits_gain_most_and_waits_when_unrecorded():
  rows = [_multi_exit_row(m, s, g) for s in SEEDS
          for m, g in (("acl_cl", {k: v + 0.05 * s for k, v in DEEP.items()}), ("jt", {}),
                       ("kd", {}))]
  assert later.claim_word(p, _idx(rows), 2, RULE)[0] == "fails"
  assert later.claim_word(p, _idx(rows[:-1]), 2, RULE) is None


def _decoyed(row, metric, value, key):
  """`row` scoring `value` (a fraction) with its final weights, beside what the protocol must
  not score: an earlier dev evaluation and the best-dev checkpoint (`final`), each off by an
  amount that varies with method, seed and `key`, so that scoring either moves the verdicts."""
  off = (4.0 * ((3 * row["seed"] + len(row["method"]) + key) % 4) - 5.0) / 100
  scored = p.tasks[row["task"]].scored
  row = dict(row, evals=[{"step": 1, "dev": {metric: value - off}},
                         {"step": 2, "dev": {metric: value}}],
             final={"dev": {metric: value + off}})
  if scored != "dev":
    row["latest"] = {scored: {metric: value}}
    row["final"][scored] = {metric: value + off}
  return row


def _grid_rows(task, method, field, values, score, seeds=SEEDS, metric="f1"):
  """A grid's rows, each with decoys (`_decoyed`)."""
  return [_decoyed({"run": later.run_name(task, method, s, ((field, v),)), "task": task,
                    "method": method, "seed": s}, metric, score(v, s) / 100, i)
          for i, v in enumerate(values) for s in seeds]


def test_range_rule_reads_the_lambda_grid_with_the_preset_point_from_stage1():
  rule = p.rules[2][1]
  noise = (0.0, 0.3, -0.2)
  acl = _grid_rows("mrpc", "acl", "loss.lam", rule.values, lambda v, s: 87 + noise[s])
  scl = _grid_rows("mrpc", "scl", "loss.lam", rule.values,
                   lambda v, s: 80 + 10 * float(v) + noise[s] + 0.1 * s)
  # ACL at its preset λ 0.5 is stage 1's run, named without the grid field
  preset = [r for r in acl if "loss.lam=0.5" in r["run"]]
  stage1 = [dict(r, run=later.run_name("mrpc", "acl", r["seed"])) for r in preset]
  idx = {**_idx([r for r in acl + scl if r not in preset]), **_idx(stage1, S1)}
  look, (word, r, s, v) = later.range_result(p, idx, 2, rule)
  assert (look, word, r.passes, s.passes, v.word) == (1, "holds", False, True, "beats")
  assert s.range == pytest.approx(8.0 + 0.1 * 0, abs=1e-6)
  del idx[(S1, stage1[0]["run"])]
  assert later.range_result(p, idx, 2, rule) is None


def test_stable_rule_on_gamma_keep():
  rule = p.rules[2][2]
  flat = _grid_rows("mr", "gloss", "loss.gamma_keep", rule.values,
                    lambda v, s: 82 + 0.1 * s + 0.05 * float(v), metric="accuracy")
  look, (word, v) = later.stable_result(p, _idx(flat), 2, rule)
  assert (look, word) == (1, "stable")
  assert v.mean == pytest.approx(0.05 * (0.5 - 0.7), abs=1e-9)  # the final weights' scores
  steep = _grid_rows("mr", "gloss", "loss.gamma_keep", rule.values,
                     lambda v, s: 82 + 0.1 * s + 20 * float(v), metric="accuracy")
  assert later.stable_result(p, _idx(steep), 2, rule)[1][0] == "unstable"


def test_a_plain_later_comparison_and_its_second_look():
  """Read at each look from the final weights' scores (`latest`), not an earlier evaluation's
  or the best-dev checkpoint's (decoys here)."""
  rule = p.rules[2][3]  # R52, CE+G-Loss against CE, superiority
  def rows(method, offsets):
    return [_decoyed({"run": later.run_name("r52", method, s), "task": "r52",
                      "method": method, "seed": s}, "accuracy", (90 + o) / 100, 0)
            for s, o in enumerate(offsets)]
  ce = rows("ce", [0.0, 0.0, 0.0, 0.0, 0.0])
  undecided = rows("gloss", [1.0, -1.0, 0.5])
  v = later.comparison_result(p, _idx(ce + undecided), 2, rule)
  assert v.word == "undecided" and v.mean == pytest.approx(0.5 / 3, abs=1e-9)
  second = rows("gloss", [1.0, -1.0, 0.5, 0.8, 1.2])
  v = later.comparison_result(p, _idx(ce + second), 2, rule)
  assert v.look == 2 and v.n == 5 and v.word == "inconclusive"
  assert v.mean == pytest.approx(0.5, abs=1e-9) and v.ahead == 4
  gains = rows("gloss", [1.0, 1.2, 0.9])  # ahead on every seed by ~1: beats at the first look
  v = later.comparison_result(p, _idx(ce + gains), 2, rule)
  assert (v.look, v.word) == (1, "beats") and v.mean == pytest.approx(31 / 30, abs=1e-9)


def test_the_claims_table_shows_a_decided_later_claim():
  rows = [_multi_exit_row(m, s, g) for s in SEEDS
          for m, g in (("acl_cl", {k: v + 0.05 * s for k, v in SHALLOW.items()}), ("jt", {}),
                       ("kd", {}))]
  for r in rows:
    r["sweep"] = S2
  def cells(records):
    claims = summary.claims_table(stage_tables.context(p, records))
    return next(x for x in claims.splitlines() if x.startswith(f"| {p.claims['exits']}"))
  # stage 3 tests the claim again, against 2ST and ALT: pending, then decided beside stage 2's
  got = cells({S2: rows})
  assert "SST-2 vs JT shallow − deep +" in got and "| holds 1, pending 1 |" in got
  assert "the others pending: stage 3 (0 of 6 runs recorded)" in got
  later_rows = [dict(_multi_exit_row(m, s, {}), sweep=p.stage_record[3])
                for s in SEEDS for m in ("2st", "alt")]
  got = cells({S2: rows, p.stage_record[3]: later_rows})
  assert "vs 2ST shallow − deep +" in got and "vs ALT shallow − deep +" in got
  # the claim holds when it holds against every baseline of both stages
  assert "| holds over all 4 baselines (stage 2: holds, stage 3: holds) |" in got
  assert "the others pending" not in got
  # ALT ahead of ACL-CL at the shallow exits: stage 3 fails against it, and so does the claim,
  # though stage 2 holds
  alt_ahead = [dict(_multi_exit_row(m, s, {k: 2 * v for k, v in SHALLOW.items()} if m == "alt"
                                    else {}), sweep=p.stage_record[3])
               for s in SEEDS for m in ("2st", "alt")]
  got = cells({S2: rows, p.stage_record[3]: alt_ahead})
  assert "| fails over all 4 baselines (stage 2: holds, stage 3: fails) |" in got


def test_an_undecided_later_rule_releases_its_second_look():
  """R52 undecided at seeds 0-2: seeds 3-4 of both methods are released; a decided one
  releases nothing more."""
  from acl_jax.study import planner  # pylint: disable=import-outside-toplevel
  st = planner.TaskState("r52", lr="5e-5", epochs=3)
  def rows(method, offsets):
    return [{"run": later.run_name("r52", method, s), "task": "r52", "method": method,
             "seed": s, "latest": {"test": {"accuracy": (90 + o) / 100}}}
            for s, o in enumerate(offsets)]
  ce = rows("ce", [0.0, 0.0, 0.0])
  runs = planner.second_look_runs(p, 2, "r52", st, _idx(ce + rows("gloss", [1.0, -1.0, 0.5])))
  assert sorted(r.name for r in runs) == [
      "task=r52,method=ce,seed=3", "task=r52,method=ce,seed=4",
      "task=r52,method=gloss,seed=3", "task=r52,method=gloss,seed=4"]
  assert not planner.second_look_runs(p, 2, "r52", st, _idx(ce + rows("gloss", [1.0, 1.1, 0.9])))
  # the gamma_keep rule's second look trains 0.5 only: 0.7 is the preset, stage 1's
  rule = p.rules[2][2]
  mr = planner.TaskState("mr", lr="5e-5", epochs=3)
  flat = _grid_rows("mr", "gloss", "loss.gamma_keep", rule.values,
                    lambda v, s: 82 + (-4.5, 2.5, -7.0)[s] * float(v),
                    metric="accuracy")
  assert later.stable_result(p, _idx(flat), 2, rule)[1][0] == "undecided"
  stage1 = [{"run": later.run_name("mr", "gloss", s), "task": "mr", "method": "gloss",
             "seed": s} for s in p.look_seeds[1]]
  runs = planner.second_look_runs(p, 2, "mr", mr, {**_idx(flat), **_idx(stage1, S1)})
  assert sorted(r.name for r in runs) == ["task=mr,method=gloss,loss.gamma_keep=0.5,seed=3",
                                          "task=mr,method=gloss,loss.gamma_keep=0.5,seed=4"]
  # without stage 1's seeds 3-4 of the preset, stage 2 trains them too
  runs = planner.second_look_runs(p, 2, "mr", mr, _idx(flat))
  assert sorted(r.name for r in runs) == [
      f"task=mr,method=gloss,loss.gamma_keep={v},seed={s}" for v in ("0.5", "0.7")
      for s in (3, 4)]


def test_the_rarest_class_is_reported_and_a_collapse_is_noted():
  from acl_jax.study import classes  # pylint: disable=import-outside-toplevel
  def rows(method, rare):
    return [{"run": later.run_name("r8", method, s), "task": "r8", "method": method, "seed": s,
             "latest": {"test": {"accuracy": 0.97, "macro_f1": 0.9,
                                 "per_class_recall": {"acq": 0.99, "grain": rare},
                                 "per_class_support": {"acq": 696, "grain": 10}}}}
            for s in SEEDS]
  rs = {S1: rows("ce", 0.8) + rows("gloss", 0.3)}
  table = classes.table(p, rs, p.labels)
  assert "| R8 | CE | 97.00 ± 0.00 (n=3) | 90.00 ± 0.00 (n=3) | 80.00 ± 0.00 (n=3) (grain; " \
         "support 10) |" in table
  assert classes.note(p, rs, "r8", "gloss") == " (lowest class recall 30.0, CE's 80.0)"
  assert classes.note(p, {S1: rows("ce", 0.8) + rows("gloss", 0.75)}, "r8", "gloss") == ""
  old = {S1: [dict(r, latest={"test": {"accuracy": 0.97}}) for r in rows("ce", 0.8)]}
  assert "not recorded (3 of 3 runs)" in classes.table(p, old, p.labels)


def test_a_rerun_is_set_beside_its_original():
  evals = [{"step": s, "dev": {"mcc": 0.1 * s}} for s in (1, 2, 3)]
  old = {"run": "task=cola,method=ce,seed=0", "task": "cola", "method": "ce", "seed": 0,
         "evals": evals, "code": ["a" * 40], "timed_on": "CPU A",
         "train": {"params_sha256": "1" * 16}}
  same = dict(old, sweep="rerun_head", rerun_of=S1, code=["b" * 40], timed_on="CPU B")
  moved = dict(same, evals=evals[:2] + [{"step": 3, "dev": {"mcc": 0.31}}],
               train={"params_sha256": "2" * 16})
  for rerun, want in ((same, ["30.0000", "3 of 3", "yes"]),
                      (moved, ["31.0000", "2 of 3", "no (`11111111` / `22222222`)"])):
    text = summary.reruns_table(stage_tables.context(p, {S1: [old], "rerun_head": [rerun]}))
    cells = [c.strip() for c in text.splitlines()[2].strip("|").split("|")]
    assert cells[1:3] == ["`aaaaaaa` on CPU A", "`bbbbbbb` on CPU B"]
    assert [cells[3]] + cells[4:] == ["30.0000"] + want


def test_stage2_detail_tables_render_the_rules():
  from acl_jax.study import later_tables  # pylint: disable=import-outside-toplevel
  rows = [_multi_exit_row(m, s, g) for s in SEEDS
          for m, g in (("acl_cl", {k: v + 0.05 * s for k, v in SHALLOW.items()}), ("jt", {}),
                       ("kd", {}))]
  text = later_tables.exits_table(p, _idx(rows), RULE, p.labels)
  assert text.count("| holds |") == 0 and text.count(" holds |") == 2 and "exit 6" in text
  assert later_tables.exits_table(p, _idx(rows[:-1]), RULE, p.labels) == \
      "*pending*: 8 of 9 first-look runs recorded.\n"
  rule = p.rules[2][1]
  noise = (0.0, 0.3, -0.2)
  acl = _grid_rows("mrpc", "acl", "loss.lam", rule.values, lambda v, s: 87 + noise[s])
  scl = _grid_rows("mrpc", "scl", "loss.lam", rule.values,
                   lambda v, s: 80 + 10 * float(v) + noise[s] + 0.1 * s)
  text = later_tables.range_table(p, _idx(acl + scl), rule, p.labels)
  assert "The claim: **holds**." in text and "| CE+SCL | 81.13 ± 0.23 |" in text
  gamma = p.rules[2][2]
  flat = _grid_rows("mr", "gloss", "loss.gamma_keep", ("0.3", "0.5", "0.7", "0.9"),
                    lambda v, s: 82 + 0.1 * s + 0.05 * float(v), metric="accuracy")
  text = later_tables.stable_table(p, _idx(flat), gamma, p.labels, ("0.3", "0.5", "0.9"))
  assert "**stable**" in text and "| 0.7 (preset) |" in text and "| 0.3 |" in text


def test_a_described_grid_is_each_value_against_stage1s_preset_paired_by_seed():
  """STAGE3.md's sigma block: every sigma of stage 3's grid and the preset (0.667, stage 1's
  runs) with its mean, and each value's paired difference to the preset, seed by seed; pending
  until every value's first look is recorded."""
  from acl_jax.study import later_tables  # pylint: disable=import-outside-toplevel
  S3 = p.stage_record[3]
  d = p.described[0]
  # the seeds' offsets cancel in a paired difference and dominate an unpaired one
  seed_shift, wobble = (0.0, 2.0, -2.0), {"0.1": (0.0, 0.2, -0.2)}
  score = lambda v, s: 80 + float(v) + seed_shift[s] + wobble.get(v, (0, 0, 0))[s]
  grid = _grid_rows("mr", "gloss", d.field, d.values, score, metric="accuracy")
  preset = [dict(r, run=later.run_name("mr", "gloss", r["seed"]))
            for r in _grid_rows("mr", "gloss", d.field, (d.preset,), score, metric="accuracy")]
  text = later_tables.described_tables(p, {**_idx(grid, S3), **_idx(preset, S1)}, p.labels)
  assert text.startswith("CE+G-Loss (sigma fixed) on MR over `loss.sigma` (test accuracy; "
                         "stage 3):")
  rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines()}
  assert "| 0.667 (preset) | 80.67 ± 2.00 (n=3) | — |" in text
  assert rows["5.0"].endswith("| +4.33 [+4.33, +4.33] |")
  half = 0.2 * 4.302652729749464 / 3 ** 0.5  # sd 0.2 of (0, .2, -.2), t(0.975, 2)
  assert rows["0.1"].endswith(f"| -0.57 [{-0.567 - half:+.2f}, {-0.567 + half:+.2f}] |")
  assert [r for r in rows if r[:1].isdigit()] == ["0.1", "0.3", "0.667 (preset)", "1.5", "5.0"]
  assert later_tables.described_tables(p, {**_idx(grid[1:], S3), **_idx(preset, S1)},
                                       p.labels).endswith(
      "*pending*: 11 of 12 first-look runs recorded.\n")
  assert later_tables.described_tables(dataclasses.replace(p, described=()), {}, p.labels) == \
      "*pending*: the protocol describes no grid.\n"


def test_stage3_exit_table_reads_acl_cl_from_stage2_and_its_baselines_from_stage3():
  """STAGE3.md's shallow-exit block: ACL-CL's rows come from stage 2's record, 2ST's and ALT's
  from stage 3's; a missing baseline run leaves the block pending."""
  from acl_jax.study import later_tables  # pylint: disable=import-outside-toplevel
  S3 = p.stage_record[3]
  acl = [_multi_exit_row("acl_cl", s, {k: v + 0.05 * s for k, v in SHALLOW.items()})
         for s in SEEDS]
  base = [_multi_exit_row(m, s, {}) for s in SEEDS for m in ("2st", "alt")]
  text = later_tables.stage3_exits(p, {**_idx(acl), **_idx(base, S3)}, p.labels)
  lines = text.splitlines()
  assert lines[2].startswith("| ACL-CL − 2ST | 1 | 3 | +3.05 |")
  assert lines[3].startswith("| ACL-CL − ALT | 1 | 3 |") and text.count(" holds |") == 2
  assert later_tables.stage3_exits(p, {**_idx(acl), **_idx(base[:-1], S3)}, p.labels) == \
      "*pending*: 8 of 9 first-look runs recorded.\n"


def test_an_exit_rule_keeps_asking_for_a_baselines_second_look():
  """The shallow-exit rule with JT's second look recorded (the contrast still open:
  inconclusive there) and KD's undecided at its first: the claim waits, and the planner still
  asks for KD's seeds 3-4."""
  from acl_jax.study import planner  # pylint: disable=import-outside-toplevel
  wobble = {0: 0.6, 1: -0.5, 2: 0.1, 3: -0.4, 4: 0.3}  # the contrast's sign varies by seed
  rows = []
  for s in SEEDS + p.look_seeds[1]:
    rows.append(_multi_exit_row("acl_cl", s, {k: v * wobble[s] for k, v in SHALLOW.items()}))
    rows.append(_multi_exit_row("jt", s, {}))
  rows += [_multi_exit_row("kd", s, {}) for s in SEEDS]
  idx = _idx(rows)
  jt, kd = (later.exit_result(p, idx, 2, RULE, b) for b in ("jt", "kd"))
  assert (jt.look, jt.contrast.word) == (2, "inconclusive")
  assert (kd.look, kd.contrast.word) == (1, "undecided")
  assert later.claim_word(p, idx, 2, RULE)[0] == "undecided"
  st = planner.TaskState("sst2", lr="5e-5", epochs=1)
  runs = planner.second_look_runs(p, 2, "sst2", st, idx)
  assert {"task=sst2,method=kd,seed=3", "task=sst2,method=kd,seed=4"} <= {r.name for r in runs}


def test_a_baselines_missing_second_look_seeds_train_in_the_later_stage():
  """A stage-3 comparison against CE left undecided at seeds 0-2, on a task whose stage-1
  comparisons ended at their first look (CE seeds 3-4 never trained): CE's seeds 3-4 are
  released into stage 3's record beside the method's, and only the method's once stage 1
  holds them."""
  from acl_jax.study import planner  # pylint: disable=import-outside-toplevel
  S3 = p.stage_record[3]
  rule = p.rules[3][0]  # RTE, ACL-Embed against CE, non-inferiority
  st = planner.TaskState(rule.task, lr="5e-5", epochs=3)
  def rows(method, offsets):
    return [{"run": later.run_name(rule.task, method, s), "task": rule.task, "method": method,
             "seed": s, "evals": [{"step": 1, "dev": {"accuracy": (70 + o) / 100}}]}
            for s, o in enumerate(offsets)]
  ce3, ce5 = rows("ce", [0.0, 1.0, -1.0]), rows("ce", [0.0, 1.0, -1.0, 0.5, -0.5])
  method = rows(rule.method, [-3.0, 2.0, -0.5])
  idx = {**_idx(ce3, S1), **_idx(method, S3)}
  assert later.comparison_result(p, idx, 3, rule).word == "undecided"
  runs = planner.second_look_runs(p, 3, rule.task, st, idx)
  assert {r.sweep for r in runs} == {S3}
  assert sorted(r.name for r in runs) == [
      f"task=rte,method={rule.method},seed=3", f"task=rte,method={rule.method},seed=4",
      "task=rte,method=ce,seed=3", "task=rte,method=ce,seed=4"]
  runs = planner.second_look_runs(p, 3, rule.task, st, {**_idx(ce5, S1), **_idx(method, S3)})
  assert sorted(r.name for r in runs) == [f"task=rte,method={rule.method},seed=3",
                                          f"task=rte,method={rule.method},seed=4"]
  # once trained there, stage 3's own CE seeds complete the second look
  both = {**_idx(ce3, S1), **_idx(ce5[3:], S3),
          **_idx(rows(rule.method, [-3.0, 2.0, -0.5, 0.2, 0.4]), S3)}
  assert later.comparison_result(p, both, 3, rule).look == 2


def test_an_exit_rule_reads_the_exits_it_names():
  """A 4-layer model's rule (shallow 1-2, deep 3-4) reads exits 1-4 alone, and the table shows
  them and the rule's own described layers."""
  from acl_jax.study import later_tables  # pylint: disable=import-outside-toplevel
  rule = dataclasses.replace(RULE, shallow=(1, 2), deep=(3, 4), layers=2.0,
                             described_layers=(3.0,))
  rows = [_multi_exit_row(m, s, g) for s in SEEDS
          for m, g in (("acl_cl", {1: 3.0, 2: 2.0}), ("jt", {}), ("kd", {}))]
  for r in rows:
    for m in (5, 6):
      del r["evals"][0]["dev"][f"exit_{m}/accuracy"]
  res = later.exit_result(p, _idx(rows), 2, rule, "jt")
  assert sorted(res.per_exit) == [1, 2, 3, 4]
  assert res.contrast.mean == pytest.approx(2.5, abs=1e-6)
  text = later_tables.exits_table(p, _idx(rows), rule, p.labels)
  assert "| exit 4 | shallow − deep, 97.5% | at 2 mean layers, 97.5% | at 3 layers, 95% |" \
      in text and "exit 5" not in text


def test_an_exit_rule_with_no_deep_exits_reads_and_names_the_exits_own_gain():
  """Stage 4b's rule (exit 6 alone, no deep exits): the contrast is exit 6's paired gain, and
  the claim's cell and the table call it that, not "shallow − deep"."""
  from acl_jax.study import later_tables  # pylint: disable=import-outside-toplevel
  rule = dataclasses.replace(RULE, shallow=(6,), deep=(), layers=4.0, described_layers=(2.0,))
  rows = [_multi_exit_row(m, s, g) for s in SEEDS
          for m, g in (("acl_cl", {6: 1.5 + 0.1 * s}), ("jt", {}), ("kd", {}))]
  res = later.exit_result(p, _idx(rows), 2, rule, "jt")
  assert res.contrast.mean == pytest.approx(1.6, abs=1e-6) and res.contrast.word == "beats"
  word, cell = later.claim_word(p, _idx(rows), 2, rule)
  assert word == "holds" and cell.startswith("vs JT exit 6 gain +1.60 ")
  assert "shallow − deep" not in cell
  text = later_tables.exits_table(p, _idx(rows), rule, p.labels)
  assert "| exit 6 | exit 6 gain, 97.5% |" in text and "shallow − deep" not in text


def test_the_pilot_tables_take_any_task_and_baseline():
  """The per-exit and early-exit tables read the tasks the rows have, and the paired gains
  are over the baseline asked for."""
  from acl_jax.study import tables  # pylint: disable=import-outside-toplevel
  rows = []
  for s in SEEDS:
    for method, gain in (("jt", 0.0), ("kd", 1.0), ("acl_cl", 2.0)):
      dev = {f"exit_{m}/accuracy": (60 + m + gain + 0.1 * s) / 100 for m in range(1, 5)}
      curve = [{"threshold": t, "metric": (64 + gain - d) / 100,
                "full_metric": (64 + gain) / 100, "layer_speedup": sp, "speedup": sp - 0.1}
               for t, d, sp in ((0.1, 0.5, 1.5), (0.3, 2.0, 2.5))]
      rows.append({"task": "rte", "method": method, "seed": s, "final": {"dev": dev},
                   "early_exit": {"entropy": curve}})
  text = tables.multi_exit_table(p, rows, "rte", baseline="kd")
  assert "Paired gain over KD" in text and "| exit 4 |" in text
  assert f"| {p.label('acl_cl')} | +1.00 " in text and "| JT | −1.00 " in text.replace("-", "−")
  early = tables.early_exit_table(p, rows)
  assert early.count("| RTE |") == 3 and "| 0.1 | −0.50 " in early.replace("-", "−")


def test_a_later_multi_exit_arm_gains_over_the_baseline_of_the_stage_before():
  """Stage 3's 2ST and ALT arm does not train JT, the per-exit table's baseline: its gains are
  over JT's runs of the same settings in stage 2's record, and every score is the final
  weights' (the last dev evaluation), not the selected checkpoint's (`final`, here a decoy
  off by an amount that varies with method and seed)."""

  def row(m, s, g):
    r = _multi_exit_row(m, s, g)
    off = (len(m) + 3 * s) % 4 - 5.0
    return dict(r, final={"dev": {k: v + off / 100 for k, v in r["evals"][-1]["dev"].items()}})

  rs = {S2: [row("jt", s, {}) for s in SEEDS],
        p.stage_record[3]: [row(m, s, {1: g}) for s in SEEDS
                            for m, g in (("2st", 1.0), ("alt", -2.0))]}
  text = stage_tables.arm_tables(stage_tables.context(p, rs), 3)
  assert "| JT | 81.10 ± 0.10 (n=3) |" in text
  assert "| 2ST | +1.00 [" in text and "| ALT | -2.00 [" in text


def test_per_class_results_are_any_tasks():
  """A study's task scored on test (not a TextGCN corpus) gets its per-class row under
  "task"; a study with no such run is pending in words that name no corpus of this project."""
  from acl_jax.study import classes  # pylint: disable=import-outside-toplevel
  mine = dataclasses.replace(p.tasks["rte"], name="mine", label="Mine", scored="test")
  q = dataclasses.replace(p, tasks={**p.tasks, "mine": mine})
  rs = {S1: [{"run": later.run_name("mine", "ce", s), "task": "mine", "method": "ce",
              "seed": s, "latest": {"test": {"accuracy": 0.9, "macro_f1": 0.8,
                                             "per_class_recall": {"a": 0.95, "b": 0.5},
                                             "per_class_support": {"a": 90, "b": 10}}}}
             for s in SEEDS]}
  table = classes.table(q, rs, q.labels)
  assert table.startswith("| task | method |")
  assert "| Mine | CE | 90.00 ± 0.00 (n=3) | 80.00 ± 0.00 (n=3) | 50.00 ± 0.00 (n=3) (b; " \
         "support 10) |" in table
  assert "TextGCN" not in classes.table(q, {}, q.labels)
  assert classes.table(q, {}, q.labels).startswith("*pending*: no run has recorded")
