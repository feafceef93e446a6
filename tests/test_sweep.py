"""Sweep runner: planning, naming, skipping finished runs, aggregation over seeds."""
import json
import os
import re
import socket

import numpy as np
import pytest

from scripts import sweep


def _args(tmp_path, **kw):
  a = dict(root=str(tmp_path), config="configs/glue.py:rte", methods="ce,acl", grid=None,
           set=["task.data_dir=../shared/data/glue"], seeds="0,1", splits="", dry_run=True,
           keep_going=False, aggregate_only=False, extra=[], archive=None)
  a.update(kw)
  return type("A", (), a)()


def test_plan_names_and_commands(tmp_path):
  args = _args(tmp_path, grid=["loss.lam=0.1,0.9"])
  runs = sweep.plan(args)
  assert len(runs) == 2 * 2 * 2
  assert sweep.run_name(runs[0]) == "method=ce,loss.lam=0.1,seed=0"
  cmd = sweep.train_command(args, runs[-1], "/w")
  assert "configs/glue.py:rte,acl" in cmd and "--config.loss.lam=0.9" in cmd
  assert "--config.seed=1" in cmd and "--config.task.data_dir=../shared/data/glue" in cmd


def test_aggregate_mean_std_and_skip(tmp_path, capsys):
  vals = {("ce", "0"): 0.80, ("ce", "1"): 0.84, ("acl", "0"): 0.86, ("acl", "1"): 0.88}
  for (m, s), acc in vals.items():
    wd = tmp_path / f"method={m},seed={s}"
    wd.mkdir()
    (wd / "results.json").write_text(json.dumps(
        {"dev": {"accuracy": acc, "num_examples": 10}, "train": {"gate_on_fraction": 0.5}}))
  table, summary = sweep.aggregate(str(tmp_path))
  ce = summary["method=ce"]["metrics"]["dev/accuracy"]
  assert ce["n"] == 2 and ce["mean"] == pytest.approx(0.82)
  assert ce["std"] == pytest.approx(np.std([0.80, 0.84], ddof=1))
  assert "82.00 ± 2.83" in table and os.path.exists(tmp_path / "summary.md")
  sweep.run_all(_args(tmp_path, seeds="0,1,2"))
  out = capsys.readouterr().out
  assert out.count("done:") == 4 and out.count("run:") == 2


def test_cells_missing_seeds_show_their_count_and_bad_splits_fail(tmp_path):
  for s, res in (("0", {"dev": {"accuracy": 0.8}, "test": {"accuracy": 0.7}}),
                 ("1", {"dev": {"accuracy": 0.9}, "test": {"accuracy": 0.6}}),
                 ("2", {"dev": {"accuracy": 0.7}})):
    wd = tmp_path / f"method=ce,seed={s}"
    wd.mkdir()
    (wd / "results.json").write_text(json.dumps({"train": {}, **res}))
  table, _ = sweep.aggregate(str(tmp_path))
  assert "| method=ce | 3 | 80.00 ± 10.00 | 65.00 ± 7.07 (n=2) |" in table
  assert not [f for f in os.listdir(tmp_path) if ".tmp" in f]
  with pytest.raises(SystemExit, match=r"no run under .* has \['tset'\]; the runs have "
                     r"\['dev', 'test'\]"):
    sweep.main(["--root", str(tmp_path), "--aggregate_only", "--splits", "dev,tset"])
  with pytest.raises(SystemExit, match="No finished run"):
    sweep.main(["--root", str(tmp_path / "method=ce,seed=0"), "--aggregate_only"])


def test_extra_flags_may_not_override_run_settings(tmp_path):
  for extra in (["--config.seed=5"], ["--workdir", "/x"], ["--config", "configs/glue.py:cola"]):
    with pytest.raises(SystemExit, match="would override the run's settings"):
      sweep.main(["--root", str(tmp_path), "--config", "configs/glue.py:rte", "--dry_run",
                  "--"] + extra)
  assert sweep.log_name([]) == "train.log"
  assert sweep.log_name(["--coordinator=h:1", "--num_processes=2", "--process_id=1"]) == \
      "train.p1.log"
  assert sweep.log_name(["--distributed"]) == f"train.{socket.gethostname()}.log"


