"""The run-folder reader (acl_jax/study/runs.py) and the rows made from it (acl_jax/study/records.py):
every file present, files missing or cut short, rows checked when made, and collecting a run
twice or after a crash. Fast: no training."""
import dataclasses
import json
import os

import pytest

from acl_jax.study import aggregate, records, runs, timing
from tests import helpers

NAME = "task=rte,method=acl,loss.lam=0.5,seed=1"
SETTINGS = records.parse_name(NAME)
CONFIG = {"seed": 1, "num_steps": 0, "num_epochs": 3, "batch_size": 32, "eval_every": 50,
          "task": {"max_length": 64}, "optim": {"lr": 2e-5}, "loss": {"lam": 0.5},
          "_origin": {"command": "train.py"}}
RESULTS = {"checkpoint_step": 150,
           "dev": {"accuracy": 0.7, "num_examples": 277,
                   "per_class": {"a": {"recall": 0.8, "support": 100},
                                 "b": {"recall": 0.6, "support": 177}}},
           "train": {"final_step": 234, "best_step": 150, "early_stopped_at": 200,
                     "code_versions": ["r1"], "params_sha256": "abc"}}
METRICS = [{"step": 10, "kind": "train", "loss": 1.0},
           {"step": 50, "kind": "dev", "accuracy": 0.6, "num_examples": 277.0, "note": "x"},
           {"step": 150, "kind": "dev", "accuracy": 0.7}]


def _write(wd, files: dict):
  os.makedirs(wd, exist_ok=True)
  for name, body in files.items():
    with open(os.path.join(wd, name), "w") as f:
      f.write(body if isinstance(body, str) else json.dumps(body))
  return str(wd)


def _full(wd):
  """A finished run folder with every file the reader reads."""
  return _write(wd, {
      "config.json": CONFIG,
      "config_history.jsonl": json.dumps({"step": 100, "changes": {"num_steps": [0, 500]}}) + "\n",
      "metrics.jsonl": "".join(json.dumps(r) + "\n" for r in METRICS) + '{"step": 200, "ki',
      "results.json": RESULTS,
      "results_latest.json": {"checkpoint_step": 234, "dev": {"accuracy": 0.66}},
      "early_exit_entropy_dev.json": {"rows": [{"threshold": 0.1, "accuracy": 0.6}]},
      "early_exit_entropy_test.json": {"rows": []},  # not a dev sweep: not read
      "sweep_time.json": {"seconds": 812.44, "attempts": 1, "cpu_seconds": 790.26,
                          "cpu_attempts": 1, "workers": 2, "run": NAME, "open": False,
                          "spans": [{"end": 1.0, "seconds": 812.44}]},
      "sweep_args.json": {"config": "configs/glue.py:rte,acl", "set": ["num_epochs=3"]}})


def test_a_folder_with_every_file(tmp_path):
  wd = _full(tmp_path / NAME)
  run = runs.read(wd)
  assert run.finished and run.name == NAME
  assert run.config["num_steps"] == 500 and run.started["num_steps"] == 0  # a resume extended it
  assert "_origin.command" not in run.started and run.config["task.max_length"] == 64
  assert run.results == RESULTS and run.latest["checkpoint_step"] == 234
  assert run.evals == [{"step": 50, "dev": {"accuracy": 0.6}},
                       {"step": 150, "dev": {"accuracy": 0.7}}]  # the cut line is skipped
  assert run.early_exit == {"entropy": [{"threshold": 0.1, "accuracy": 0.6}]}
  assert run.timing["seconds"] == 812.44 and run.sweep_args["set"] == ["num_epochs=3"]
  # the budget the run was started with, and the steps it ran
  assert run.budget == {"num_steps": 0, "num_epochs": 3, "batch_size": 32, "max_length": 64,
                        "lr": 2e-5, "eval_every": 50, "steps_run": 234,
                        "early_stopped_at": 200}
  assert runs.scores(RESULTS) == {"dev": {"accuracy": 0.7, "per_class_recall": {"a": 0.8, "b": 0.6},
                                          "per_class_support": {"a": 100, "b": 177}}}
  with pytest.raises(dataclasses.FrozenInstanceError):
    run.results = {}


