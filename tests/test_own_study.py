"""A study of one's own (studies/example_csv.py, README "Your own study"), run as a user would:
sweep --stage 1, --status and report, through train.py at runlocal scale on a tiny model.
With --executor ray (a real local Ray cluster), the same study records the same rows."""
import csv
import json
import os
import subprocess
import sys

import pytest

from acl_jax.study import loader, planner, protocol as proto
from acl_jax.study import records
from tests import helpers

REPORT = """# My study

<!-- table: claims -->
<!-- /table -->

<!-- table: stage1 -->
<!-- /table -->

<!-- table: stage1_scores -->
<!-- /table -->

<!-- table: lr -->
<!-- /table -->
"""


def _write_csv(path, n, seed):
  """Two classes told apart by their words."""
  words = {"good": ["great", "fine", "lovely", "superb"], "bad": ["awful", "dull", "poor",
                                                                 "weak"]}
  rows = []
  for i in range(n):
    label = "good" if (i + seed) % 2 else "bad"
    ws = words[label]
    rows.append({"text": f"a {ws[i % 4]} and {ws[(i + 1) % 4]} film number {i}",
                 "label": label})
  with open(path, "w", newline="") as f:
    w = csv.DictWriter(f, ["text", "label"])
    w.writeheader()
    w.writerows(rows)


@pytest.fixture(scope="module")
def study_file(tiny_model_dir, tmp_path_factory):
  """A user's protocol file: the example study on their files, a tiny model, runlocal, and
  seeds 0-1 (no second look): 4 runs, CE seed 0 being the lr run."""
  folder = tmp_path_factory.mktemp("own_study")
  _write_csv(folder / "train.csv", 64, 0)
  _write_csv(folder / "dev.csv", 32, 1)
  path = folder / "my_study.py"
  path.write_text(
      "from studies.example_csv import study\n"
      f"STUDY = study({str(folder / 'train.csv')!r}, {str(folder / 'dev.csv')!r}, "
      f"runlocal=True, extra=('model.name={tiny_model_dir}',), "
      "look_seeds=((0, 1), ()))\n")
  return str(path)


def _sweep(*args, timeout=600):
  out = subprocess.run([sys.executable, "-m", "scripts.sweep", *args], cwd=helpers.REPO,
                       env=helpers.env(), capture_output=True, text=True, timeout=timeout)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  return out.stdout


def _content(row):
  """What a row says of its run, without where and when it ran."""
  drop = ("seconds", "cpu_seconds", "workers", "time_spans", "timed_on")
  return {k: v for k, v in row.items() if k not in drop}


@pytest.fixture(scope="module")
def local_study(study_file, tmp_path_factory):
  root = tmp_path_factory.mktemp("local")
  recs = root / "records"
  _sweep("--protocol", study_file, "--stage", "1", "--root", str(root / "runs"),
         "--records", str(recs), "--workers", "2")
  return root, recs


def test_own_study_runs_reports_and_resumes(study_file, local_study):
  root, recs = local_study
  p = loader.load(study_file)
  rows = records.read_all(str(recs))
  assert [r["run"] for r in rows["lr"]] == ["task=mine,method=ce,optim.lr=5e-5,seed=0"]
  assert sorted(r["run"] for r in rows["stage1"]) == [
      f"task=mine,method={m},seed={s}" for m in ("acl", "ce") for s in (0, 1)]
  # CE seed 0 is the lr run's row, not trained twice
  ce0 = next(r for r in rows["stage1"] if r["run"] == "task=mine,method=ce,seed=0")
  assert ce0["reused_from"] == "lr"
  assert len({r["train"]["params_sha256"] for r in rows["stage1"]}) == 4
  # each of the 2 workers trained on its share of the cores: its XLA threads, in its row
  share = max(1, len(os.sched_getaffinity(0)) // 2)
  assert all(1 <= r["train"]["devices"]["threads"] <= share for r in rows["stage1"])
  d = planner.decisions(p, rows)
  (v,) = d.verdicts.values()
  assert v.n == 2 and v.word in proto.VERDICT_WORDS and not d.ready
  status = _sweep("--protocol", study_file, "--status", "--records", str(recs))
  assert "| 1 | 4 |" in status, status  # the lr run and 3 trained comparison runs
  # Started again: every run is recorded, nothing trains.
  again = _sweep("--protocol", study_file, "--stage", "1", "--root", str(root / "runs"),
                 "--records", str(recs))
  assert "run: " not in again
  assert records.read_all(str(recs)) == rows
  # The report fills the user's own file, and is then in sync.
  doc = root / "REPORT.md"
  doc.write_text(REPORT)
  cmd = [sys.executable, "-m", "scripts.report", "--protocol", study_file, "--records",
         str(recs), "--file", str(doc)]
  out = subprocess.run(cmd, cwd=helpers.REPO, env=helpers.env(), capture_output=True,
                       text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  text = doc.read_text()
  assert "| My task | ACL − CE | lower end > -1 | 2 |" in text, text
  assert "ACL matches or beats CE on my task" in text and "*pending*" not in text
  # in the study's own terms: its budget as the runs trained it (runlocal: 6 steps), no paper
  # column where no claim has a published number, no lr column that no rule of it trains
  assert "My task 6 steps, lr 5e-5" in text and "epochs" not in text, text
  assert "| paper |" not in text and "lr 1e-4" not in text
  assert subprocess.run(cmd + ["--check"], cwd=helpers.REPO, env=helpers.env(),
                        timeout=300).returncode == 0
  assert not os.path.exists(os.path.join(str(root), "PILOTS.md"))


@pytest.mark.slow
def test_own_study_through_ray_records_the_same_rows(study_file, local_study,
                                                     tmp_path_factory):
  root = tmp_path_factory.mktemp("ray")
  with helpers.local_ray() as address:
    _sweep("--protocol", study_file, "--stage", "1", "--root", str(root / "runs"),
           "--records", str(root / "records"), "--executor", "ray", "--address", address)
  got = records.read_all(str(root / "records"))
  want = records.read_all(str(local_study[1]))
  for name in ("lr", "stage1"):
    assert ({r["run"]: _content(r) for r in got[name]}
            == {r["run"]: _content(r) for r in want[name]}), name
  assert json.dumps(sorted(r["run"] for r in got["stage1"])) == json.dumps(
      sorted(r["run"] for r in want["stage1"]))
