"""Study executors: a claim has one winner and goes stale with its owner; LocalExecutor and
RayExecutor (on a real local Ray cluster) run each spec once, across drivers started together
and across a driver killed midway."""
import collections
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from acl_jax.study import claims, executors as ex, slots
from acl_jax.study.ray_executor import RayExecutor
from tests import helpers

# A tiny run: after `sleep` seconds, appends "start <name>" then "end <name>" to the shared
# log (one O_APPEND write each, so the lines of runs at once do not mix) and writes out.txt
# (<name> <cwd>) in its workdir, the executor's cwd for it.
RUN = """
import os, sys, time
name, log, sleep = sys.argv[1], sys.argv[2], float(sys.argv[3])
def note(what):
  fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
  os.write(fd, f"{what} {name}\\n".encode())
  os.close(fd)
note("start")
time.sleep(sleep)
open("out.txt", "w").write(f"{name} {os.path.basename(os.getcwd())}")
note("end")
"""
DONE = ex.written("out.txt")


def tiny_specs(root, n=4, sleep=0.0):
  log = os.path.join(root, "runs.log")
  out = []
  for i in range(n):
    wd = os.path.join(root, f"run{i}")
    out.append(ex.RunSpec(f"run{i}", (sys.executable, "-c", RUN, f"run{i}", log, str(sleep)),
                          wd, cwd=wd))
  return out


def log_counts(root):
  """{what: Counter of run names} from the shared log ("start", "end", ...)."""
  counts = collections.defaultdict(collections.Counter)
  with open(os.path.join(root, "runs.log")) as f:
    for line in f:
      what, name = line.split()
      counts[what][name] += 1
  return counts


def wait_for_starts(root, driver, n):
  """Until `n` runs noted their start in the shared log (the `driver` process still up)."""
  log, deadline = os.path.join(root, "runs.log"), time.time() + 60
  while not (os.path.exists(log) and sum(line.startswith("start ")
                                         for line in open(log)) >= n):
    assert driver.poll() is None and time.time() < deadline, driver.communicate()
    time.sleep(0.05)


def outputs(specs):
  return {s.identity: open(os.path.join(s.workdir, "out.txt")).read() for s in specs}


def test_the_study_package_imports_neither_jax_nor_ray():
  p = helpers.run_py(["-c", "import sys; from acl_jax.study import executors; "
                      "print(sorted({m.split('.')[0] for m in sys.modules} & {'jax', 'ray'}))"])
  assert p.returncode == 0 and p.stdout.strip() == "[]", p.stderr


# Claims.

# Claims at a given time, says whether it won, and holds its claim until its stdin closes.
CLAIM = """
import sys, time
from acl_jax.study import claims
time.sleep(max(0, float(sys.argv[2]) - time.time()))
print(claims.try_claim(sys.argv[1], claims.new_driver_id()) is not None, flush=True)
sys.stdin.read()
"""


