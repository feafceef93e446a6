"""The HF PyTorch loop as an arm of a protocol (framework "torch"): planned, run by the sweep
as benchmarks/hf_run.py, and recorded like any run."""
import dataclasses
import os
import subprocess
import sys

import pytest

from acl_jax.study import checks, estimates, identity as ident, jobs, planner, protocol as proto
from acl_jax.study import records
from studies.papers import PAPERS
from tests import helpers


def _protocol():
  return dataclasses.replace(PAPERS, arms={2: (
      proto.Arm("mr", ("ce",), seeds=(0, 1)),
      proto.Arm("mr", ("ce",), seeds=(0, 1), framework="torch"))}, rules={2: ()},
      described=())


def test_a_torch_arm_is_planned_and_commanded_like_any_run():
  p = _protocol()
  st = planner.TaskState("mr", lr="5e-5", epochs=3)
  runs = estimates.later_stage_runs(p, 2, {"mr": st})
  torch = [r for r in runs if r.framework == "torch"]
  assert [r.name for r in torch] == [f"task=mr,method=ce,framework=torch,seed={s}"
                                     for s in (0, 1)]
  assert {r.name for r in runs if r.framework == "jax"} == {
      f"task=mr,method=ce,seed={s}" for s in (0, 1)}
  job = jobs.job_of(torch[1], "/runs")
  cmd = jobs.torch_command(job)
  assert cmd[1:4] == ["-m", "benchmarks.hf_run", "--workdir"]
  assert cmd[4] == job.workdir
  flags = dict(zip(cmd[5::2], cmd[6::2]))
  assert flags == {"--task": "mr", "--data_dir": "../shared/data", "--max_length": "64",
                   "--lr": "5e-5", "--epochs": "3", "--seed": "1"}
  assert jobs.command(job, []) == cmd
  # the torch and jax runs of one seed are other runs
  jax_job = jobs.job_of(next(r for r in runs if r.framework == "jax"), "/runs")
  assert ident.settings_identity(jax_job.config, jax_job.set, jax_job.settings, jobs.REPO) \
      != ident.settings_identity(job.config, job.set, job.settings, jobs.REPO)


def test_a_torch_arm_trains_ce_alone():
  with pytest.raises(ValueError, match="trains CE alone"):
    checks.check(dataclasses.replace(PAPERS, arms={2: (proto.Arm("mr", ("acl",),
                                                                  framework="torch"),)}))
  with pytest.raises(ValueError, match="framework 'tf'"):
    checks.check(dataclasses.replace(PAPERS, arms={2: (proto.Arm("mr", ("ce",),
                                                                  framework="tf"),)}))


@pytest.mark.needs_shared_data
def test_an_hf_run_folder_is_recorded_like_a_train_py_run(tmp_path):
  pytest.importorskip("torch")
  wd = str(tmp_path / "hf")
  out = subprocess.run(
      [sys.executable, "-m", "benchmarks.hf_run", "--workdir", wd, "--task", "mr",
       "--data_dir", helpers.SHARED_DATA, "--max_length", "32", "--epochs", "2", "--lr",
       "5e-5", "--seed", "0", "--max_train", "64", "--max_eval", "32",
       "--torch_threads", "1"],
      cwd=helpers.REPO, env=helpers.env(), capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  settings = {"task": "mr", "method": "ce", "framework": "torch", "seed": "0"}
  row = records.row_from_run(wd, "stage2", settings, "configs/textgcn.py:mr,ce", [])
  assert row["run"] == "task=mr,method=ce,framework=torch,seed=0"
  assert row["overrides"] == {"framework": "torch"}
  assert row["budget"]["num_epochs"] == 2 and row["budget"]["lr"] == 5e-5
  assert len(row["evals"]) == 2 and "macro_f1" in row["evals"][-1]["dev"]
  assert row["train"]["framework"] == "torch" and row["code"]
  score = PAPERS.score(row)  # MR: the final weights on test, as for train.py's runs
  assert score is not None and 0 <= score <= 100
  again = subprocess.run([sys.executable, "-m", "benchmarks.hf_run", "--workdir", wd,
                          "--task", "mr", "--data_dir", helpers.SHARED_DATA, "--max_length",
                          "32", "--epochs", "2", "--lr", "5e-5"], cwd=helpers.REPO,
                         env=helpers.env(), capture_output=True, text=True, timeout=300)
  assert again.returncode == 0 and "finished" in again.stdout
  assert os.path.isfile(os.path.join(wd, "results_latest.json"))