def test_cross_task_table(tmp_path):
  from scripts import results_tables
  vals = {("mr", "ce", "0"): 0.80, ("mr", "ce", "1"): 0.82, ("mr", "gloss", "0"): 0.81,
          ("r8", "ce", "0"): 0.95}
  for (t, m, s), acc in vals.items():
    wd = tmp_path / t / f"method={m},seed={s}"
    wd.mkdir(parents=True)
    (wd / "results.json").write_text(json.dumps({"train": {}, "test": {"accuracy": acc}}))
  text = results_tables.table(str(tmp_path), ["mr", "r8"], "test/accuracy", None)
  rows = {r.split(" | ")[0].lstrip("| "): r for r in text.splitlines() if r.startswith("| C")}
  assert "81.00 ± 1.41 (n=2)" in rows["CE"] and "95.00 (n=1)" in rows["CE"]
  assert rows["CE"].endswith("| 84.85 | 97.48 |")  # paper columns (SPEC §1)
  assert "81.00 (n=1)" in rows["CE+G-Loss (sigma fixed)"] and "| — |" in rows["CE+G-Loss (sigma fixed)"]
  # grid roots: one row per setting, in a stable order, no paper column on a grid row
  for lam, acc in (("0.9", 0.7), ("0.1", 0.8)):
    wd = tmp_path / "g" / "mr" / f"method=scl,loss.lam={lam},seed=0"
    wd.mkdir(parents=True)
    (wd / "results.json").write_text(json.dumps({"train": {}, "test": {"accuracy": acc}}))
  text = results_tables.table(str(tmp_path / "g"), ["mr"], "test/accuracy", None)
  body = [r for r in text.splitlines() if r.startswith("| CE")]
  assert body == ["| CE+SCL [loss.lam=0.1] | 80.00 (n=1) |  |",
                  "| CE+SCL [loss.lam=0.9] | 70.00 (n=1) |  |"]


def test_results_tables_refuses_unknown_metrics_and_methods(tmp_path):
  from scripts import results_tables
  wd = tmp_path / "mr" / "method=ce,seed=0"
  wd.mkdir(parents=True)
  (wd / "results.json").write_text(json.dumps({"train": {}, "test": {"accuracy": 0.8}}))
  check = lambda tasks, metrics, methods: results_tables.check_names(
      str(tmp_path), tasks, metrics, methods, results_tables.summaries(str(tmp_path), tasks))
  check(["mr"], ["test/accuracy", "headline"], ["ce"])
  with pytest.raises(SystemExit, match=r"--metrics \['test/acc'\]: .* have \['test/accuracy'\]"):
    check(["mr"], ["test/acc"], None)
  with pytest.raises(SystemExit, match=r"--methods \['acl'\]: .* rows are \['method=ce'\]"):
    check(["mr", "r8"], ["test/accuracy"], ["ce", "acl"])


def test_paired_differences_to_a_baseline(tmp_path):
  from scripts import results_tables
  # gloss - ce per seed: +1, -3 on mr; scl has no seed-1 ce run to pair with on r8
  vals = {("mr", "ce", "0"): 0.80, ("mr", "ce", "1"): 0.84, ("mr", "gloss", "0"): 0.81,
          ("mr", "gloss", "1"): 0.81, ("r8", "ce", "0"): 0.95, ("r8", "scl", "1"): 0.90}
  for (t, m, s), acc in vals.items():
    wd = tmp_path / t / f"method={m},seed={s}"
    wd.mkdir(parents=True)
    (wd / "results.json").write_text(json.dumps({"train": {}, "test": {"accuracy": acc}}))
  diffs = sweep.paired(str(tmp_path / "mr"), "ce", lambda r: {"acc": r["test"]["accuracy"]})
  assert list(diffs) == ["method=gloss"]
  np.testing.assert_allclose(diffs["method=gloss"]["acc"], [0.01, -0.03], atol=1e-12)
  # a grid field besides method and seed: runs pair only with the baseline at the same value
  for m, lam, acc in (("ce", "0.1", 0.70), ("scl", "0.1", 0.75), ("scl", "0.9", 0.60)):
    wd = tmp_path / "g" / f"method={m},loss.lam={lam},seed=0"
    wd.mkdir(parents=True)
    (wd / "results.json").write_text(json.dumps({"train": {}, "test": {"accuracy": acc}}))
  diffs = sweep.paired(str(tmp_path / "g"), "ce", lambda r: {"acc": r["test"]["accuracy"]})
  assert list(diffs) == ["method=scl,loss.lam=0.1"]
  np.testing.assert_allclose(diffs["method=scl,loss.lam=0.1"]["acc"], [0.05], atol=1e-12)
  text = results_tables.paired_table(str(tmp_path), ["mr", "r8"], "test/accuracy", "ce", None)
  rows = [r for r in text.splitlines() if r.startswith("| C")]
  assert rows == ["| CE+G-Loss (sigma fixed) | -1.00 ± 2.83 (1/2) | — |"]  # no pair, no row
  text = results_tables.paired_table(str(tmp_path), ["mr", "r8"], "test/accuracy", "ce",
                                     ["ce", "scl", "gloss"])  # asked for: shown, unpaired
  rows = [r for r in text.splitlines() if r.startswith("| C")]
  assert rows == ["| CE+SCL | — | — |",
                  "| CE+G-Loss (sigma fixed) | -1.00 ± 2.83 (1/2) | — |"]


