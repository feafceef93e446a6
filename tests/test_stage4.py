"""Stage 4 (studies/papers.py `BASE`): the base-size protocol is stage 1's rules on
all-mpnet-base-v2, and results/STAGE4.md's cost table is what its cost model gives."""
import os
import re

from acl_jax.study import estimates, planner
from studies import papers

STAGE4_MD = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         "results", "STAGE4.md")


def test_every_run_is_base_size_under_stage_1s_rules():
  base, minilm = papers.BASE, papers.PAPERS
  assert set(base.tasks) == {"rte", "mrpc", "mr", "r8"}
  for name, task in base.tasks.items():
    assert "model.name=all-mpnet-base-v2" in task.sets
    # Everything else about the task (budget, metric, margin, other settings) is stage 1's.
    assert task.sets == tuple(sorted(minilm.tasks[name].sets + (papers.BASE_MODEL,)))
    assert (task.epochs, task.metric, task.margin, task.max_length) == (
        minilm.tasks[name].epochs, minilm.tasks[name].metric, minilm.tasks[name].margin,
        minilm.tasks[name].max_length)
  for field in ("lr_grid", "lr_preferred", "lr_tie", "budget_gain", "look_seeds",
                "decide_level", "describe_level", "power", "method_cost"):
    assert getattr(base, field) == getattr(minilm, field), field
  assert {(c.task, c.method, c.baseline, c.kind) for c in base.comparisons} == {
      ("rte", "acl", "ce", "noninferior"), ("rte", "acl", "scl", "noninferior"),
      ("mrpc", "acl", "ce", "noninferior"), ("mrpc", "acl", "scl", "noninferior"),
      ("mr", "gloss", "ce", "superior"), ("r8", "gloss", "ce", "superior")}
  exit6 = next(r for r in base.rules[2] if r.claim == "exit6")
  assert (exit6.shallow, exit6.deep, exit6.baselines) == ((6,), (), ("jt", "kd"))


def _hours(runs):
  return sum(papers.BASE.estimate_seconds(r.task, r.method, r.epochs) for r in runs) / 3600


def test_stage4_md_states_the_cost_model_s_estimate():
  first, second = estimates.whole_stage1(papers.BASE)
  # 4b's task had its lr and budget decided in 4a (taken at their undecided defaults here).
  states = {t: planner.TaskState(t, lr=papers.BASE.lr_preferred, epochs=task.epochs)
            for t, task in papers.BASE.tasks.items()}
  exits_first = estimates.later_stage_runs(papers.BASE, 2, states)
  exits_all = estimates.later_stage_runs(papers.BASE, 2, states, second_looks=True)
  want_first = _hours(first) + _hours(exits_first)
  want_all = want_first + _hours(second) + _hours(exits_all) - _hours(exits_first)
  text = open(STAGE4_MD).read()
  row = re.search(r"\| \*\*all\*\* \| (\d+) \| \*\*([\d.]+)\*\* \| \+(\d+) \| \*\*([\d.]+)\*\* \|",
                  text)
  assert row, "results/STAGE4.md lacks its cost table's total row"
  assert int(row.group(1)) == len(first) + len(exits_first)
  assert float(row.group(2)) == round(want_first, 1)
  assert float(row.group(4)) == round(want_all, 1)
  assert int(row.group(3)) == len(second) + len(exits_all) - len(exits_first)
  # The ratio the prior rests on is the one BENCHMARKS.md reports.
  assert f"**{papers.BASE_STEP_RATIO}x**" in open(
      os.path.join(os.path.dirname(STAGE4_MD), "..", "BENCHMARKS.md")).read()


def test_stage4_md_states_the_cpu_budget_and_order():
  base = papers.BASE
  assert base.later_after_first_looks and base.cpu_budget_h is not None
  text = open(STAGE4_MD).read()
  assert f"The budget is {base.cpu_budget_h:g} CPU\nmachine-hours (`BASE.cpu_budget_h`)" in text
  assert "`BASE.later_after_first_looks`" in text
  # Neither feature may read a comparison arm's run as a second look's.
  assert not any(set(a.seeds) & set(base.look_seeds[1]) for arms in base.arms.values()
                 for a in arms)
