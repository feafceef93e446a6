"""Sweeps through the study executors: the same rows from `--executor local` and `--executor ray`
(a real local Ray cluster), each run trained and recorded once by two drivers at once, and by
a driver killed midway and started again."""
import collections
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from acl_jax.study import jobs, records
from scripts import sweep
from tests import helpers

# Stands in for train.py, as a real process (Ray runs it): after --config.fake_sleep seconds
# (and while a file <root>/hold exists, up to 2 minutes), writes what train.py writes of a
# finished run (config.json, metrics.jsonl, a checkpoint,
# results.json with its scores and params hash, all from the run's flags), and appends
# "start <run>" and "end <run>" to <root>/trains.log, one O_APPEND write each.
FAKE_TRAIN = """
import hashlib, json, os, sys, time
argv = sys.argv[1:]
wd = argv[argv.index("--workdir") + 1]
flags = dict(a[len("--config."):].split("=", 1) for a in argv if a.startswith("--config."))
flags["config"] = argv[argv.index("--config") + 1]
def note(what):
  fd = os.open(os.path.join(os.path.dirname(wd), "trains.log"),
               os.O_WRONLY | os.O_APPEND | os.O_CREAT)
  os.write(fd, f"{what} {os.path.basename(wd)}\\n".encode())
  os.close(fd)
note("start")
t0 = time.time()
while os.path.exists(os.path.join(os.path.dirname(wd), "hold")) and time.time() < t0 + 120:
  time.sleep(0.05)
time.sleep(float(flags.get("fake_sleep", 0)))
digest = hashlib.sha256(json.dumps(flags, sort_keys=True).encode()).hexdigest()
acc = int(digest[:4], 16) / 65536
os.makedirs(os.path.join(wd, "ckpt", "9"), exist_ok=True)
json.dump({"seed": int(flags["seed"]), "num_epochs": 3}, open(os.path.join(wd, "config.json"), "w"))
with open(os.path.join(wd, "metrics.jsonl"), "w") as f:
  f.write(json.dumps({"step": 9, "kind": "dev", "accuracy": acc}) + "\\n")
json.dump({"checkpoint_step": 9, "dev": {"accuracy": acc, "num_examples": 10},
           "train": {"final_step": 9, "best_step": 9, "params_sha256": digest[:16]}},
          open(os.path.join(wd, "results.json"), "w"))
note("end")
"""

# A sweep driver (python -m scripts.sweep) whose runs train with the fake train.py, which takes
# a field train.py has not (fake_sleep): the sweep's check that train.py resolves each run's
# config is train.py's, not the fake's.
DRIVER = ("import sys; from acl_jax.study import jobs; from scripts import sweep; "
          "jobs.TRAIN = sys.argv[1]; jobs.check_jobs = lambda todo: None; "
          "sweep.main(sys.argv[2:])")


@pytest.fixture(scope="module")
def ray_address():
  with helpers.local_ray() as address:
    yield address


@pytest.fixture
def fake_train(tmp_path):
  path = tmp_path / "fake_train.py"
  path.write_text(FAKE_TRAIN)
  return str(path)


def sweep_argv(root, record, *more, sleep=0.0):
  """A 4-run ad-hoc sweep: CE and ACL, seeds 0 and 1."""
  return ["--root", str(root), "--config", "configs/glue.py:rte", "--methods", "ce,acl",
          "--seeds", "0,1", "--set", f"fake_sleep={sleep}", "--record", str(record),
          "--compile_cache", "none", *more]


def start_driver(fake_train, argv):
  return subprocess.Popen([sys.executable, "-c", DRIVER, fake_train, *argv], cwd=helpers.REPO,
                          env=helpers.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)


def trains(root):
  """{"start"/"end": Counter of run folders} from the fake train.py's log."""
  counts = {"start": collections.Counter(), "end": collections.Counter()}
  path = os.path.join(root, "trains.log")
  if os.path.exists(path):
    for line in open(path):
      what, name = line.split()
      counts[what][name] += 1
  return counts


def recorded_runs(record):
  """The run of every line of the record file, duplicates kept (records.read drops them)."""
  return collections.Counter(json.loads(line)["run"] for line in open(record) if line.strip())


RUNS = [f"task=rte,method={m},seed={s}" for m in ("ce", "acl") for s in (0, 1)]


def _content(row):
  """What a row says of its run, without where and when it ran."""
  drop = ("seconds", "cpu_seconds", "workers", "time_spans", "timed_on")
  return {k: v for k, v in row.items() if k not in drop}