def test_runs_share_a_compilation_cache(tmp_path, monkeypatch):
  monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
  env = sweep.child_env(_args(tmp_path))
  assert env["JAX_COMPILATION_CACHE_DIR"] == os.path.join(str(tmp_path), ".jax_cache")
  assert "JAX_COMPILATION_CACHE_DIR" not in sweep.child_env(_args(tmp_path, compile_cache="none"))
  monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/elsewhere")  # the user's setting wins
  assert sweep.child_env(_args(tmp_path))["JAX_COMPILATION_CACHE_DIR"] == "/elsewhere"


def test_headline_table_uses_each_tasks_metric(tmp_path):
  from scripts import results_tables
  runs = {"cola": {"dev": {"mcc": 0.30, "accuracy": 0.75}},
          "sst2": {"dev": {"accuracy": 0.88}},
          "mr": {"dev": {"accuracy": 0.90}, "test": {"accuracy": 0.79}}}
  for t, res in runs.items():
    wd = tmp_path / t / "method=scl,seed=0"
    wd.mkdir(parents=True)
    (wd / "results.json").write_text(json.dumps({"train": {}, **res}))
  text = results_tables.table(str(tmp_path), ["cola", "sst2", "mr"], "headline", ["scl"])
  head, _, row = [r for r in text.splitlines() if r.startswith("|")]
  assert head == ("| method | COLA (dev/mcc) | SST2 (dev/accuracy) | MR (test/accuracy) "
                  "| SST2 paper | MR paper |")
  assert row == "| CE+SCL | 30.00 (n=1) | 88.00 (n=1) | 79.00 (n=1) | 92.10 |  |"


def test_tables_state_each_tasks_budget(tmp_path, monkeypatch, capsys):
  from scripts import results_tables
  for t, m, steps, length in (("cola", "ce", 800, 48), ("cola", "scl", 200, 48),
                              ("mr", "ce", 200, 64)):
    wd = tmp_path / t / f"method={m},seed=0"
    wd.mkdir(parents=True)
    (wd / "results.json").write_text(json.dumps({"train": {}, "dev": {"mcc": 0.1, "accuracy": 0.7}}))
    (wd / "config.json").write_text(json.dumps(
        {"num_steps": steps, "batch_size": 32, "task": {"max_length": length},
         "optim": {"lr": 5e-5}}))
  (tmp_path / "rte" / "method=ce,seed=0").mkdir(parents=True)  # no config: left out
  out = tmp_path / "t.md"
  monkeypatch.setattr("sys.argv", ["results_tables.py", "--root", str(tmp_path), "--tasks",
                                   "cola,mr,rte", "--metrics", "headline", "--out", str(out)])
  results_tables.main()
  budgets = out.read_text().splitlines()[-1]
  assert budgets == ("Budgets (from the runs' config.json): COLA steps 200/800, batch 32, "
                     "max length 48, lr 5e-05; MR steps 200, batch 32, max length 64, lr 5e-05.")
  assert budgets in capsys.readouterr().out


def test_aggregate_flags_seeds_whose_configs_differ(tmp_path):
  for seed, cfg in (("0", {"seed": 0, "loss": {"lam": 0.5}}),
                    ("1", {"seed": 1, "loss": {"lam": 0.5}, "model": {"pool": "cls"}}),
                    ("2", {"seed": 2, "loss": {"lam": 0.9}, "model": {"pool": "cls"}})):
    wd = tmp_path / f"method=scl,seed={seed}"
    wd.mkdir()
    (wd / "results.json").write_text(json.dumps({"train": {}, "dev": {"accuracy": 0.8}}))
    (wd / "config.json").write_text(json.dumps(cfg))
  wd = tmp_path / "method=ce,seed=0"
  wd.mkdir()
  (wd / "results.json").write_text(json.dumps({"train": {}, "dev": {"accuracy": 0.7}}))
  table, summary = sweep.aggregate(str(tmp_path))
  assert summary["method=scl"]["config_differs"] == ["loss.lam"]  # not the seed
  assert summary["method=scl"]["config_missing"] == ["model.pool"]  # added after seed 0 ran
  assert "config_differs" not in summary["method=ce"]
  assert "| method=ce | 1 | 70.00 (n=1) |" in table  # one seed: no ± 0.00
  assert ("method=scl: set differently: loss.lam; missing from some runs' config.json: "
          "model.pool") in table