def test_the_row_of_a_full_folder_keeps_its_keys_and_order(tmp_path):
  """The row's JSON, byte for byte: the record files' format."""
  wd = _full(tmp_path / NAME)
  row = records.row_from_run(wd, "s", SETTINGS, "configs/glue.py:rte,acl", ["b=2", "a=1"])
  m = timing.machine()
  want = (
      '{"sweep": "s", "run": "task=rte,method=acl,loss.lam=0.5,seed=1", "task": "rte", '
      '"method": "acl", "seed": 1, "overrides": {"loss.lam": "0.5"}, '
      '"config": "configs/glue.py:rte,acl", "set": ["a=1", "b=2"], '
      '"budget": {"num_steps": 0, "num_epochs": 3, "batch_size": 32, "max_length": 64, '
      '"lr": 2e-05, "eval_every": 50, "steps_run": 234, "early_stopped_at": 200}, '
      '"evals": [{"step": 50, "dev": {"accuracy": 0.6}}, {"step": 150, "dev": {"accuracy": 0.7}}], '
      '"final": {"checkpoint_step": 150, "dev": {"accuracy": 0.7, '
      '"per_class_recall": {"a": 0.8, "b": 0.6}, "per_class_support": {"a": 100, "b": 177}}}, '
      '"latest": {"checkpoint_step": 234, "dev": {"accuracy": 0.66}}, '
      '"early_exit": {"entropy": [{"threshold": 0.1, "accuracy": 0.6}]}, '
      f'"timed_on": {json.dumps(m)}, "seconds": 812.4, "cpu_seconds": 790.3, "workers": 2, '
      '"time_spans": [{"end": 1.0, "seconds": 812.44}], '
      '"train": {"final_step": 234, "best_step": 150, "early_stopped_at": 200, '
      '"params_sha256": "abc"}, "code": ["r1"]}')
  assert json.dumps(row) == want


def test_missing_files_read_as_absent(tmp_path):
  summary = os.path.join(_write(tmp_path, {"summary.md": "x"}), "summary.md")  # no folder
  for wd in (str(tmp_path / "nowhere"), _write(tmp_path / "empty", {}), summary):
    run = runs.read(wd)
    assert not run.finished and run.budget == {} and run.evals == [] and run.early_exit == {}
    assert (run.config, run.started, run.results, run.latest, run.timing, run.sweep_args) == (
        None,) * 6
  # results.json alone: finished, with no config, evaluations or timing
  wd = _write(tmp_path / NAME, {"results.json": {"train": {"final_step": 9}}})
  row = records.row_from_run(wd, "s", SETTINGS)
  assert row["budget"] == {"steps_run": 9} and row["evals"] == [] and "seconds" not in row
  assert "latest" not in row and "early_exit" not in row and row["code"] == []


def test_files_cut_short_read_as_absent(tmp_path):
  """A results.json half written (copied in half, a disk full) is no finished run; a config,
  latest scores or timing cut short is left out of the row, not an error."""
  wd = _full(tmp_path / "runs" / NAME)
  with open(os.path.join(wd, "results.json"), "w") as f:
    f.write(json.dumps(RESULTS)[:40])
  run = runs.read(wd)
  assert run.results is None and not run.finished
  with pytest.raises(ValueError, match="not a finished run"):
    records.row_from_run(wd, "s", SETTINGS)
  assert aggregate.finished(str(tmp_path / "runs")) == []
  _write(wd, {"results.json": RESULTS, "config.json": json.dumps(CONFIG)[:30],
              "results_latest.json": '{"checkpoint', "sweep_time.json": ""})
  row = records.row_from_run(wd, "s", SETTINGS)
  assert row["budget"] == {"steps_run": 234, "early_stopped_at": 200}
  assert "latest" not in row and "seconds" not in row
  assert aggregate.flat_config(wd) == {}
  # a history line that is not a change record: the config as trained is unknown
  _write(wd, {"config.json": CONFIG, "config_history.jsonl": '{"step": 1, "changes": {"a": 5}}\n'})
  assert runs.read(wd).config is None and runs.read(wd).started["num_steps"] == 0


