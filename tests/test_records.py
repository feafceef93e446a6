"""The run records and the report built from them: RESULTS.md's tables are what the committed
records give, and the paired statistics behind every verdict. Fast: no training."""
import json
import math
import os

import numpy as np
import pytest
from scipy import stats

from scripts import report
from tests import helpers

records = report.records


def test_committed_tables_are_what_the_committed_records_give():
  """Every table block of RESULTS.md equals scripts/report.py's output on results/records/
  (run `python scripts/report.py` after a sweep adds rows)."""
  text = open(os.path.join(helpers.REPO, "RESULTS.md")).read()
  blocks = report.BLOCK.findall(text)
  assert {b[1] for b in blocks} == set(report.TABLES), "a table is missing from RESULTS.md"
  _, changed = report.render(text, records.read_all())
  assert not changed, f"RESULTS.md tables differ from the records: {changed}"


def test_committed_records_are_whole():
  """Every committed row names its sweep, run, task, method and seed, has a budget and its
  scores, and no run appears twice in a file."""
  rs = records.read_all()
  assert rs, "results/records/ holds no record"
  for sweep, rows in rs.items():
    runs = [r["run"] for r in rows]
    path = records.path_of(sweep)
    assert len(runs) == sum(1 for line in open(path) if line.strip()), f"{sweep}: duplicate run"
    for r in rows:
      assert r["sweep"] == sweep and r["run"] and r["task"] and r["method"], r.get("run")
      assert isinstance(r["seed"], int) and r["budget"].get("batch_size"), r["run"]
      assert r.get("final") or r.get("steps"), f"{sweep}: {r['run']} has no scores"
      settings = records.parse_name(r["run"])
      assert settings["task"] == r["task"] and settings["method"] == r["method"], r["run"]
      assert {k: v for k, v in settings.items() if k not in records.OWN} == r["overrides"]


def _rows(sweep, task, method, values, **overrides):
  """Synthetic rows: one per seed, `values` the test accuracy in points."""
  return [{"sweep": sweep, "run": f"task={task},method={method},seed={s}", "task": task,
           "method": method, "seed": s, "overrides": dict(overrides), "budget": {},
           "evals": [{"step": 1, "dev": {"accuracy": v / 100}}],
           "final": {"test": {"accuracy": v / 100}}} for s, v in enumerate(values)]


def test_paired_differences_t_interval_and_verdicts():
  ce = _rows("textgcn", "mr", "ce", [80.0, 81.0, 82.0, 80.5, 81.5])
  good = _rows("textgcn", "mr", "gloss", [80.6, 81.4, 82.7, 81.0, 82.1])  # ahead on every seed
  mixed = _rows("textgcn", "mr", "scl", [81.0, 80.0, 83.0, 80.5, 81.0])
  d = report.paired_diffs(good, ce)
  np.testing.assert_allclose(d, [0.6, 0.4, 0.7, 0.5, 0.6], atol=1e-9)
  mean, half = report.t_interval(d)
  sd = np.std(d, ddof=1)
  assert mean == pytest.approx(0.56)
  assert half == pytest.approx(stats.t.ppf(0.975, 4) * sd / math.sqrt(5))
  assert half == pytest.approx(2.7764451 * sd / math.sqrt(5), rel=1e-6)
  assert report.fmt_paired(d) == f"+0.56 [{0.56 - half:+.2f}, {0.56 + half:+.2f}] (5/5)"
  assert report.verdict(d, +1) == "holds"
  assert report.verdict(d, -1) == "does not hold"
  assert report.verdict([-x for x in d], +1) == "does not hold"
  dm = report.paired_diffs(mixed, ce)  # +1, -1, +1, 0, -0.5: the interval includes 0
  assert report.verdict(dm, +1) == "inconclusive (interval includes 0)"
  assert report.fmt_paired(dm).endswith("(2/5)")  # a tie (seed 3) is not ahead
  assert report.verdict(d, +1, converged=False) == "not yet tested at a converged budget"
  assert report.verdict(d[:1], +1) == "one seed: no interval"
  assert report.fmt_paired(d[:1]) == "+0.60 (1/1)"


def test_pairs_match_seeds_and_settings_and_skip_unpaired_runs():
  ce = _rows("s", "mr", "ce", [80.0, 81.0])
  acl = _rows("s", "mr", "acl", [81.0, 82.0, 90.0])  # seed 2 has no CE partner
  assert report.paired_diffs(acl, ce) == pytest.approx([1.0, 1.0])
  lam = _rows("s", "mr", "scl", [70.0], **{"loss.lam": "0.9"}) + _rows(
      "s", "mr", "scl", [75.0], **{"loss.lam": "0.1"})
  assert [r["overrides"] for r in report.select(lam, "mr", "scl", loss__lam="0.1")] == [
      {"loss.lam": "0.1"}]
  assert report.select(lam, "mr", "scl", loss__combine=None) == lam  # the field is absent