def test_dangling_reuse_link_is_reported(tmp_path, capsys):
  os.symlink(str(tmp_path / "gone"), str(tmp_path / "method=ce,seed=0"))
  with pytest.raises(SystemExit):
    sweep.run_all(_args(tmp_path, methods="ce", seeds="0"))
  assert "is a link to a missing run" in capsys.readouterr().out
  sweep.run_all(_args(tmp_path, methods="ce", seeds="0,1", keep_going=True))  # goes on
  assert "run:" in capsys.readouterr().out


def test_rerun_with_other_flags_fails_on_recorded_runs(tmp_path, capsys, monkeypatch):
  """A run records the --config/--set it was started with; a rerun asking for others fails on
  it (skipping or resuming it would mix settings), unrecorded older runs pass."""
  calls = []
  monkeypatch.setattr(sweep.subprocess, "call", lambda cmd, **kw: calls.append(cmd) or 0)
  sweep.run_all(_args(tmp_path, methods="ce", seeds="0,1", dry_run=False))
  assert len(calls) == 2
  rec = json.load(open(tmp_path / "method=ce,seed=0" / sweep.RUN_ARGS))
  assert rec == {"config": "configs/glue.py:rte,ce", "set": ["task.data_dir=../shared/data/glue"]}
  os.remove(tmp_path / "method=ce,seed=1" / sweep.RUN_ARGS)  # as a run from before the record
  capsys.readouterr()
  changed = dict(methods="ce", seeds="0,1", dry_run=False,
                 set=["task.data_dir=../shared/data/glue", "num_steps=800"])
  with pytest.raises(SystemExit):
    sweep.run_all(_args(tmp_path, **changed))
  assert ("method=ce,seed=0 was started with --set (none) (now num_steps=800)"
          in capsys.readouterr().out)
  sweep.run_all(_args(tmp_path, keep_going=True, **changed))
  assert "FAILED" in capsys.readouterr().out and len(calls) == 3  # seed 1 (unrecorded) ran


def _fake_train(calls):
  """subprocess.call standing in for train.py: a finished run with records and checkpoints."""
  def call(cmd, **kw):
    wd = cmd[cmd.index("--workdir") + 1]
    seed = int(cmd[cmd.index([c for c in cmd if c.startswith("--config.seed=")][0])
                   ].split("=")[1])
    os.makedirs(os.path.join(wd, "ckpt", "200"))
    with open(os.path.join(wd, "config.json"), "w") as f:
      json.dump({"seed": seed, "loss": {"name": "ce"}}, f)
    with open(os.path.join(wd, "results.json"), "w") as f:
      json.dump({"train": {"steps": 200}, "dev": {"accuracy": 0.5 + seed / 10}}, f)
    with open(os.path.join(wd, "features_dev.npz"), "wb") as f:
      f.write(b"not a record")
    calls.append(cmd)
    return 0
  return call


def test_archive_keeps_records_and_restores_them_on_a_fresh_root(tmp_path, capsys, monkeypatch):
  """--archive copies each finished run's records (not checkpoints or features) as it
  finishes; on a fresh machine (runs/ gone) archive_runs.py --restore puts them back, the
  sweep counts them as done and the tables read them. A reused run (a link to another root's
  run) stays a link."""
  from scripts import archive_runs
  calls = []
  monkeypatch.setattr(sweep.subprocess, "call", _fake_train(calls))
  runs, arch = tmp_path / "runs", tmp_path / "results" / "runs"
  lam = dict(root=str(runs / "lam"), archive=str(arch / "lam"), methods="ce", seeds="0",
             grid=["loss.lam=0.5"], dry_run=False)
  main = dict(root=str(runs / "rte"), archive=str(arch / "rte"), methods="ce", seeds="0,1",
              dry_run=False)
  sweep.run_all(_args(tmp_path, **lam))
  os.makedirs(runs / "rte")
  os.symlink("../lam/method=ce,loss.lam=0.5,seed=0", runs / "rte" / "method=ce,seed=0")
  sweep.run_all(_args(tmp_path, **main))
  assert len(calls) == 2  # the lam run and rte seed 1; rte seed 0 is the link
  assert sorted(os.listdir(arch / "rte" / "method=ce,seed=1")) == [
      "config.json", "results.json", sweep.RUN_ARGS]
  assert os.readlink(arch / "rte" / "method=ce,seed=0") == "../lam/method=ce,loss.lam=0.5,seed=0"
  table_before, summary_before = sweep.aggregate(str(runs / "rte"))

  import shutil
  shutil.rmtree(runs)
  with pytest.raises(SystemExit):  # not restored: the sweep will not silently retrain it
    sweep.run_all(_args(tmp_path, **lam))
  assert "finished in the archive" in capsys.readouterr().out and len(calls) == 2
  archive_runs.main([str(runs), str(tmp_path / "results" / "runs"), "--restore"])
  assert capsys.readouterr().out.splitlines()[-1] == "3 restored, 0 kept"
  sweep.run_all(_args(tmp_path, **lam))
  sweep.run_all(_args(tmp_path, **dict(main, seeds="0,1,2")))
  assert len(calls) == 3 and calls[-1][calls[-1].index("--workdir") + 1].endswith("seed=2")
  assert os.path.islink(runs / "rte" / "method=ce,seed=0")
  assert not os.path.exists(runs / "rte" / "method=ce,seed=1" / "ckpt")
  os.remove(runs / "rte" / "method=ce,seed=2" / "results.json")  # back to the two seeds
  table_after, summary_after = sweep.aggregate(str(runs / "rte"))
  assert (table_after, summary_after) == (table_before, summary_before)
  # An existing run folder is never written over from the archive, even an unfinished one.
  wd = tmp_path / "other" / "method=ce,seed=1"
  os.makedirs(wd / "ckpt")
  assert not sweep.provenance.restore_run(str(arch / "rte" / "method=ce,seed=1"), str(wd))
  assert os.listdir(wd) == ["ckpt"]


