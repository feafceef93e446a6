"""eval.py's early-exit sweep on a tiny multi-exit run, and its input errors."""
import json
import os

import pytest

from tests import helpers


@pytest.fixture(scope="module")
def jt_workdir(tiny_model_dir, tmp_path_factory):
  from acl_jax.train import loop
  wd = str(tmp_path_factory.mktemp("jt"))
  loop.train_and_evaluate(helpers.tiny_config(tiny_model_dir, "runlocal,jt"), wd)
  return wd


def test_per_exit_metrics_and_sweep(jt_workdir, tmp_path):
  res = json.load(open(os.path.join(jt_workdir, "results.json")))
  assert {"exit_1/accuracy", "exit_2/accuracy"} <= set(res["dev"])
  d = res["dev"]
  assert d["exit_mean/accuracy"] == pytest.approx((d["exit_1/accuracy"] + d["exit_2/accuracy"]) / 2)
  assert res["train"]["main_metric"] == "exit_mean/accuracy"
  png = str(tmp_path / "curve.png")
  p = helpers.run_py(["eval.py", "--workdir", jt_workdir, "--workdir", jt_workdir, "--exit_policy",
                      "entropy", "--thresholds", "0.01,0.7", "--exit_batch_size", "8",
                      "--exit_repeats", "2", "--plot", png])
  assert p.returncode == 0, p.stderr[-3000:]
  rows = json.load(open(os.path.join(jt_workdir, "early_exit_entropy_dev.json")))["rows"]
  assert [r["threshold"] for r in rows] == [0.01, 0.7]
  for r in rows:
    assert 1.0 <= r["mean_layers"] <= 2.0 and r["speedup"] > 0 and r["agreement"] == 1.0
    # the full model is timed beside each threshold's early-exit passes (paired timing)
    assert r["speedup"] == pytest.approx(r["time_full_s"] / r["time_fast_s"])
  assert os.path.getsize(png) > 0


def test_early_exit_input_errors(jt_workdir, ce_run):
  p = helpers.run_py(["eval.py", "--workdir", jt_workdir, "--exit_policy", "patience",
                      "--thresholds", "1.5"])
  assert p.returncode != 0 and "patience" in p.stderr
  p = helpers.run_py(["eval.py", "--workdir", jt_workdir, "--exit_policy", "softmax",
                      "--thresholds", "0.1"])
  assert p.returncode != 0 and "Unknown --exit_policy" in p.stderr
  p = helpers.run_py(["eval.py", "--workdir", jt_workdir, "--exit_policy", "entropy",
                      "--thresholds", "0.1", "--split", "dev,test"])
  assert p.returncode != 0 and "give a single --split" in p.stderr
  from acl_jax.exits.workdir import early_exit_workdir
  with pytest.raises(ValueError, match="exits='all'"):  # a single-exit run
    early_exit_workdir(ce_run, "dev", "entropy", [0.1])


def test_untimed_sweep(jt_workdir, tmp_path):
  from acl_jax.exits import plot
  from acl_jax.exits.workdir import early_exit_workdir
  md, js = early_exit_workdir(jt_workdir, "dev", "entropy", [0.01, 0.7], batch_size=8,
                              repeats=0)
  rows = json.load(open(js))["rows"]
  for r in rows:  # no timing, the rest as a timed sweep gives it
    assert r["speedup"] is None and r["time_fast_s"] is None and r["time_full_s"] is None
    assert 1.0 <= r["mean_layers"] <= 2.0 and r["agreement"] == 1.0
  assert "| — |" in open(md).read()
  png = plot.plot([js], str(tmp_path / "q.png"))
  assert os.path.getsize(png) > 0