def test_of_claimers_racing_exactly_one_wins(tmp_path):
  wd = str(tmp_path / "run")
  at = time.time() + 3  # the processes claim at once, once all have imported
  procs = [subprocess.Popen([sys.executable, "-c", CLAIM, wd, str(at)], cwd=helpers.REPO,
                            env=helpers.env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True) for _ in range(4)]
  wins = [p.stdout.readline().strip() for p in procs]
  for p in procs:
    p.stdin.close()
    p.wait(timeout=60)
  assert sorted(wins) == ["False", "False", "False", "True"]
  # The winner exited: its claim is stale. Threads racing for the takeover: one wins again.
  barrier, won = threading.Barrier(6), []

  def take():
    barrier.wait()
    won.append(claims.try_claim(wd, claims.new_driver_id(), lease_s=60))
  threads = [threading.Thread(target=take) for _ in range(6)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert len([c for c in won if c is not None]) == 1
  assert sorted(os.listdir(os.path.join(wd, claims.CLAIMS))) == ["0", "1"]


def test_a_claim_goes_stale_with_its_owner_or_its_heartbeat_and_not_before(tmp_path):
  wd = str(tmp_path / "run")
  # Its owner process is gone (same host): taken over at once, whatever the lease.
  p = helpers.run_py(["-c", "from acl_jax.study import claims; "
                      f"assert claims.try_claim({wd!r}, 'gone')"])
  assert p.returncode == 0, p.stderr
  assert claims.holder(wd) is None
  mine = claims.try_claim(wd, "a", lease_s=10)
  assert mine is not None and mine.path.endswith("1")
  # Live: its owner runs and beats.
  assert claims.try_claim(wd, "b", lease_s=10) is None
  assert claims.holder(wd, 10)["driver"] == "a"
  # A heartbeat older than the lease: taken over, and the old owner learns it lost.
  mine.rec["heartbeat"] = time.time() - 11
  claims._write_atomic(mine.path, mine.rec)  # pylint: disable=protected-access
  theirs = claims.try_claim(wd, "b", lease_s=10)
  assert theirs is not None
  assert not mine.refresh() and mine.lost.is_set()
  mine.release()  # writes nothing: the claim is b's
  assert claims.holder(wd, 10)["driver"] == "b"
  theirs.release()
  assert claims.holder(wd, 10) is None
  # A claim file still being written counts as live, until a lease has passed.
  wd2 = str(tmp_path / "run2")
  os.makedirs(os.path.join(wd2, claims.CLAIMS))
  empty = os.path.join(wd2, claims.CLAIMS, "0")
  open(empty, "w").close()
  assert claims.try_claim(wd2, "c", lease_s=10) is None
  os.utime(empty, (time.time() - 11, time.time() - 11))
  assert claims.try_claim(wd2, "c", lease_s=10) is not None


def test_keep_alive_beats_and_calls_back_when_the_claim_is_lost(tmp_path):
  wd = str(tmp_path / "run")
  c = claims.try_claim(wd, "a", lease_s=0.5)
  lost = threading.Event()
  with c.keep_alive(on_lost=lost.set, every=0.05):
    time.sleep(0.7)  # past the lease: only the beats keep it
    assert claims.try_claim(wd, "b", lease_s=0.5) is None
    with open(os.path.join(wd, claims.CLAIMS, "1"), "w") as f:
      json.dump({"driver": "b"}, f)  # b took it over
    assert lost.wait(5)


# Local slots.

def test_local_slots_give_each_run_its_accelerators_and_cores(monkeypatch):
  monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1, 2, 3}, raising=False)
  monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
  assert slots.local_slots() == [slots.Slot({"CUDA_VISIBLE_DEVICES": "4"}, (0, 1)),
                                 slots.Slot({"CUDA_VISIBLE_DEVICES": "5"}, (2, 3))]
  assert slots.local_slots(1) == [slots.Slot({"CUDA_VISIBLE_DEVICES": "4,5"}, ())]
  # the name a run's row gives the GPU (timing.machine), from nvidia-smi for the first one
  asked = []
  with monkeypatch.context() as m:
    m.setattr(slots.subprocess, "run", lambda argv, **_: asked.append(argv) or
              subprocess.CompletedProcess(argv, 0, stdout="NVIDIA H200\n"))
    assert slots.cuda_device_name() == "NVIDIA H200 GPU" and asked[0][-2:] == ["-i", "4"]
  # more runs than GPUs: they share them round-robin, each taking memory as it needs it
  shared = slots.local_slots(4)
  assert [s.env["CUDA_VISIBLE_DEVICES"] for s in shared] == ["4", "5", "4", "5"]
  assert {s.env["XLA_PYTHON_CLIENT_PREALLOCATE"] for s in shared} == {"false"}
  assert [s.cpus for s in shared] == [(0,), (1,), (2,), (3,)]
  monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
  monkeypatch.setenv("TPU_VISIBLE_CHIPS", "0,1,2,3")
  tpu = slots.local_slots()
  assert [s.env["TPU_VISIBLE_CHIPS"] for s in tpu] == ["0", "1", "2", "3"]
  assert {s.env["TPU_CHIPS_PER_HOST_BOUNDS"] for s in tpu} == {"1,1,1"}
  assert len({s.env["TPU_MESH_CONTROLLER_PORT"] for s in tpu}) == 4
  assert [s.cpus for s in tpu] == [(0,), (1,), (2,), (3,)]
  with pytest.raises(ValueError, match="5 slots for 4 TPU chips"):
    slots.local_slots(5)
  assert slots.cuda_device_name() == ""  # no CUDA device visible
  monkeypatch.delenv("TPU_VISIBLE_CHIPS")
  monkeypatch.setattr(slots, "tpu_chips", lambda: [])
  assert slots.local_slots() == [slots.Slot({}, (i,)) for i in range(4)]