def test_archive_mirrors_the_run_and_never_writes_through_links(tmp_path):
  """A retrained run's archive loses the records the run no longer has; a run of its own is
  not archived into another run's archive through a link; two hosts making the same link
  both succeed."""
  prov = sweep.provenance
  wd, dest = tmp_path / "runs" / "method=ce,seed=0", tmp_path / "arch" / "method=ce,seed=0"
  wd.mkdir(parents=True)
  (wd / "results.json").write_text(json.dumps({"train": {}}))
  (wd / "early_exit_entropy_dev.json").write_text("{}")
  assert prov.archive_run(str(wd), str(dest)) == ["early_exit_entropy_dev.json", "results.json"]
  os.remove(wd / "early_exit_entropy_dev.json")  # retrained: its old sweep is gone
  assert prov.archive_run(str(wd), str(dest)) == ["-early_exit_entropy_dev.json"]
  assert os.listdir(dest) == ["results.json"]
  other = tmp_path / "arch" / "method=scl,seed=0"
  os.symlink("method=ce,seed=0", other)
  with pytest.raises(ValueError, match="is a link"):
    prov.archive_run(str(wd), str(other))
  assert prov._link("method=ce,seed=0", str(other)) is False  # pylint: disable=protected-access
  with pytest.raises(ValueError, match="not a link to"):
    prov._link("elsewhere", str(other))  # pylint: disable=protected-access


def test_retired_runs_leave_the_archive_too(tmp_path):
  from scripts import retire_runs
  root, arch = tmp_path / "runs" / "sst2", tmp_path / "arch" / "sst2"
  for d in (root, arch):
    (d / "method=kd,seed=0").mkdir(parents=True)
    (d / "method=kd,seed=0" / "config.json").write_text(json.dumps({"seed": 0}))
  moved = retire_runs.retire(str(root), ["kd"], "pre_s3", without_field="multi_exit.kd_form",
                             archive=str(arch))
  assert moved == [str(root / "pre_s3" / "method=kd,seed=0")]
  assert os.listdir(arch) == ["pre_s3"] and os.listdir(arch / "pre_s3") == ["method=kd,seed=0"]


def test_archive_refuses_unfinished_runs_and_foreign_links(tmp_path):
  wd = tmp_path / "method=ce,seed=0"
  wd.mkdir()
  (wd / "results.json").write_text(json.dumps({"dev": {"accuracy": 0.5}}))  # eval.py only
  with pytest.raises(ValueError, match="not a finished run"):
    sweep.provenance.archive_run(str(wd), str(tmp_path / "a"))
  os.symlink(str(wd), str(tmp_path / "abs"))
  with pytest.raises(ValueError, match="absolute path"):
    sweep.provenance.archive_run(str(tmp_path / "abs"), str(tmp_path / "a2"))


def test_eval_only_results_do_not_finish_a_run(tmp_path, capsys):
  """eval.py on a half-trained run writes results.json without "train": the sweep still
  trains the run, and the aggregate leaves it out."""
  wd = tmp_path / "method=ce,seed=0"
  wd.mkdir()
  (wd / "results.json").write_text(json.dumps({"dev": {"accuracy": 0.5}}))
  sweep.run_all(_args(tmp_path, methods="ce", seeds="0"))
  assert "run:" in capsys.readouterr().out
  _, summary = sweep.aggregate(str(tmp_path))
  assert summary == {}


