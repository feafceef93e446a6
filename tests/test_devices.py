"""One device kind per pair (`Protocol.same_device_pairs`): a host holds back a run whose pair
trained on another kind, a host of that kind trains it, and the report names pairs that mix
kinds."""
import copy
import json
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
  assert keep == [] and waits == {"task=rte,method=acl,seed=3": GPU}
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
  assert keep == [] and set(waits) == {r.name for r in seed0}
  assert _names(devices.hold_back(p, rows, seed0, GPU, jobs.REPO)[0]) == _names(seed0)


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
  assert "| 1 | CPU: 9 runs; NVIDIA H100 GPU: 1 runs |" in text
  assert "**Pairs that mix device kinds**" in text and "RTE seed 2 (CPU: 1, NVIDIA H100 GPU: 1)" \
      in text