def test_local_and_ray_executors_record_the_same_rows(ray_address, fake_train, tmp_path,
                                                      monkeypatch):
  monkeypatch.setattr(jobs, "TRAIN", fake_train)
  monkeypatch.setattr(jobs, "check_jobs", lambda todo: None)  # as DRIVER: the fake's fields
  rows = {}
  for kind in ("local", "ray"):
    record = tmp_path / f"{kind}_records" / "s.jsonl"
    argv = sweep_argv(tmp_path / kind, record, "--executor", kind, "--address", ray_address,
                      "--workers", "2")
    sweep.main(argv)
    rows[kind] = records.read(str(record))
    assert recorded_runs(record) == {r: 1 for r in RUNS}
    assert trains(tmp_path / kind)["end"] == {r.removeprefix("task=rte,"): 1 for r in RUNS}
    assert all("cpu_seconds" in r and "seconds" in r for r in rows[kind])  # timed
    assert all(os.path.isdir(tmp_path / kind / r.removeprefix("task=rte,") / "ckpt")
               for r in RUNS)  # an ad-hoc sweep keeps its checkpoints
    sweep.main(argv)  # all recorded: nothing trains again
    assert sum(trains(tmp_path / kind)["start"].values()) == 4
  by_run = {k: {r["run"]: _content(r) for r in v} for k, v in rows.items()}
  assert by_run["local"] == by_run["ray"]
  assert len({r["train"]["params_sha256"] for r in rows["ray"]}) == 4


def test_two_ray_drivers_at_once_train_and_record_each_run_once(ray_address, fake_train,
                                                                tmp_path):
  record = tmp_path / "r.jsonl"
  argv = sweep_argv(tmp_path / "runs", record, "--executor", "ray", "--address", ray_address,
                    sleep=1.0)
  drivers = [start_driver(fake_train, argv) for _ in range(2)]
  outs = [d.communicate(timeout=240)[0] for d in drivers]
  assert [d.returncode for d in drivers] == [0, 0], outs
  assert recorded_runs(record) == {r: 1 for r in RUNS}
  counts = trains(tmp_path / "runs")
  assert counts["start"] == counts["end"] == {r.removeprefix("task=rte,"): 1 for r in RUNS}
  # Each run's time is its one training's: one attempt, none lost.
  for row in records.read(str(record)):
    spent = json.load(open(tmp_path / "runs" / row["run"].removeprefix("task=rte,")
                           / records.RUN_TIME))
    assert spent["attempts"] == 1 and "lost" not in spent and not row.get("timing_incomplete")


@pytest.mark.parametrize("kind", ["local", "ray"])
def test_a_killed_driver_started_again_records_each_run_once(kind, request, fake_train,
                                                            tmp_path):
  """A driver SIGKILLed while its runs train (their train.py processes die with it): started
  again, it takes over their stale claims, and every run is trained to its end and recorded
  once. The first driver's runs are held until it is killed, however slowly the second
  starts on a loaded machine."""
  address = request.getfixturevalue("ray_address") if kind == "ray" else ""
  record, root = tmp_path / "r.jsonl", tmp_path / "runs"
  argv = sweep_argv(root, record, "--executor", kind, "--address", address, "--workers", "2",
                    sleep=1.0)
  root.mkdir()
  (root / "hold").touch()
  driver = start_driver(fake_train, argv)
  deadline = time.time() + 120
  while sum(trains(root)["start"].values()) < 2:
    assert driver.poll() is None and time.time() < deadline, driver.communicate()[0]
    time.sleep(0.05)
  driver.send_signal(signal.SIGKILL)
  driver.wait()
  killed = trains(root)["start"]
  assert not trains(root)["end"]
  (root / "hold").unlink()
  again = start_driver(fake_train, argv)
  out = again.communicate(timeout=240)[0]
  assert again.returncode == 0, out
  assert recorded_runs(record) == {r: 1 for r in RUNS}
  counts = trains(root)
  assert counts["end"] == {r.removeprefix("task=rte,"): 1 for r in RUNS}
  assert counts["start"] == {r.removeprefix("task=rte,"): 1 + killed[r.removeprefix(
      "task=rte,")] for r in RUNS}
  for row in records.read(str(record)):  # the killed attempt's time is missing, and says so
    assert row.get("timing_incomplete", False) == (row["run"].removeprefix("task=rte,")
                                                   in killed), row


@pytest.mark.slow
def test_a_runlocal_study_through_ray(ray_address, tiny_model_dir, tmp_path):
  """Four runlocal train.py runs (CE and ACL, seeds 0 and 1) through a Ray cluster and here:
  the same rows. Each run sees one core either way: a local slot's, or the one its Ray task
  asked for (slots.pinned_cores); XLA splits some work by the cores it sees, so runs that see
  other core counts can end a few bits apart. Slow (about two minutes on 2 cores)."""
  rows = {}
  for kind in ("local", "ray"):
    record = tmp_path / f"{kind}_records" / "s.jsonl"
    argv = ["--root", str(tmp_path / kind), "--config", "configs/quickstart.py:runlocal",
            "--methods", "ce,acl", "--seeds", "0,1", "--set", f"model.name={tiny_model_dir}",
            "--record", str(record), "--executor", kind, "--address", ray_address,
            "--workers", "2"]
    p = helpers.run_py(["-m", "scripts.sweep", *argv], timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows[kind] = {r["run"]: r for r in records.read(str(record))}
    assert len(rows[kind]) == 4
  for run, row in rows["local"].items():
    assert row["final"] == rows["ray"][run]["final"]
    assert row["train"]["params_sha256"] == rows["ray"][run]["train"]["params_sha256"]