@pytest.mark.parametrize("kw,match", [
    ({"set": ["seed=5"]}, "sets the seed"),
    ({"grid": ["method=ce"]}, "not a grid over method"),
    ({"grid": ["model.name=org/model"]}, "cannot be part of a workdir name"),
])
def test_plan_rejects_settings_a_workdir_name_cannot_carry(tmp_path, kw, match):
  with pytest.raises(SystemExit, match=match):
    sweep.plan(_args(tmp_path, **kw))


def test_results_md_quotes_its_generated_tables(tmp_path):
  from scripts import sync_results
  assert sync_results.main(["--check"]) == 0  # RESULTS.md matches the files under results/
  (tmp_path / "t.md").write_text("| a | 1 |\n")
  doc = tmp_path / "R.md"
  doc.write_text("x\n<!-- table: t.md -->\n| a | 0 |\n<!-- /table -->\ny\n")
  assert sync_results.main(["--file", str(doc), "--check"]) == 1  # stale
  sync_results.main(["--file", str(doc)])
  assert doc.read_text() == "x\n<!-- table: t.md -->\n| a | 1 |\n<!-- /table -->\ny\n"
  doc.write_text("<!-- table: gone.md -->\n<!-- /table -->\n")
  with pytest.raises(SystemExit, match="does not exist"):
    sync_results.main(["--file", str(doc), "--check"])


def test_aggregate_another_results_file(tmp_path):
  for seed, best, last in (("0", 0.80, 0.78), ("1", 0.82, 0.84)):
    wd = tmp_path / f"method=ce,seed={seed}"
    wd.mkdir()
    (wd / "results.json").write_text(json.dumps({"train": {}, "test": {"accuracy": best}}))
    (wd / "results_latest.json").write_text(json.dumps({"test": {"accuracy": last}}))
  _, best = sweep.aggregate(str(tmp_path))
  _, last = sweep.aggregate(str(tmp_path), results="results_latest.json")
  assert best["method=ce"]["metrics"]["test/accuracy"]["mean"] == pytest.approx(0.81)
  assert last["method=ce"]["metrics"]["test/accuracy"]["mean"] == pytest.approx(0.81)
  assert last["method=ce"]["metrics"]["test/accuracy"]["std"] == pytest.approx(
      np.std([0.78, 0.84], ddof=1))
  # each summary keeps its own files
  assert json.load(open(tmp_path / "summary.json")) == best
  assert json.load(open(tmp_path / "summary_latest.json")) == last


def test_retire_runs_by_code_and_config(tmp_path):
  """Runs first trained before a commit (or with no revision record, one unknown to git, or
  lacking a config field) move to root/<tag>/; later code, other methods and '+dirty'
  descendants stay; a bad --before moves nothing."""
  import shutil
  import subprocess
  from scripts import retire_runs
  if shutil.which("git") is None:
    pytest.skip("git is not installed")
  repo = tmp_path / "repo"
  repo.mkdir()
  git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "-c",
         "commit.gpgsign=false"]
  subprocess.run(git + ["init", "-q"], check=True)
  revs = []
  for i in range(3):  # a line of history: revs[0] -> revs[1] -> revs[2]
    (repo / "f.py").write_text(str(i))
    subprocess.run(git + ["add", "f.py"], check=True)
    subprocess.run(git + ["commit", "-qm", str(i)], check=True)
    revs.append(subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True,
                               check=True).stdout.strip())
  root = tmp_path / "sweep"

  def run(name, versions=None, finished=True, config=None):
    d = root / name
    d.mkdir(parents=True)
    json.dump(config or {"multi_exit": {"kd_form": "add"}}, open(d / "config.json", "w"))
    train = {} if versions is None else {"code_versions": versions}
    if finished:
      json.dump({"train": train}, open(d / "results.json", "w"))
    else:
      (d / "ckpt" / "40" / "meta").mkdir(parents=True)
      json.dump(train, open(d / "ckpt" / "40" / "meta" / "metadata", "w"))

  run("method=2st,seed=0", [revs[0]])                     # before revs[1]: retired
  run("method=2st,seed=1", [revs[2] + "+dirty", revs[0]])  # first trained after: kept
  run("method=alt,seed=0")                                 # no record: retired
  run("method=alt,seed=1", [revs[1]], finished=False)      # unfinished, at the commit: kept
  run("method=alt,seed=2", [revs[0]], finished=False)      # unfinished, before: retired
  run("method=alt,seed=3", ["e" * 40])                     # unknown to git: retired
  run("method=jt,seed=0", [revs[0]])                       # another method: kept
  run("method=kd,seed=0", [revs[2]], config={"multi_exit": {}})
  moved = retire_runs.retire(str(root), ["2st", "alt"], "old", before=revs[1], repo=str(repo))
  assert sorted(os.path.basename(m) for m in moved) == [
      "method=2st,seed=0", "method=alt,seed=0", "method=alt,seed=2", "method=alt,seed=3"]
  assert sorted(os.listdir(root / "old")) == sorted(os.path.basename(m) for m in moved)
  assert {"method=2st,seed=1", "method=alt,seed=1", "method=jt,seed=0"} <= set(os.listdir(root))
  moved = retire_runs.retire(str(root), ["kd", "jt"], "pre", without_field="multi_exit.kd_form")
  assert [os.path.basename(m) for m in moved] == ["method=kd,seed=0"]
  run("method=alt,seed=0")  # retrained outside git, say: retired again, beside the first one
  moved = retire_runs.retire(str(root), ["alt"], "old", before=revs[1], repo=str(repo))
  assert [os.path.basename(m) for m in moved] == ["method=alt,seed=0.2"]
  with pytest.raises(ValueError, match="--before as a commit"):
    retire_runs.retire(str(root), ["jt"], "x", before="f" * 40, repo=str(repo))
  assert "method=jt,seed=0" in os.listdir(root)  # a bad --before moves nothing


