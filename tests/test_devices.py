"""One device kind per pair (`Protocol.same_device_pairs`): a host holds back a run whose pair
trained on another kind, a host of that kind trains it, and the report names pairs that mix
kinds."""
import copy
import json
import os
import shutil

from acl_jax.study import devices, jobs, records, stage_tables
from acl_jax.study import status as study_status
from studies import papers_report
from tests.test_cpu_budget import _protocol, _sweep

GPU = "NVIDIA H100 GPU"


def _on_gpu(row: dict) -> dict:
  return {**row, "timed_on": f"{GPU} x1, host AMD EPYC, 16 cores"}


def _where(rows, keep):
  """`rows` with every row that `keep(record, row)` maps to None removed, others replaced."""
  out = {}
  for name, rs in rows.items():
    out[name] = [r2 for r in rs if (r2 := keep(name, r)) is not None]
  return out


def _ready(p, rows):
  ready, _ = study_status.stage_runs(p, 1, rows)
  return ready


def _names(runs):
  return sorted(r.name for r in runs)


def test_a_run_waits_for_its_pairs_device_kind(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(records, "RECORDS", str(tmp_path / "records"))
  p = _protocol(same_device_pairs=True)
  _sweep(tmp_path, monkeypatch, p)  # every run, on this CPU: the gates and seeds 0-4
  full = records.read_all()
  stage = p.stage_record[1]
  assert not devices.mixed(p, full)
  # Seed 3's CE trained on a GPU; its ACL is still to train.
  rows = _where(full, lambda name, r: None if (name, r["seed"], r["method"]) == (stage, 3, "acl")
                else _on_gpu(r) if (name, r["seed"]) == (stage, 3) else r)
  ready = _ready(p, rows)
  assert _names(ready) == ["task=rte,method=acl,seed=3"]
  keep, waits = devices.hold_back(p, rows, ready, devices.CPU, jobs.REPO)
  assert keep == [] and waits == {"task=rte,method=acl,seed=3": (
      f"waits for a host of its pair's device kind ({GPU}; this one: CPU)")}
  keep, waits = devices.hold_back(p, rows, ready, GPU, jobs.REPO)
  assert _names(keep) == _names(ready) and waits == {}
  # Without the rule, every host takes it.
  free = _protocol()
  assert devices.hold_back(free, rows, ready, devices.CPU, jobs.REPO) == (ready, {})
  # A pair's run recorded in another record and taken from there counts too: the lr grid's CE
  # seed 0 (at the picked rate) trained on a GPU, so seed 0's ACL waits for one.
  lr = p.lr_record
  ce0 = next(r for r in full[stage] if r["seed"] == 0 and r["method"] == "ce")
  assert ce0.get("reused_from") == lr  # trained once, by the lr grid
  rows = _where(full, lambda name, r: None if (name == stage and r["seed"] == 0)
                else _on_gpu(r) if name == lr else r)
  ready = _ready(p, rows)
  seed0 = [r for r in ready if dict(r.settings)["seed"] == "0"]
  assert {r.method for r in seed0} == {"ce", "acl"}
  keep, waits = devices.hold_back(p, rows, seed0, devices.CPU, jobs.REPO)
  # (CE seed 0 itself is copied from the lr grid's row: it trains nothing, so it never waits)
  assert _names(keep) == ["task=rte,method=ce,seed=0"]
  assert list(waits) == ["task=rte,method=acl,seed=0"]
  assert _names(devices.hold_back(p, rows, seed0, GPU, jobs.REPO)[0]) == _names(seed0)
  # A pair already mixed: its remaining runs start nowhere, and say why.
  rows = _where(full, lambda name, r: None if (name, r["seed"], r["method"]) == (stage, 1, "acl")
                else r)
  ce1 = next(r for r in rows[stage] if (r["seed"], r["method"]) == (1, "ce"))
  rows[stage].append(_on_gpu({**ce1, "run": "task=rte,method=scl,seed=1", "method": "scl"}))
  seed1 = [r for r in _ready(p, rows) if dict(r.settings)["seed"] == "1"]
  for kind in (devices.CPU, GPU):
    keep, waits = devices.hold_back(p, rows, seed1, kind, jobs.REPO)
    assert keep == [] and waits == {"task=rte,method=acl,seed=1": (
        f"its pair already mixes CPU and {GPU}; train the pair again on one kind")}


def test_a_run_started_elsewhere_holds_its_pair_to_its_kind(tmp_path, monkeypatch):
  """Two drivers of different kinds at once: a run handed out, not yet recorded, is stamped
  with its host's kind, and its pair (and itself, part-trained) keep to that kind."""
  monkeypatch.setattr(records, "RECORDS", str(tmp_path / "records"))
  p = _protocol(same_device_pairs=True)
  _sweep(tmp_path, monkeypatch, p)
  stage = p.stage_record[1]
  root = tmp_path / "runs"
  # the sweep stamped every run it handed out with this host's kind
  assert devices.stamped(str(root / stage / "task=rte,method=acl,seed=2")) == devices.CPU
  full = records.read_all()
  rows = _where(full, lambda name, r: None if (name, r["seed"]) == (stage, 4) else r)
  ready = [r for r in _ready(p, rows) if dict(r.settings)["seed"] == "4"]
  assert _names(ready) == ["task=rte,method=acl,seed=4", "task=rte,method=ce,seed=4"]
  workdir_of = lambda run: str(root / run.sweep / run.name)
  for run in ready:  # as if seed 4 were not yet handed out here
    os.remove(os.path.join(workdir_of(run), devices.STAMP))
  assert devices.hold_back(p, rows, ready, devices.CPU, jobs.REPO, workdir_of)[0] == ready
  devices.stamp(workdir_of(ready[1]), GPU)  # CE seed 4: started on a GPU host, still training
  keep, waits = devices.hold_back(p, rows, ready, devices.CPU, jobs.REPO, workdir_of)
  assert keep == [] and set(waits) == {r.name for r in ready}
  keep, _ = devices.hold_back(p, rows, ready, GPU, jobs.REPO, workdir_of)
  assert _names(keep) == _names(ready)
  # without its workdir read, the CPU host would have mixed the pair
  assert devices.hold_back(p, rows, ready, devices.CPU, jobs.REPO)[0] == ready


def test_a_host_of_unknown_kind_keeps_no_pair_and_says_so(monkeypatch, capsys):
  from acl_jax.study import slots, stages  # pylint: disable=import-outside-toplevel
  args = lambda executor: type("A", (), {"executor": executor})()
  monkeypatch.setattr(slots, "tpu_chips", lambda: [])
  monkeypatch.setattr(slots, "cuda_devices", lambda: [])
  assert stages.host_kind(args("local"), "") == devices.CPU
  assert stages.host_kind(args("local"), GPU) == GPU
  assert stages.host_kind(args("ray"), "") is None
  monkeypatch.setattr(slots, "tpu_chips", lambda: ["0"])
  assert stages.host_kind(args("local"), "") is None  # a TPU host is no CPU host
  monkeypatch.setattr(slots, "tpu_chips", lambda: [])
  monkeypatch.setattr(slots, "cuda_devices", lambda: ["0"])
  assert stages.host_kind(args("local"), "") is None  # a GPU nvidia-smi could not name
  p = _protocol(same_device_pairs=True)
  assert stages.same_kind(p, {}, ["run"], None, "", None) == ["run"]
  assert "device kind is not known here" in capsys.readouterr().out


def test_the_sweep_leaves_a_gpu_pair_to_a_gpu_host(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(records, "RECORDS", str(tmp_path / "records"))
  p = _protocol(same_device_pairs=True)
  _sweep(tmp_path, monkeypatch, p)
  stage = p.stage_record[1]
  path = records.path_of(stage)
  full = records.read_all()
  # Seed 4's ACL trained on a GPU; its CE is still to train (and seed 3 is done on the CPU).
  kept = [(_on_gpu(r) if (r["seed"], r["method"]) == (4, "acl") else r)
          for r in full[stage] if (r["seed"], r["method"]) != (4, "ce")]
  with open(path, "w") as f:
    f.write("".join(json.dumps(r) + "\n" for r in kept))
  shutil.rmtree(tmp_path / "runs" / stage / "task=rte,method=ce,seed=4")
  capsys.readouterr()
  assert _sweep(tmp_path, monkeypatch, p) == []  # this CPU host trains nothing
  out = capsys.readouterr().out
  assert ("task=rte,method=ce,seed=4: waits for a host of its pair's device kind "
          f"({GPU}; this one: CPU)") in out
  assert _sweep(tmp_path, monkeypatch, p, gpu=GPU) == ["4"]  # a GPU host does


def test_the_report_names_a_pair_that_mixes_kinds(tmp_path, monkeypatch):
  monkeypatch.setattr(records, "RECORDS", str(tmp_path / "records"))
  p = _protocol(same_device_pairs=True)
  _sweep(tmp_path, monkeypatch, p)
  full = records.read_all()
  stage = p.stage_record[1]
  text = papers_report.devices_table(stage_tables.context(p, full))
  assert "No pair mixes device kinds." in text and "| 1 | CPU: 10 runs |" in text
  rows = copy.deepcopy(full)
  rows[stage] = [_on_gpu(r) if (r["seed"], r["method"]) == (2, "acl") else r
                 for r in rows[stage]]
  assert list(devices.mixed(p, rows)) == [(stage, "rte", 2)]
  text = papers_report.devices_table(stage_tables.context(p, rows))
  assert "| 1 | CPU: 9 runs; NVIDIA H100 GPU: 1 run |" in text
  assert "**Pairs that mix device kinds**" in text and "RTE seed 2 (CPU: 1, NVIDIA H100 GPU: 1)" \
      in text