@pytest.mark.skipif(shutil.which("taskset") is None, reason="pins with taskset (util-linux)")
def test_a_ray_tasks_run_holds_cores_of_its_own(monkeypatch, tmp_path, capsys):
  """pinned_cores: runs of 2 cores on a 4-core host hold disjoint groups while they run; a
  third waits on no group and runs unpinned, saying so; a group is free again once its run
  ends. The locks live in $ACL_JAX_CORE_LOCKS (the suite's own: conftest.py)."""
  monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1, 2, 3}, raising=False)
  folder = str(tmp_path / "cores")
  monkeypatch.setenv("ACL_JAX_CORE_LOCKS", folder)
  with slots.pinned_cores(2) as a, slots.pinned_cores(1.5, folder) as b:
    assert a == ["taskset", "-c", "0,1"] and b == ["taskset", "-c", "2,3"]
    assert sorted(os.listdir(folder)) == ["0-1.lock", "2-3.lock"]
    with slots.pinned_cores(2, folder) as c:
      assert c == []
    assert "this run is not pinned" in capsys.readouterr().err
  with slots.pinned_cores(2, folder) as again:
    assert again == ["taskset", "-c", "0,1"]
  with slots.pinned_cores(1, folder) as one:
    assert one == ["taskset", "-c", "0"]
  with slots.pinned_cores(4, folder) as whole:
    assert whole == []  # the whole host: nothing to pin


AUTOGROUP = "/proc/sys/kernel/sched_autogroup_enabled"


def test_a_niced_setsid_leader_gives_its_autogroup_its_niceness():
  """Under autogroup scheduling, `nice -n 19 setsid driver` gives the driver's autogroup, not
  only its processes, niceness 19; a process that `setsid` did not start changes nothing
  (its autogroup is its terminal's)."""
  code = ("import os; from acl_jax.study import slots; os.nice(7); "
          "print(slots.niceness_for_autogroup()); print(open('/proc/self/autogroup').read() "
          "if os.path.exists('/proc/self/autogroup') else '')")
  def run(**kw):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=helpers.REPO, **kw).stdout.split("\n")
  assert run()[0] == "None"  # not a setsid leader
  leader = run(start_new_session=True)
  want = str(min(os.nice(0) + 7, 19))  # 7 above this process's own (pytest may run niced)
  enabled = os.path.exists(AUTOGROUP) and open(AUTOGROUP).read().strip() == "1"
  if enabled:
    assert leader[0] == want and leader[1].endswith(f"nice {want}"), leader
  else:
    assert leader[0] in ("None", want), leader  # no autogroup: the file may be absent


# LocalExecutor.