def test_archive_runs_tree_round_trip(tmp_path, capsys):
  """scripts/archive_runs.py: a whole runs tree (nested roots, retired runs, reuse links) to
  the archive and back; unfinished runs and non-record files stay behind."""
  from scripts import archive_runs
  runs, arch = tmp_path / "runs", tmp_path / "archive"

  def run(rel, finished=True):
    wd = runs / rel
    os.makedirs(wd / "ckpt" / "100")
    (wd / "sweep_args.json").write_text("{}")
    if finished:
      (wd / "results.json").write_text(json.dumps({"train": {}, "dev": {"accuracy": 0.7}}))
      (wd / "metrics.jsonl").write_text('{"step": 1}\n')
      (wd / "early_exit_entropy_dev.md").write_text("| t |")
      (wd / "train.log").write_text("log")

  run("single/mr/method=ce,seed=0")
  run("single/mr/pre_s3/method=ce,seed=0")  # a retired run
  run("lambda/mr/method=scl,loss.lam=0.9,seed=0")
  run("single/mr/method=acl,seed=0", finished=False)
  os.symlink("../../lambda/mr/method=scl,loss.lam=0.9,seed=0", runs / "single/mr/method=scl,seed=0")
  archive_runs.main([str(runs), str(arch)])
  assert capsys.readouterr().out.splitlines()[-1] == "4 archived, 0 unchanged, 1 unfinished, 0 failed"
  assert sorted(os.listdir(arch / "single/mr/method=ce,seed=0")) == [
      "early_exit_entropy_dev.md", "metrics.jsonl", "results.json", "sweep_args.json"]
  assert not (arch / "single/mr/method=acl,seed=0").exists()
  os.symlink(str(runs / "single/mr/method=ce,seed=0"), runs / "single/mr/method=cosine,seed=0")
  with pytest.raises(SystemExit):  # an absolute link cannot travel; the others still do
    archive_runs.main([str(runs), str(arch)])
  assert capsys.readouterr().out.splitlines()[-1] == (
      "0 archived, 4 unchanged, 1 unfinished, 1 failed")

  import shutil
  shutil.rmtree(runs / "single")  # the unfinished run (its checkpoints) goes too
  archive_runs.main([str(runs), str(arch), "--restore"])
  assert capsys.readouterr().out.splitlines()[-1] == "3 restored, 1 kept"  # lambda still there
  assert json.load(open(runs / "single/mr/method=scl,seed=0/results.json"))["dev"] == {
      "accuracy": 0.7}
  assert (runs / "single/mr/pre_s3/method=ce,seed=0/metrics.jsonl").exists()
  with pytest.raises(SystemExit, match="no archive"):
    archive_runs.main([str(runs), str(tmp_path / "nothing"), "--restore"])