def test_a_timing_copied_with_another_run_is_not_this_runs(tmp_path):
  wd = _full(tmp_path / "task=rte,method=acl,loss.lam=0.5,seed=2")  # seed 1's sweep_time.json
  assert runs.read(wd).timing is None
  assert "seconds" not in records.row_from_run(wd, "s", {**SETTINGS, "seed": "2"})
  timing.add_time(wd, 5.0, cpu=4.0)  # this folder's evaluations: its own time starts anew
  spent = runs.read_timing(wd)
  assert (spent["seconds"], spent["run"], len(spent["spans"])) == (5.0, runs.folder_name(wd), 1)


def _row(**kw):
  return {"sweep": "s", "run": "task=rte,method=ce,seed=0", "task": "rte", "method": "ce",
          "seed": 0, "overrides": {}, "budget": {}, "code": [], **kw}


@pytest.mark.parametrize("bad, says", [
    (dict(seed="0"), "'seed' is '0', not int"),
    (dict(task="mr"), "run 'task=rte,method=ce,seed=0' says task=rte, the row task='mr'"),
    (dict(run="task=rte,method=ce"), None),  # no seed in the name: fine, the column has it
    (dict(run="rte-ce-0"), "is not a run name"),
    (dict(run="task=rte,task=mr,seed=0"), "names a setting twice"),
    (dict(sweep="records/s"), "is not a record name"),
    (dict(overrides={"loss.lam": "0.5"}), "are not the run's settings beyond"),
    (dict(evals=[{"step": 1}]), "'evals' is"),
    (dict(seconds="812"), "'seconds' is '812', not float"),
    (dict(scores={}), "has 'scores', which is no field of a Row"),
    (dict(timing_incomplete=1), "not bool"),
])
def test_a_bad_row_is_refused_with_what_is_wrong(bad, says):
  if says is None:
    records.check_row(_row(**bad))
    return
  with pytest.raises(ValueError, match="Not a record row") as e:
    records.make_row(**_row(**bad))
  assert says in str(e.value)


def test_a_row_lacking_a_required_field_is_refused(tmp_path):
  row = _row()
  del row["budget"]
  with pytest.raises(ValueError, match="lacks 'budget'"):
    records.make_row(**row)
  path = str(tmp_path / "s.jsonl")
  with pytest.raises(ValueError, match="lacks 'budget'"):
    records.append(path, row)  # the write checks too
  with pytest.raises(ValueError, match="is a row of 's', not of .*'other'"):
    records.append(str(tmp_path / "other.jsonl"), _row())
  assert not os.path.exists(path) and not os.path.exists(tmp_path / "other.jsonl")


def test_every_committed_row_is_a_well_formed_row():
  for name, rows in records.read_all().items():
    for r in rows:
      records.check_row(r)
      assert r["sweep"] == name and list(records.make_row(**r)) == list(r)


def test_collecting_a_run_twice_records_it_once(tmp_path):
  wd = _full(tmp_path / NAME)
  path = str(tmp_path / "records" / "s.jsonl")
  assert records.append(path, records.row_from_run(wd, "s", SETTINGS))
  first = open(path, "rb").read()
  assert not records.append(path, records.row_from_run(wd, "s", SETTINGS))
  assert open(path, "rb").read() == first and len(records.read(path)) == 1