def test_local_executor_runs_each_spec_once_and_times_it(tmp_path):
  root = str(tmp_path)
  specs = tiny_specs(root)
  t0 = time.time()
  res = list(ex.LocalExecutor(slots=2).run(specs, DONE))
  print(f"LocalExecutor, 4 tiny runs: {time.time() - t0:.2f} s")
  assert sorted(r.identity for r in res) == [s.identity for s in specs]
  assert all(r.status == ex.RAN and r.returncode == 0 and r.ok for r in res)
  assert all(r.wall_s > 0 and r.cpu_s > 0 for r in res)
  assert outputs(specs) == {f"run{i}": f"run{i} run{i}" for i in range(4)}
  assert set(log_counts(root)["end"].values()) == {1}
  # Finished runs are not run again; a run claimed by a live owner elsewhere is not started.
  held = claims.try_claim(str(tmp_path / "run4"), "other")
  more = tiny_specs(root, n=5)
  again = {r.identity: r for r in ex.LocalExecutor(slots=2).run(more, DONE)}
  assert [again[f"run{i}"].status for i in range(5)] == [ex.FINISHED] * 4 + [ex.CLAIMED]
  assert "driver other" in again["run4"].detail
  held.release()
  assert sum(log_counts(root)["end"].values()) == 4
  # A failing command reports its exit code and frees its claim.
  bad = ex.RunSpec("bad", (sys.executable, "-c", "raise SystemExit(3)"), str(tmp_path / "bad"))
  [r] = ex.LocalExecutor(slots=1).run([bad], DONE)
  assert (r.status, r.returncode, r.ok) == (ex.RAN, 3, False)
  assert claims.holder(bad.workdir) is None


class Noted(ex.Steps):
  """Steps that note, in the workdir, what ran under the claim."""

  def __init__(self, need: bool):
    self.need = need

  def before(self, spec):
    open(os.path.join(spec.workdir, "notes"), "a").write(
        f"before {claims.holder(spec.workdir)['driver']}\n")
    return self.need

  def after(self, spec, result, call):
    rc, _ = call([sys.executable, "-c", "open('notes', 'a').write('after\\n')"])
    return ex.RunResult(spec.identity, result.status, rc or result.returncode + 10,
                        result.wall_s, result.cpu_s, result.host, result.detail)


def test_a_specs_steps_run_under_its_claim(tmp_path):
  """`before` says whether the command runs; `after` runs further commands as the run's own,
  and gives the run's result."""
  [ran, skipped] = [dataclasses.replace(s, steps=Noted(need)) for s, need in
                    zip(tiny_specs(str(tmp_path), n=2), (True, False))]
  res = {r.identity: r for r in ex.LocalExecutor(slots=1, driver="d").run([ran, skipped], DONE)}
  assert (res["run0"].returncode, res["run0"].wall_s > 0) == (10, True)
  assert (res["run1"].returncode, res["run1"].detail) == (10, ex.NOT_NEEDED)
  assert log_counts(str(tmp_path))["end"] == {"run0": 1}
  for s in (ran, skipped):
    assert open(os.path.join(s.workdir, "notes")).read() == "before d\nafter\n"
    assert claims.holder(s.workdir) is None


def test_a_run_whose_claim_was_taken_over_is_killed(tmp_path):
  """A run that stalled past its lease and was taken over stops, so that its successor does
  not share its workdir."""
  [spec] = tiny_specs(str(tmp_path), n=1, sleep=60)

  def take_over():
    while not os.path.exists(os.path.join(str(tmp_path), "runs.log")):
      time.sleep(0.02)
    with open(os.path.join(spec.workdir, claims.CLAIMS, "1"), "w") as f:
      json.dump({"driver": "b", "heartbeat": time.time()}, f)
  thread = threading.Thread(target=take_over)
  thread.start()
  [r] = ex.LocalExecutor(slots=1, lease_s=0.5).run([spec], DONE)
  thread.join()
  assert (r.status, r.returncode, r.ok) == (ex.LOST, -signal.SIGKILL, False)
  assert r.wall_s < 30
  assert not log_counts(str(tmp_path))["end"]
  assert claims.holder(spec.workdir, 10)["driver"] == "b"  # its release left b's claim