def test_evaluate_latest_checkpoint(jt_workdir):
  from acl_jax import evaluate
  res = json.load(open(os.path.join(jt_workdir, "results.json")))
  latest = evaluate.evaluate_workdir(jt_workdir, ["dev"], checkpoint="latest")
  assert latest["checkpoint_step"] == res["train"]["final_step"]  # the final weights
  best = evaluate.evaluate_workdir(jt_workdir, ["dev"])
  assert best["checkpoint_step"] == res["checkpoint_step"] == res["train"]["best_step"]
  assert best["dev"]["accuracy"] == pytest.approx(res["dev"]["accuracy"])
  with pytest.raises(ValueError, match=r"Unknown checkpoint 'last'; known: \['best', 'latest'\]"):
    evaluate.evaluate_workdir(jt_workdir, ["dev"], checkpoint="last")


def test_a_stage_runs_evaluations_come_before_its_row(jt_workdir, tmp_path):
  """What a stage sweep does once a multi-exit run has trained, on the host that trained it
  (`acl_jax.study.steps.RunSteps.after`, with the command runner an executor hands it):
  eval.py's early-exit sweep on dev (untimed: seed 1) and the final weights' test scores, each timed
  into the run's time; then the row, holding both; then the checkpoints pruned. Done again,
  it runs nothing: the row is in."""
  import shutil  # pylint: disable=import-outside-toplevel
  from acl_jax.study import executors, records, runs  # pylint: disable=import-outside-toplevel
  from acl_jax.study import jobs, steps, timing  # pylint: disable=import-outside-toplevel
  wd = str(tmp_path / "run")
  shutil.copytree(jt_workdir, wd, ignore=shutil.ignore_patterns("early_exit_*", "results_*.json"))
  shutil.copy(os.path.join(jt_workdir, "results.json"), wd)
  job = jobs.Job({"task": "local", "method": "jt", "seed": "1"},
                  "configs/quickstart.py:runlocal,jt", [], wd, "s", early_exit="0.01,0.7",
                  latest="test")
  rec = str(tmp_path / "s.jsonl")
  run_steps = steps.RunSteps(job, rec, keep_checkpoints=False)
  commands = []

  def call(argv, **kw):  # as an executor's: the command's exit code and CPU seconds
    commands.append(argv[2:])
    return executors.call(argv, cwd=helpers.REPO, env=helpers.env(), **kw)
  ran = executors.RunResult(job.name, executors.RAN, returncode=0, wall_s=5.0, cpu_s=4.0)
  res = run_steps.after(None, ran, call)
  assert res.returncode == 0, open(os.path.join(wd, "eval.log")).read()[-3000:]
  assert commands == [
      ["--workdir", wd, "--exit_policy", "entropy", "--thresholds", "0.01,0.7", "--split",
       "dev", "--exit_repeats", "0"],
      ["--workdir", wd, "--checkpoint", "latest", "--split", "test"]]
  (row,) = records.read(rec)
  assert [r["threshold"] for r in row["early_exit"]["entropy"]] == [0.01, 0.7]
  assert all(r["speedup"] is None for r in row["early_exit"]["entropy"])  # untimed
  assert row["latest"]["checkpoint_step"] == row["train"]["final_step"]
  # what trained it, from train.py's record: here the CPU, so the row is timed on the CPU
  # and the host threads it ran on: the cores train.py was pinned to (XLA:CPU's pool)
  devices = dict(row["train"]["devices"])
  assert devices.pop("threads") >= 1
  assert devices == {"platform": "cpu", "kind": "cpu", "count": 1}
  assert row["timed_on"] == timing.machine() and ", host " not in row["timed_on"]
  assert "test/accuracy" in records.scores(row, "latest")
  spent = runs.read_timing(wd)
  assert len(spent["spans"]) == 3 and spent["cpu_seconds"] > 4.0  # training, then 2 evals
  assert not os.path.exists(os.path.join(wd, "ckpt")) and not os.path.exists(
      os.path.join(wd, "best"))
  assert run_steps.done()
  assert run_steps.after(None, ran, call).returncode == 0 and len(commands) == 2
  assert len(records.read(rec)) == 1