def test_committed_run_archive_is_whole():
  """Every run under results/runs (the committed records) is a finished run with its config,
  or a link to one inside the archive: what a fresh machine restores must be complete."""
  from scripts import archive_runs
  arch = os.path.join(sweep.REPO, "results", "runs")
  if not os.path.isdir(arch):
    return
  for rel in archive_runs.find_runs(arch):
    path = os.path.join(arch, rel)
    if os.path.islink(path):
      target = os.path.realpath(path)
      assert target.startswith(os.path.realpath(arch) + os.sep), f"{rel} leaves the archive"
      path = target
    assert sweep.provenance.run_finished(path), f"{rel} is not a finished run"
    assert os.path.isfile(os.path.join(path, "config.json")), f"{rel} has no config.json"


def test_committed_rerun_table_is_what_the_committed_records_give(tmp_path, capsys):
  """results/single/glue_rerun.md (quoted in RESULTS.md) is results_tables.py's output on the
  committed run records, byte for byte: the table can be checked against its runs."""
  import shutil
  from scripts import results_tables
  table = os.path.join(sweep.REPO, "results", "single", "glue_rerun.md")
  head = open(table).read().split("\n", 1)[0]
  tasks = [t.lower() for t in re.findall(r"\| (\w+) \(dev/", open(table).read())]
  root = tmp_path / "single"  # a copy: aggregation writes summaries into the task folders
  shutil.copytree(os.path.join(sweep.REPO, "results", "runs", "single"), root, symlinks=True)
  out = tmp_path / "table.md"
  results_tables.main(["--root", str(root), "--tasks", ",".join(dict.fromkeys(tasks)),
                       "--metrics", "headline", "--methods", "ce,scl,acl_embed,acl,gloss",
                       "--vs", "ce", "--out", str(out)])
  assert head.startswith("**headline**")
  assert out.read_text() == open(table).read()


@pytest.mark.parametrize("table_name,results,summary", [
    ("mr.md", "results.json", "summary.json"),  # dev-selected checkpoints
    ("mr_latest.md", "results_latest.json", "summary_latest.json"),  # final weights
])
def test_committed_lambda_table_is_what_the_committed_records_give(tmp_path, table_name,
                                                                   results, summary):
  """results/lambda/mr.md and mr_latest.md (claim 6, quoted in RESULTS.md) are
  plot_lambda.py's output on the committed lambda-grid records, byte for byte, the per-seed
  spreads included."""
  import shutil
  from scripts import plot_lambda
  table = os.path.join(sweep.REPO, "results", "lambda", table_name)
  root = tmp_path / "mr"  # a copy: aggregation writes the summary into the root
  shutil.copytree(os.path.join(sweep.REPO, "results", "runs", "lambda", "mr"), root,
                  symlinks=True)
  sweep.aggregate(str(root), results=results)
  out = tmp_path / "table.md"
  plot_lambda.main([str(root), "--summary", summary, "--metric", "test/accuracy",
                    "--vs", "acl", "--out", str(tmp_path / "l.png"), "--table", str(out)])
  assert "| acl |" in out.read_text()
  assert out.read_text() == open(table).read()


@pytest.mark.parametrize("axis,field", [("gamma", "loss.gamma_keep"), ("sigma", "loss.sigma")])
def test_committed_gloss_ablation_tables_are_what_the_committed_records_give(tmp_path, axis,
                                                                            field):
  """results/gloss_ablation/<axis>.md and mr_<axis>_spread.md (claim 14, quoted in RESULTS.md)
  are results_tables.py's and plot_lambda.py's output on the committed G-Loss ablation records,
  byte for byte."""
  import shutil
  from scripts import plot_lambda, results_tables
  arch = os.path.join(sweep.REPO, "results", "runs")
  for sub in ("gloss_gamma", "gloss_sigma"):  # sigma's preset point is a link into gamma's
    shutil.copytree(os.path.join(arch, sub), tmp_path / sub, symlinks=True)
  want = os.path.join(sweep.REPO, "results", "gloss_ablation")
  out = tmp_path / "table.md"
  results_tables.main(["--root", str(tmp_path / f"gloss_{axis}"), "--tasks", "mr", "--metrics",
                       "test/accuracy,test/macro_f1,test/silhouette_macro,dev/macro_f1",
                       "--out", str(out)])
  assert out.read_text() == open(os.path.join(want, f"{axis}.md")).read()
  root = tmp_path / f"gloss_{axis}" / "mr"  # results_tables wrote its summary.json
  spread = tmp_path / "spread.md"
  plot_lambda.main([str(root), "--axis", field, "--metric", "test/accuracy",
                    "--out", str(tmp_path / "p.png"), "--table", str(spread)]
                   + (["--logx"] if axis == "sigma" else []))
  assert "| gloss |" in spread.read_text()
  assert spread.read_text() == open(os.path.join(want, f"mr_{axis}_spread.md")).read()