def test_a_cluster_that_refuses_the_drivers_token_is_a_user_error(monkeypatch):
  """`ray start` turns token authentication on by default (Ray >= 2.59); a driver without
  RAY_AUTH_MODE=token gets a ConnectionError from ray.init, raised from an
  AuthenticationError. That says how to connect; any other failure to connect stays as Ray
  raised it."""
  ray = pytest.importorskip("ray")
  from acl_jax import errors  # pylint: disable=import-outside-toplevel

  def refuse(cause):
    def init(**_):
      try:
        raise cause
      except Exception as e:
        raise ConnectionError("Failed to connect to Ray cluster at 127.0.0.1:6390") from e
    return init
  monkeypatch.setattr(ray, "is_initialized", lambda: False)
  # As Ray 2.60 raises it: the AuthenticationError's traceback is text in a RuntimeError.
  as_text = RuntimeError("Failed to connect to GCS. Last connection error: Traceback (most "
                         "recent call last): ...\nray.exceptions.AuthenticationError: RPC "
                         "error: InvalidAuthToken: Authentication token is missing")
  for cause in (as_text, ray.exceptions.AuthenticationError("token missing")):
    monkeypatch.setattr(ray, "init", refuse(cause))
    with pytest.raises(errors.UserError, match="RAY_AUTH_MODE=token.*auth_token"):
      RayExecutor("127.0.0.1:6390").capacity()
  monkeypatch.setattr(ray, "init", refuse(RuntimeError("Failed to connect to GCS")))
  with pytest.raises(ConnectionError, match="127.0.0.1:6390"):
    RayExecutor("127.0.0.1:6390").capacity()


def test_without_an_address_the_driver_starts_its_own_cluster(monkeypatch):
  """No address: a new cluster here, without the dashboard's processes, never one that
  ray.init would look up on this machine (a stopped cluster's address, left behind, hangs
  it). "auto" joins the one `ray start` made here."""
  ray = pytest.importorskip("ray")
  inits = []
  monkeypatch.setattr(ray, "is_initialized", lambda: bool(inits))
  monkeypatch.setattr(ray, "init", lambda **kw: inits.append(kw))
  monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
  assert RayExecutor().capacity() == 2
  inits2 = inits[:]
  inits.clear()
  RayExecutor("auto").capacity()
  assert [(k["address"], k.get("include_dashboard")) for k in inits2 + inits] == [
      ("local", False), ("auto", None)]


# RayExecutor, on a Ray cluster of this machine (loopback) that the module starts and stops.

@pytest.fixture(scope="module")
def ray_address():
  ray = pytest.importorskip("ray")
  # A short folder: Ray's socket paths under it must stay within the OS's length limit.
  temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
  t0 = time.time()
  ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
           _node_ip_address="127.0.0.1", _temp_dir=temp, object_store_memory=100 * 2**20,
           runtime_env={"env_vars": {"PYTHONPATH": helpers.REPO}})
  print(f"Ray cluster up in {time.time() - t0:.1f} s")
  try:
    yield ray.get_runtime_context().gcs_address
  finally:
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)


def test_ray_executor_gives_the_local_executors_outputs(ray_address, tmp_path):
  local, remote = tiny_specs(str(tmp_path / "local")), tiny_specs(str(tmp_path / "ray"))
  assert all(r.ok for r in ex.LocalExecutor(slots=2).run(local, DONE))
  t0 = time.time()
  res = list(RayExecutor(ray_address).run(remote, DONE))
  print(f"RayExecutor, 4 tiny runs: {time.time() - t0:.2f} s")
  assert all(r.status == ex.RAN and r.returncode == 0 for r in res)
  assert all(r.wall_s > 0 and r.cpu_s > 0 and r.host for r in res)
  assert outputs(remote) == outputs(local)
  assert [r.status for r in RayExecutor(ray_address).run(remote, DONE)] == [ex.FINISHED] * 4


def test_a_run_queued_past_its_latest_start_does_not_start(ray_address, tmp_path):
  """Three 3-second runs on a 2-CPU cluster: the third waits in Ray's queue for a core,
  past its `start_by`, and ends LATE without running or claiming its workdir. Here, a run
  handed out after its `start_by` does the same."""
  root = str(tmp_path / "ray")
  first, second, third = tiny_specs(root, n=3, sleep=3.0)
  third = dataclasses.replace(third, start_by=time.time() + 1.5)
  res = {r.identity: r for r in RayExecutor(ray_address).run([first, second, third], DONE)}
  assert [res[s.identity].status for s in (first, second)] == [ex.RAN, ex.RAN]
  assert res["run2"].status == ex.LATE and not res["run2"].ok
  assert "after its latest start" in res["run2"].detail
  assert log_counts(root)["start"] == {"run0": 1, "run1": 1}
  assert not os.path.exists(third.workdir)
  here = dataclasses.replace(tiny_specs(str(tmp_path / "here"), n=1)[0], start_by=time.time())
  time.sleep(0.01)
  (late,) = ex.LocalExecutor(slots=1).run([here], DONE)
  assert late.status == ex.LATE and not os.path.exists(here.workdir)