def test_a_collector_that_crashed_mid_write_loses_nothing(tmp_path):
  """A row cut short by a crash is no row: reading names its line rather than read the file
  as one run fewer; collecting the run again (or `repair`) replaces it. A last row whose
  newline alone is missing is kept."""
  wd = _full(tmp_path / NAME)
  other = _full(tmp_path / "task=rte,method=ce,seed=0")
  path = str(tmp_path / "s.jsonl")
  assert records.append(path, records.row_from_run(other, "s", {"task": "rte", "method": "ce",
                                                                "seed": "0"}))
  whole = json.dumps(records.row_from_run(wd, "s", SETTINGS))
  with open(path, "a") as f:
    f.write(whole[:len(whole) // 2])  # the crash
  with pytest.raises(ValueError, match=r"s.jsonl:2 is not a JSON row .*\(a row cut short"):
    records.read(path)
  before = open(path).read()
  assert records.repair(path) == 2 and records.repair(path) == 0
  assert [r["run"] for r in records.read(path)] == ["task=rte,method=ce,seed=0"]
  with open(path, "w") as f:
    f.write(before)
  assert records.append(path, records.row_from_run(wd, "s", SETTINGS))  # collected again
  assert [r["run"] for r in records.read(path)] == ["task=rte,method=ce,seed=0", NAME]
  lines = open(path).read().split("\n")
  assert lines[1] == whole and lines[2] == "" and len(lines) == 3
  # a hand edit that drops the final newline loses no row
  with open(path, "w") as f:
    f.write("\n".join(lines[:2]))
  assert len(records.read(path)) == 2
  assert not records.append(path, records.row_from_run(wd, "s", SETTINGS))
  assert open(path).read() == "\n".join(lines)
  # a line cut short within the file is not a crash of the last writer: it is an error
  with open(path, "w") as f:
    f.write(lines[0][:20] + "\n" + lines[1] + "\n")
  with pytest.raises(ValueError, match=r"s.jsonl:1 is not a JSON row"):
    records.read(path)


def test_a_record_read_as_other_runs_than_it_holds_is_named(tmp_path):
  """A run recorded twice with other scores, or with a score that is not a number, is named
  by its line, not read as one of the two or as a score; a run recorded twice alike (two
  hosts of one job) is one row."""
  wd = _full(tmp_path / NAME)
  row = records.row_from_run(wd, "s", SETTINGS)
  path = tmp_path / "s.jsonl"
  path.write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
  assert len(records.read(str(path))) == 1
  other = json.loads(json.dumps(row))
  other["evals"][-1]["dev"]["accuracy"] += 0.1
  path.write_text(json.dumps(row) + "\n" + json.dumps(other) + "\n")
  with pytest.raises(ValueError, match=rf"s.jsonl:2 records run {NAME} again, with other "
                                       "scores than line 1"):
    records.read(str(path))
  other["evals"][-1]["dev"]["accuracy"] = float("nan")
  path.write_text(json.dumps(other) + "\n")
  with pytest.raises(ValueError, match=r"s.jsonl:1: run .* has a score that is not a number "
                                       r"\(dev evaluation at step \d+: accuracy is nan\)"):
    records.read(str(path))


def test_the_reader_imports_nothing_heavy():
  p = helpers.run_py(["-c", "import sys; from acl_jax.study import runs, records; "
                      "print(sorted({m.split('.')[0] for m in sys.modules} & "
                      "{'jax', 'flax', 'numpy', 'transformers', 'ml_collections'}))"])
  assert p.returncode == 0 and p.stdout.strip() == "[]", p.stderr


def test_a_row_names_the_gpu_its_run_trained_on(tmp_path, monkeypatch):
  """train.py's record names the devices; the row's timed_on puts the GPU before its host,
  whether the sweep timed the run or scripts/rerun.py trained it untimed."""
  from scripts import rerun  # pylint: disable=import-outside-toplevel
  wd = _full(tmp_path / NAME)
  gpu = {"platform": "gpu", "kind": "NVIDIA H200", "count": 2}
  _write(wd, {"results.json": {**RESULTS, "train": {**RESULTS["train"], "devices": gpu}}})
  row = records.row_from_run(wd, "s", SETTINGS)
  assert row["timed_on"] == f"NVIDIA H200 GPU x2, host {timing.machine()}"
  assert row["train"]["devices"] == gpu
  for name in ("sweep_time.json", "early_exit_entropy_dev.json"):  # as rerun's train.py
    os.remove(os.path.join(wd, name))                              # leaves a folder
  monkeypatch.setattr(records, "RECORDS", str(tmp_path / "records"))
  records.append(records.path_of("orig"), {**row, "sweep": "orig"})
  again = rerun.collect("orig", NAME, wd, "gpu")
  assert again["timed_on"] == row["timed_on"] and again["rerun_of"] == "orig"
