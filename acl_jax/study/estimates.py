"""What a protocol's stages will cost: every run each stage can need, known now or not
(`whole_stage1`, `later_stage_runs`), for the estimates of scripts/sweep.py --status and the
report. Imports nothing heavy."""
from acl_jax.study import planner, protocol as proto


def later_stage_runs(p: proto.Protocol, stage: int, states: dict[str, planner.TaskState],
                     second_looks: bool = False) -> list[planner.Run]:
  """Every run of stage 2 or 3, for the estimate: each task at its picked lr and budget where
  decided, else at lr_preferred (or its lr_from source's rate) and its first budget, with the
  lr and budget runs of the tasks new in the stage."""
  arms = p.arms.get(stage, ())
  out = []
  for arm in arms:
    st = states.get(arm.task) or states.get(p.lr_from.get(arm.task, ""))
    lr = st.lr if st is not None and st.lr else p.lr_preferred
    epochs = (st.epochs if st is not None and st.task == arm.task and st.epochs
              else p.tasks[arm.task].epochs)
    st = planner.TaskState(arm.task, lr=lr, epochs=epochs)
    out += planner._arm_runs(p, stage, arm, st)
    if second_looks:  # every rule's seeds 3-4, as if every first look were undecided
      out += planner.second_look_runs(p, stage, arm.task, st, {}, every=True)
  for task in dict.fromkeys(a.task for a in arms):  # lr and budget runs of tasks new here
    if task not in states:
      src = states.get(p.lr_from.get(task, ""))
      lr = src.lr if src is not None and src.lr else p.lr_preferred
      out = [planner.lr_run(p, task, lr)] + planner._budget_runs(p, task, lr) + out
  return list(dict.fromkeys(out))


def whole_stage1(p: proto.Protocol, states: dict[str, planner.TaskState] | None = None,
                 ) -> tuple[list[planner.Run], list[planner.Run]]:
  """Every run stage 1 can need, for the estimate: (through the first look, the second looks
  of every comparison). Undecided tasks are taken at lr_preferred, their protocol's budget,
  with the anchor's extra lr where there is an anchor; CE seed 0 at the budget is the lr
  grid's run (not for a task that takes its lr from another, or trains CE with an extra)."""
  states = states or {}
  first, second = [], []
  for task in dict.fromkeys(c.task for c in p.comparisons):
    st = states.get(task)
    lr = st.lr if st is not None and st.lr else p.lr_preferred
    epochs = st.epochs if st is not None and st.epochs else p.tasks[task].epochs
    own_lr = task not in p.lr_from  # else it takes another task's, and trains no lr grid
    if own_lr:
      first += [planner.lr_run(p, task, x) for x in p.lr_grid]
    if own_lr and task in p.anchors:
      first.append(planner.lr_run(p, task, p.lr_high))
    first += planner._budget_runs(p, task, lr)
    s = planner.TaskState(task, lr=lr, epochs=epochs)
    first += [planner.method_run(p, p.gate_record, s, m, 0, extra_settings=x)
              for t, m, x in p.diagnostics if t == task]
    comps = [c for c in p.comparisons if c.task == task]
    ce_extra = next((c.extra for c in comps if "ce" in (c.method, c.baseline)), ())
    # CE seed 0 is the lr grid's run at the picked lr, where it is the same run
    first += [r for r in planner._comparison_runs(p, s, comps, p.look_seeds[0])
              if not (own_lr and not ce_extra and r.method == "ce"
                      and dict(r.settings)["seed"] == "0")]
    second += planner._comparison_runs(p, s, comps, p.look_seeds[1])
  return first, second