def test_two_ray_drivers_at_once_run_each_spec_once(ray_address, tmp_path):
  root = str(tmp_path)
  specs = tiny_specs(root, sleep=0.5)
  got = [[], []]

  def drive(i):
    got[i] = list(RayExecutor(ray_address).run(specs, DONE))
  threads = [threading.Thread(target=drive, args=(i,)) for i in range(2)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  counts = log_counts(root)
  assert counts["start"] == counts["end"] == {s.identity: 1 for s in specs}
  statuses = collections.Counter(r.status for r in got[0] + got[1])
  assert statuses[ex.RAN] == 4 and statuses[ex.ERROR] == 0
  assert len(outputs(specs)) == 4


DRIVER = """
import sys
from acl_jax.study import executors as ex
from acl_jax.study.ray_executor import RayExecutor
from tests.test_study_executors import DONE, tiny_specs
kind, root, address, sleep = sys.argv[1:5]
exe = ex.LocalExecutor(slots=2) if kind == "local" else RayExecutor(address)
for r in exe.run(tiny_specs(root, sleep=float(sleep)), DONE):
  print(r.identity, r.status, flush=True)
"""


@pytest.mark.parametrize("kind", ["local", "ray"])
def test_a_killed_driver_loses_and_repeats_nothing(kind, request, tmp_path):
  """A driver SIGKILLed while its first two runs run: they die with it, their claims go stale
  (a dead owner) and the next driver runs them again, and the runs not yet started, once."""
  address = request.getfixturevalue("ray_address") if kind == "ray" else ""
  root = str(tmp_path)
  # Its runs sleep long enough that neither ends before the kill, however slowly a loaded
  # host starts the second (Ray's worker start can take seconds).
  driver = subprocess.Popen([sys.executable, "-c", DRIVER, kind, root, address, "30"],
                            cwd=helpers.REPO, env=helpers.env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
  wait_for_starts(root, driver, 2)
  driver.send_signal(signal.SIGKILL)
  driver.wait()
  started = log_counts(root)["start"]
  assert sum(started.values()) == 2 and not log_counts(root)["end"]
  specs, deadline = tiny_specs(root, sleep=2.0), time.time() + 60
  exe = ex.LocalExecutor(slots=2) if kind == "local" else RayExecutor(address)
  while True:  # a run whose claim is still live (its owner dying) is asked for again
    res = list(exe.run(specs, DONE))
    assert not [r for r in res if r.status not in (ex.RAN, ex.FINISHED, ex.CLAIMED)], res
    if all(r.ok for r in res) or time.time() > deadline:
      break
    time.sleep(0.5)
  assert all(r.ok for r in res), res
  counts = log_counts(root)
  assert counts["end"] == {s.identity: 1 for s in specs}
  assert counts["start"] == {s.identity: 1 + started[s.identity] for s in specs}
  assert outputs(specs) == {s.identity: f"{s.identity} {s.identity}" for s in specs}
  # the killed driver's runs died with it: none is left to write into the runs' folders
  log, deadline = os.path.join(root, "runs.log"), time.time() + 20
  while _runs_alive(log, "30.0") and time.time() < deadline:
    time.sleep(0.2)
  assert not _runs_alive(log, "30.0")


def _runs_alive(log: str, sleep: str) -> list[int]:
  """The pids of live tiny runs (RUN) that write to `log` and sleep `sleep` seconds."""
  out = []
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = f.read().split(b"\0")
    except OSError:
      continue
    if log.encode() in argv and sleep.encode() in argv:
      out.append(int(pid))
  return out


@pytest.mark.slow
def test_ray_executor_trains_two_runs_with_train_py(ray_address, tiny_model_dir, tmp_path):
  """Two runlocal train.py runs, one Ray task each. Slow (15 to 40 s on 2 cores): the tiny
  runs above cover the executor."""
  specs = [ex.RunSpec(f"seed={s}", (
      sys.executable, "train.py", "--config", "configs/quickstart.py:runlocal",
      f"--config.model.name={tiny_model_dir}", f"--config.seed={s}", "--config.progress=False",
      "--workdir", str(tmp_path / f"seed={s}")), str(tmp_path / f"seed={s}"), cwd=helpers.REPO)
           for s in (0, 1)]
  t0 = time.time()
  res = list(RayExecutor(ray_address).run(specs))
  print(f"RayExecutor, 2 runlocal train.py runs: {time.time() - t0:.1f} s")
  assert all(r.status == ex.RAN and r.returncode == 0 for r in res), [
      open(os.path.join(s.workdir, s.log)).read()[-2000:] for s in specs]
  for s in specs:
    results = json.load(open(os.path.join(s.workdir, "results.json")))
    assert results["train"]["final_step"] == 6
  assert [r.status for r in RayExecutor(ray_address).run(specs)] == [ex.FINISHED] * 2


# A run that stops as train.py does on SIGTERM: it notes the signal and exits 143; with a
# third argument, one without a handler (a process in its set-up, an evaluation).
STOPPABLE = """
import os, signal, sys, time
name, log = sys.argv[1], sys.argv[2]
def note(what):
  fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
  os.write(fd, f"{what} {name}\\n".encode())
  os.close(fd)
def stop(signum, frame):
  note("checkpointed")
  sys.exit(143)
if len(sys.argv) < 4:
  signal.signal(signal.SIGTERM, stop)
note("start")
time.sleep(120)
note("end")
"""
STOP_DRIVER = """
import os, sys
from acl_jax.study import executors as ex, runner
root = sys.argv[1]
log = os.path.join(root, "runs.log")
class Never(ex.Steps):
  def done(self):
    return False
specs = [ex.RunSpec(f"run{i}", (sys.executable, "-c", sys.argv[2], f"run{i}", log)
                    + (("no handler",) if i == 1 else ()),
                    os.path.join(root, f"run{i}"), steps=Never()) for i in range(3)]
left = iter(specs)
runner.drive(ex.LocalExecutor(slots=2), lambda skip: next(left, None), poll_s=0.2)
"""


def test_sigterm_to_a_sweep_driver_stops_its_runs_at_a_checkpoint_and_exits_143(tmp_path):
  """SIGTERM to a driver with 2 runs out and 1 not yet handed out: each run gets SIGTERM
  (train.py's cue to checkpoint and stop; the second has no handler and dies of it), the
  driver waits for both, starts nothing more, says so and exits 143; neither run is counted
  as a failure."""
  root = str(tmp_path)
  driver = subprocess.Popen([sys.executable, "-c", STOP_DRIVER, root, STOPPABLE],
                            cwd=helpers.REPO, env=helpers.env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
  wait_for_starts(root, driver, 2)
  driver.send_signal(signal.SIGTERM)
  out, err = driver.communicate(timeout=60)
  assert driver.returncode == 143, (out, err)
  counts = log_counts(root)
  assert counts["start"] == {"run0": 1, "run1": 1} and counts["checkpointed"] == {"run0": 1}
  assert not counts["end"]
  lines, host = out.rstrip().splitlines(), socket.gethostname()
  assert sorted(lines[:2]) == [
      f"  run0: stopped by SIGTERM at a step it checkpointed on {host}; the next start "
      "resumes it",
      f"  run1: ended by SIGTERM on {host}; the next start resumes it from its last "
      "checkpoint"], out
  assert lines[2] == ("stopped by SIGTERM (SIGTERM sent to 2 running process(es)); no run "
                      "started since, and the same command resumes those it stopped"), out
  assert "FAILED" not in out