def test_methods_table_and_claims_from_synthetic_records():
  """A converged sweep's rows replace its pilot in the claims table, with verdicts."""
  rows = (_rows("textgcn", "mr", "ce", [80.0, 81.0, 82.0]) +
          _rows("textgcn", "mr", "gloss", [80.5, 81.6, 82.4]))
  table = report.methods_table(rows, ["mr"], ["ce", "gloss"])
  assert "| CE | 81.00 ± 1.00 (n=3) | 84.85 |" in table
  assert "| CE+G-Loss (sigma fixed) | 81.50 ± 0.95 (n=3) | 85.10 |" in table
  assert "| CE+G-Loss (sigma fixed) | +0.50 [" in table and "(3/3) |" in table
  claims = {r[0]: r for r in report.claim_rows({"textgcn": rows})}
  gloss = claims["CE+G-Loss beats CE on the TextGCN corpora (DistilBERT)"]
  assert gloss[2].startswith("MR +0.50 [") and gloss[3] == "holds"
  pilot = {r[0]: r for r in report.claim_rows({"pilot_single_mr": rows[:3],
                                               "pilot_gloss_ablation_mr": [
                                                   dict(r, sweep="pilot_gloss_ablation_mr",
                                                        overrides={"loss.gamma_keep": "0.7"})
                                                   for r in rows[3:]]})}
  pilot_gloss = pilot["CE+G-Loss beats CE on the TextGCN corpora (DistilBERT)"]
  assert pilot_gloss[3] == "not yet tested at a converged budget"
  assert pilot_gloss[2] == gloss[2]  # the same numbers, no verdict at a pilot budget


def test_pending_tables_and_pilots_that_give_way():
  rs = {"pilot_glue": _rows("pilot_glue", "rte", "ce", [55.0])}
  assert report.build("glue", rs).startswith("*pending*: no run of `glue` is recorded yet (")
  assert report.build("pilot_glue", rs).startswith("| method |")
  rs["glue"] = _rows("glue", "rte", "ce", [60.0, 61.0])
  assert report.build("pilot_glue", rs).startswith("Superseded by the converged `glue` sweep")
  # a converged GLUE row reports its final checkpoint: the last dev evaluation
  row = dict(rs["glue"][0], evals=[{"step": 1, "dev": {"accuracy": 0.5}},
                                   {"step": 2, "dev": {"accuracy": 0.6}}],
             final={"dev": {"accuracy": 0.7}})
  assert report.score(row) == pytest.approx(60.0)
  assert report.score(dict(row, sweep="pilot_glue")) == pytest.approx(70.0)  # selected


def test_report_check_finds_stale_tables(tmp_path):
  rec = tmp_path / "records"
  rec.mkdir()
  for r in _rows("pilot_grad_conflict", "rte", "scl", [1.0]):
    r["steps"] = [{"scl": 91.0, "acl": 80.0, "scl_top": 91.0, "acl_top": 80.0}] * 4
    r["budget"] = {"batch_size": 16, "lr": 2e-5}
    (rec / "pilot_grad_conflict.jsonl").write_text(json.dumps(r) + "\n")
  doc = tmp_path / "R.md"
  doc.write_text("x\n<!-- table: pilot_grad_conflict -->\n| old |\n<!-- /table -->\n")
  args = ["--file", str(doc), "--records", str(rec), "--no_figures"]
  assert report.main(args + ["--check"]) == 1
  assert report.main(args) == 0
  assert "| RTE | CE+SCL | CE vs SCL | 100% | 91.0° |" in doc.read_text()
  assert report.main(args + ["--check"]) == 0
  doc.write_text("<!-- table: nosuch -->\n<!-- /table -->\n")
  with pytest.raises(SystemExit, match="does not know"):
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


def test_hf_baseline_check():
  """Our CE on MR against HF PyTorch's 82.2 ± 0.3 (3 seeds): Welch's test of the means."""
  def rows(values):
    return [dict(r, latest=r["final"]) for r in _rows("hf_baseline_mr", "mr", "ce", values)]
  table = report.hf_table(rows([82.0, 82.3, 82.5]))
  assert "| ours (CE) | 82.27 ± 0.25 (n=3) | 3 |" in table
  assert "matches within seed noise" in table
  assert "differs" in report.hf_verdict([80.0, 80.2, 80.1])
  claims = report.claim_rows({"hf_baseline_mr": rows([80.0, 80.2, 80.1])})
  assert claims[0][2] == "80.10 ± 0.10 (n=3)" and claims[0][3].startswith("differs")
