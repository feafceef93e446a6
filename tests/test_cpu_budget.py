"""A protocol's CPU budget (`Protocol.cpu_budget_h`): every first look trains; a second look
starts on a CPU only while it fits, always on an accelerator, and finishes once started; with
`later_after_first_looks`, a later stage starts beside the stage before's second looks."""
import dataclasses

import pytest

from acl_jax.study import executors, planner, protocol as proto, records, stages
from acl_jax.study import status as study_status
from acl_jax.study import jobs
from studies import papers
from tests.test_sweep import _args, _fake_protocol_train, _with_cpu

NOISE = {0: 1.0, 1: -1.0, 2: 0.0, 3: 1.0, 4: -1.0}  # ACL - CE, points: undecided at 3 seeds


def _scores(method, lr, epochs, seed):
  ce = {"2e-5": 55.0, "5e-5": 55.2, "1e-4": 60.0}[lr] + seed
  return (ce + (NOISE[seed] if method == "acl" else 0.0)) / 100


def _protocol(**kw) -> proto.Protocol:
  """RTE's ACL against CE under stage 1's gates, with no anchor (so no HF run)."""
  return dataclasses.replace(
      papers.PAPERS, diagnostics=(), stages={1: papers.PAPERS.stages[1]}, arms={},
      described=(), rules={}, lr_from={}, anchors={}, glue_hf_anchor=("", ""),
      comparisons=(proto.Comparison("acl", "rte", "acl", "ce", "noninferior"),), **kw)


def _sweep(tmp_path, monkeypatch, p, gpu=""):
  calls = []
  monkeypatch.setattr(executors, "call", _with_cpu(_fake_protocol_train(calls, _scores)))
  monkeypatch.setattr(stages, "local_gpu", lambda args: gpu)
  args = _args(tmp_path, root=str(tmp_path / "runs"), dry_run=False, workers=1, until="",
               keep_checkpoints=False, compile_cache="none", study=p)
  stages.run_stage(1, args)
  return [c[3] for c in calls]  # the seeds trained, in order


def _second_look_s(p, rows) -> float:
  rates = study_status.measured_rates(rows)
  return sum(p.estimate_seconds("rte", m, 3, rates) for m in ("ce", "acl")) * 2


def test_a_second_look_past_the_budget_waits_for_an_accelerator(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(records, "RECORDS", str(tmp_path / "records"))
  tight = _protocol(cpu_budget_h=1e-6)  # less than any run: the first looks train anyway
  seeds = _sweep(tmp_path, monkeypatch, tight)
  # the lr grid (2), the budget check, then the first look (CE seed 0 is the lr grid's run)
  assert sorted(seeds) == ["0", "0", "0", "0", "1", "1", "2", "2"]
  rows = records.read_all()
  b = study_status.cpu_budget(tight, rows, jobs.REPO)
  recorded = sum(study_status.machine_seconds(r) for rs in rows.values() for r in rs
                 if not r.get("reused_from"))
  assert b.recorded_s == pytest.approx(recorded) and b.first_left_s == 0.0
  assert b.admitted == {} and b.trimmed == {(1, "rte"): pytest.approx(_second_look_s(tight,
                                                                                       rows))}
  out = capsys.readouterr().out
  assert "Second looks past the budget, trained only on an accelerator" in out
  assert "RTE (stage 1," in out
  (v,) = planner.decisions(tight, rows).verdicts.values()
  assert (v.look, v.final) == (1, False)  # the comparison keeps its first look's verdict
  # The same look fits a budget just larger than what is spent and its estimate.
  need_h = (recorded + _second_look_s(tight, rows)) / 3600
  assert study_status.cpu_budget(_protocol(cpu_budget_h=need_h * 0.99), rows,
                                 jobs.REPO).trimmed
  fits = _protocol(cpu_budget_h=need_h * 1.01)
  assert study_status.cpu_budget(fits, rows, jobs.REPO).admitted
  # On a host with an accelerator the look starts, and decides the comparison.
  assert sorted(_sweep(tmp_path, monkeypatch, tight, gpu="NVIDIA H100 GPU")) == [
      "3", "3", "4", "4"]
  rows = records.read_all()
  (v,) = planner.decisions(tight, rows).verdicts.values()
  assert (v.look, v.final) == (2, True)
  # A look with a recorded run finishes on a CPU, whatever the budget says.
  part = {k: [r for r in rs if not (k == "stage1" and r["seed"] == 4 and r["method"] == "acl")]
          for k, rs in rows.items()}
  b = study_status.cpu_budget(tight, part, jobs.REPO)
  assert list(b.admitted) == [(1, "rte")] and not b.trimmed
  capsys.readouterr()


def test_a_later_stage_may_start_beside_the_second_looks(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(records, "RECORDS", str(tmp_path / "records"))
  one = _protocol(cpu_budget_h=1e-6)
  _sweep(tmp_path, monkeypatch, one)
  rows = records.read_all()
  two = dict(stages={**one.stages, 2: papers.BASE.stages[2]}, arms={2: papers.BASE_STAGE2},
             rules={2: papers.BASE_STAGE2_RULES},
             claims={**one.claims, **{k: papers.BASE_CLAIMS[k] for k in ("exit6", "exits")}})
  waits = dataclasses.replace(one, **two)
  ready, waiting = planner.later_stage_ready(waits, 2, rows)
  assert ready == [] and "stage 1 to finish (4 runs ready there now" in waiting["rte"]
  beside = dataclasses.replace(waits, later_after_first_looks=True)
  ready, waiting = planner.later_stage_ready(beside, 2, rows)
  assert not waiting
  assert sorted((r.method, dict(r.settings)["seed"]) for r in ready) == sorted(
      (m, s) for m in ("jt", "kd", "acl_cl") for s in "012")
  # while stage 1 has a first-look run left, stage 2 still waits
  rows["stage1"] = [r for r in rows["stage1"] if not (r["seed"] == 2 and r["method"] == "acl")]
  ready, waiting = planner.later_stage_ready(beside, 2, rows)
  assert ready == [] and waiting["rte"].startswith("stage 1's first looks to finish (1 runs")
  capsys.readouterr()


def test_a_budget_needs_second_look_seeds_of_its_own():
  with pytest.raises(ValueError, match="cpu_budget_h 0: give the CPU machine-hours"):
    planner.decisions(_protocol(cpu_budget_h=0), {})
  arm = proto.Arm("rte", ("jt",), seeds=(3,))
  with pytest.raises(ValueError, match=r"its seeds \(3,\) include the second look's"):
    planner.decisions(dataclasses.replace(
        _protocol(later_after_first_looks=True), stages={1: "", 2: ""}, arms={2: (arm,)},
        rules={2: papers.BASE_STAGE2_RULES[:1]},
        claims={**papers.PAPERS.claims, "exit6": ""}), {})
