r"""What a protocol asks to train next, given the records so far.

`decisions(protocol, rows)` walks each task through the protocol's gates in order (lr grid, the
anchor's extra lr, the budget check, then the comparisons' first and second looks) and returns
the runs each gate needs: `ready` ones (their inputs are recorded) in the order to train them,
and what still waits on what. stages.py trains the ready runs and plans again after each;
the report (reporting.py) reads the same decisions to state them. Imports nothing heavy.
"""
import dataclasses

from acl_jax.study import checks, later, protocol as proto

@dataclasses.dataclass(frozen=True)
class Run:
  """One planned run: its record (sweep), settings (its name, in order) and fixed overrides."""
  sweep: str
  settings: tuple[tuple[str, str], ...]  # (("task", t), ("method", m), ..., ("seed", s))
  sets: tuple[str, ...]
  latest: str = ""  # the split scored with the final weights (eval.py --checkpoint latest)
  early_exit: str = ""  # entropy thresholds of eval.py's early-exit sweep on dev
  config_file: str = ""  # the task's config file and its task argument
  task_epochs: int = 0  # the task's protocol epochs (a run's own num_epochs overrides them)
  preset: str = ""  # the preset a variant method trains as ("": the method is a preset)

  @property
  def name(self) -> str:
    return ",".join(f"{k}={v}" for k, v in self.settings)

  @property
  def task(self) -> str:
    return dict(self.settings)["task"]

  @property
  def method(self) -> str:
    return dict(self.settings)["method"]

  @property
  def framework(self) -> str:
    return dict(self.settings).get("framework", "jax")

  @property
  def config(self) -> str:
    return f"{self.config_file},{self.preset or self.method}"

  @property
  def epochs(self) -> int:
    for kv in (*self.sets, *(f"{k}={v}" for k, v in self.settings)):
      k, _, v = kv.partition("=")
      if k == "num_epochs":
        return int(v)
    return self.task_epochs


@dataclasses.dataclass
class TaskState:
  """A task's decisions so far (None: not yet decided) and what it waits on."""
  task: str
  lr_scores: dict = dataclasses.field(default_factory=dict)  # lr -> CE seed 0 dev score
  lr: str | None = None
  anchor_missed: bool | None = None
  high_score: float | None = None
  base_score: float | None = None  # CE seed 0 at the budget, at the picked lr (dev)
  doubled_score: float | None = None
  epochs: int | None = None
  waiting: str = ""


def _run(p: proto.Protocol, sweep, task, method, seed, sets, extra_settings=()) -> Run:
  t = p.tasks[task]
  settings = (("task", task), ("method", method), *extra_settings, ("seed", str(seed)))
  length = () if any(s.startswith("task.max_length=") for s in t.sets) else (
      f"task.max_length={t.max_length}",)
  variant = p.variants.get(method)
  own = variant.sets if variant is not None else ()
  return Run(sweep, settings, tuple(sorted(t.sets + length + tuple(sets) + own)),
             latest=t.scored if t.scored != "dev" else "",
             config_file=f"{t.config}:{t.config_task}", task_epochs=t.epochs,
             preset=variant.method if variant is not None else "")


def _index(rows: dict[str, list[dict]]) -> dict[tuple[str, str], dict]:
  return {(sweep, r["run"]): r for sweep, rs in rows.items() for r in rs}


def lr_run(p: proto.Protocol, task: str, lr: str) -> Run:
  return _run(p, p.lr_record, task, "ce", 0, (f"num_epochs={p.tasks[task].epochs}",),
              (("optim.lr", lr),))


def budget_run(p: proto.Protocol, task: str, lr: str) -> Run:
  return _run(p, p.budget_record, task, "ce", 0, (f"optim.lr={lr}",),
              (("num_epochs", str(2 * p.tasks[task].epochs)),))


def _sources_first(p: proto.Protocol, tasks) -> list[str]:
  """The tasks, those that take another task's lr (lr_from) after the others."""
  return [t for t in tasks if t not in p.lr_from] + [t for t in tasks if t in p.lr_from]


def _budget_runs(p: proto.Protocol, task: str, lr: str) -> list[Run]:
  return [] if p.budget_gain is None else [budget_run(p, task, lr)]


def method_run(p: proto.Protocol, sweep: str, st: TaskState, method: str, seed: int, extra=(),
               extra_settings=(), early_exit="") -> Run:
  run = _run(p, sweep, st.task, method, seed, (f"optim.lr={st.lr}", f"num_epochs={st.epochs}",
                                            *extra), extra_settings)
  return dataclasses.replace(run, early_exit=early_exit)


def task_state(p: proto.Protocol, task: str, idx: dict,
               states: dict) -> tuple[TaskState, list[Run]]:
  """The task's lr, anchor and budget decisions from the records, and the runs the next
  undecided one needs."""
  st, t = TaskState(task), p.tasks[task]
  if task in p.lr_from:
    src = states.get(p.lr_from[task])
    if src is None or src.lr is None:
      st.waiting = f"the lr of {p.lr_from[task]}"
      return st, []
    st.lr, st.anchor_missed = src.lr, False
  else:
    need = []
    for lr in p.lr_grid:
      row = idx.get((p.lr_record, lr_run(p, task, lr).name))
      if row is None:
        need.append(lr_run(p, task, lr))
      else:
        st.lr_scores[lr] = p.dev_score(row)
    if need:
      st.waiting = "the lr grid"
      return st, need
    pick = p.pick_lr(st.lr_scores, t.unit)
    st.anchor_missed = p.misses_anchor(task, st.lr_scores[pick])
    if st.anchor_missed:
      row = idx.get((p.lr_record, lr_run(p, task, p.lr_high).name))
      if row is None:
        st.waiting = f"CE at lr {p.lr_high} (CE missed its anchor)"
        return st, [lr_run(p, task, p.lr_high)]
      st.high_score = p.dev_score(row)
      if p.take_high(st.lr_scores[pick], st.high_score, t.unit):
        pick = p.lr_high
    st.lr = pick
  base = idx.get((p.lr_record, lr_run(p, task, st.lr).name))
  checks = [(lr_run(p, task, st.lr), base)]
  if p.budget_gain is not None:
    doubled = idx.get((p.budget_record, budget_run(p, task, st.lr).name))
    checks.append((budget_run(p, task, st.lr), doubled))
  need = [r for r, row in checks if row is None]
  if need:
    st.waiting = "the budget check"
    return st, need
  st.base_score = p.dev_score(base)
  st.epochs = t.epochs
  if p.budget_gain is not None:
    st.doubled_score = p.dev_score(doubled)
    if p.budget_doubles(st.base_score, st.doubled_score, t.unit):
      st.epochs = 2 * t.epochs
  return st, []


def task_states(p: proto.Protocol, idx: dict, d: "Decisions") -> dict[str, TaskState]:
  """Every task's gate decisions: stage 1's (`d.tasks`), then those of the tasks new in a
  later stage, from the records (`idx`: rows by (record, run name))."""
  states = dict(d.tasks)
  for t in _sources_first(p, dict.fromkeys(a.task for s in sorted(p.arms) for a in p.arms[s])):
    if t not in states:
      states[t], _ = task_state(p, t, idx, states)
  checks.later_rows(p, idx, states)
  return states


def comparison_rows(p: proto.Protocol, idx: dict, st: TaskState, comp: proto.Comparison,
                    seeds) -> tuple[list, list]:
  """(rows of method, rows of baseline) for the seeds, None where not recorded; each recorded
  row checked to have trained at the task's lr and epochs."""
  def rows(method):
    got = [idx.get((p.stage_record[1], method_run(p, p.stage_record[1], st, method, s,
                                                 comp.extra).name)) for s in seeds]
    return [r and checks.trained_as_planned(p, r, st) for r in got]
  return rows(comp.method), rows(comp.baseline)


def diffs(p: proto.Protocol, a_rows, b_rows) -> list[float]:
  return [p.score(a) - p.score(b) for a, b in zip(a_rows, b_rows)]


@dataclasses.dataclass
class Decisions:
  """Stage 1's state: per task its decisions, per comparison its verdict so far."""
  tasks: dict[str, TaskState]
  verdicts: dict[proto.Comparison, proto.Verdict]
  ready: list[Run]
  waiting: dict[str, str]  # task -> what it waits on
  planned: list[Run]  # every run known to be needed (ready or not, recorded or not)
  withheld: dict[str, str] = dataclasses.field(default_factory=dict)  # task -> why unread


def picked_score(p: proto.Protocol, st: TaskState) -> float | None:
  """CE seed 0's dev score at the task's picked lr (None before the pick)."""
  if st.lr is None:
    return None
  return st.high_score if st.lr == p.lr_high and st.high_score is not None else (
      st.lr_scores.get(st.lr))


def anchor_withheld(p: proto.Protocol, st: TaskState, rows: dict[str, list[dict]]) -> str:
  """Why the task's comparisons may not be read yet ("" if they may): its CE at the picked lr
  misses the published anchor by more than the margin and HF PyTorch at the same lr, first
  budget and seed 0 is not recorded (the protocol's reading step)."""
  score = picked_score(p, st)
  if score is None or not p.glue_hf_anchor[0] or not p.misses_anchor(st.task, score):
    return ""
  e = p.tasks[st.task].epochs
  for r in rows.get(p.glue_hf_anchor[0], []):
    b = r.get("budget", {})
    framework = r.get("framework") or r.get("overrides", {}).get("framework")
    if (r.get("task"), framework, r.get("seed")) == (st.task, "torch", 0) and (
        proto.same_lr(b.get("lr"), st.lr) and b.get("num_epochs") == e):
      return ""
  return (f"CE at lr {st.lr} ({score:.2f}) misses the published {p.anchors[st.task]:g} by "
          f"more than {p.tasks[st.task].margin:g}; read once HF PyTorch at lr {st.lr}, "
          f"{proto.epochs_text(e)}, seed 0 is recorded (`{p.glue_hf_anchor[0]}`) "
          "and the gap explained")


def anchor_run(p: proto.Protocol, st: TaskState) -> Run:
  """HF PyTorch's CE run at the task's lr and first budget, seed 0 (framework "torch",
  benchmarks/hf_run.py), into the protocol's `glue_hf_anchor` record: what a task whose CE
  misses its published anchor waits on."""
  return _run(p, p.glue_hf_anchor[0], st.task, "ce", 0,
              (f"optim.lr={st.lr}", f"num_epochs={p.tasks[st.task].epochs}"),
              (("framework", "torch"),))


def _comparison_runs(p: proto.Protocol, st: TaskState, comps, seeds) -> list[Run]:
  arms = []
  for c in comps:
    for m in (c.baseline, c.method):
      if (m, c.extra) not in arms:
        arms.append((m, c.extra))
  return [method_run(p, p.stage_record[1], st, m, s, extra)
          for s in seeds for m, extra in arms]


def decisions(p: proto.Protocol, rows: dict[str, list[dict]]) -> Decisions:
  """Walks stage 1's gates for every task (the protocol's comparisons and diagnostics), for a
  protocol the planner can take to the end (`checks.check`, else a ValueError)."""
  checks.check(p)
  idx = _index(rows)
  done = set(idx)
  # The gates' runs (lr, anchor, budget) of every task come first: they are cheap and each
  # decides a task's whole stage; then the comparisons, task by task.
  states, gates, ready, waiting, planned, verdicts = {}, [], [], {}, [], {}
  order = _sources_first(p, dict.fromkeys([c.task for c in p.comparisons]))
  for task in order:
    st, need = task_state(p, task, idx, states)
    states[task] = st
    planned += need
    if need or st.epochs is None:
      gates += need
      waiting[task] = st.waiting
      continue
    comps = [c for c in p.comparisons if c.task == task]
    runs = [method_run(p, p.gate_record, st, m, 0, extra_settings=settings)
            for t, m, settings in p.diagnostics if t == task]
    runs += _comparison_runs(p, st, comps, p.look_seeds[0])
    second = []
    for c in comps:
      a, b = comparison_rows(p, idx, st, c, p.look_seeds[0])
      if None in a or None in b:
        continue
      v = p.verdict(diffs(p, a, b), c.kind, p.tasks[task].margin, 1)
      if v.final:
        verdicts[c] = v
        continue
      second.append(c)
      a2, b2 = comparison_rows(p, idx, st, c, p.look_seeds[0] + p.look_seeds[1])
      if None not in a2 and None not in b2:
        verdicts[c] = p.verdict(diffs(p, a2, b2), c.kind, p.tasks[task].margin, 2)
      else:
        verdicts[c] = v
    runs += _comparison_runs(p, st, second, p.look_seeds[1])
    runs = list(dict.fromkeys(runs))
    planned += runs
    ready += [r for r in runs if (r.sweep, r.name) not in done]
  withheld = {t: why for t, st in states.items() if (why := anchor_withheld(p, st, rows))}
  anchors = [anchor_run(p, states[t]) for t in withheld if p.glue_hf_anchor[0]]
  planned += anchors
  ready += [r for r in anchors if (r.sweep, r.name) not in done]
  return Decisions(states, verdicts, gates + ready, waiting, planned, withheld)


def _arm_runs(p: proto.Protocol, stage: int, arm, st: TaskState) -> list[Run]:
  """A later-stage arm's runs at the task's lr and epochs (st)."""
  grids, out = [[]], []
  for key, values in arm.grid:
    grids = [g + [(key, v)] for g in grids for v in values]
  fw = (("framework", arm.framework),) if arm.framework != "jax" else ()
  for seed in p.first_seeds(arm):
    for m in arm.methods:
      for g in grids:
        early = p.exit_thresholds if m in p.multi_exit and not fw else ""
        out.append(method_run(p, p.stage_record[stage], st, m, seed, arm.extra,
                              fw + tuple(g), early))
  return out




def later_stage_ready(p: proto.Protocol, stage: int, rows: dict[str, list[dict]],
                      d: Decisions | None = None) -> tuple[list[Run], dict[str, str]]:
  """(stage 2 or 3's runs the gates release now, not yet recorded; what each of its tasks
  waits on). Nothing is released while the stage before has runs left (its arms share runs
  with it: the λ grid's preset points are stage 1's ACL and CE+SCL; with
  `later_after_first_looks`, its second looks may be left). Then a task's arms wait
  on its lr and budget decisions: stage 1's for its tasks, and for a task new here (lr_from)
  the source's lr, then its own budget check."""
  d = d or decisions(p, rows)
  idx, states = _index(rows), dict(d.tasks)
  arms = p.arms.get(stage, ())
  tasks = _sources_first(p, dict.fromkeys(a.task for a in arms))
  before = max(s for s in p.stages if s < stage)
  left, unsettled = (d.ready, d.waiting) if before == 1 else (
      later_stage_ready(p, before, rows, d))
  if p.later_after_first_looks:
    left = [r for r in left if not second_look(p, r)]
  if left or unsettled:
    part = "'s first looks" if p.later_after_first_looks else ""
    why = (f"stage {stage - 1}{part} to finish ({len(left)} runs ready there now, "
           f"{len(unsettled)} tasks waiting on its gates)")
    return [], dict.fromkeys(tasks, why)
  runs, waiting = [], {}
  for task in tasks:
    if task in states:
      st, need = states[task], []
    else:
      st, need = task_state(p, task, idx, states)
      states[task] = st
    runs += need
    if st.epochs is None:
      waiting[task] = d.waiting.get(task) or st.waiting
      continue
    runs += [r for a in arms if a.task == task for r in _arm_runs(p, stage, a, st)]
    runs += second_look_runs(p, stage, task, st, idx)
  checks.later_rows(p, idx, states)
  return [r for r in dict.fromkeys(runs) if (r.sweep, r.name) not in idx], waiting


def in_second_look(p: proto.Protocol, record: str, seed) -> bool:
  """A run (planned or recorded) in `record` at `seed` belongs to a second look: a seed of
  look_seeds[1] in a stage's own record."""
  return record in p.stage_record.values() and int(seed) in p.look_seeds[1]


def second_look(p: proto.Protocol, run: Run) -> bool:
  """A planned run of a second look (`in_second_look`)."""
  return in_second_look(p, run.sweep, dict(run.settings)["seed"])


def second_look_runs(p: proto.Protocol, stage: int, task: str, st: TaskState, idx: dict,
                     every: bool = False) -> list[Run]:
  """Seeds 3-4 of the task's later-stage rules whose first look left them undecided (every
  rule's, with `every`: the estimate's upper end): each of the rule's methods (at the rule's
  grid values) as an arm of stage 2 or 3 trains it, into this stage's record. A method that
  is no later arm (a stage-1 baseline such as CE) trains the seeds that no stage has recorded
  (stage 1 decided its comparisons at the first look), into this stage's record too."""
  out = []
  for rule in p.rules.get(stage, ()):
    if rule.task != task or not (every or later.second_look_wanted(p, idx, stage, rule)):
      continue
    grid = later.rule_values(rule)
    for method in later.rule_methods(rule):
      fields = [grid[0]] if grid else []
      arm = next((a for s, arms in sorted(p.arms.items()) if s <= stage for a in arms
                  if a.task == task and method in a.methods
                  and [k for k, _ in a.grid] == fields and a.framework == "jax"), None)
      missing = lambda r, g=(): later.find(p, idx, stage, task, method, r.settings[-1][1],
                                           g) is None
      if arm is None:  # a stage-1 method (CE): its seeds 3-4 are stage 1's, where trained
        extra = next((c.extra for c in p.comparisons
                      if c.task == task and method in (c.method, c.baseline)), ())
        out += [r for r in (method_run(p, p.stage_record[stage], st, method, seed, extra)
                            for seed in p.look_seeds[1]) if missing(r)]
        continue
      one = lambda values: _arm_runs(p, stage, dataclasses.replace(
          arm, methods=(method,), grid=((grid[0], values),) if grid else (),
          seeds=p.look_seeds[1]), st)
      if not grid:
        out += one(())
        continue
      # The method's preset value is stage 1's run where trained there (and for the estimate,
      # `every`), else the arm's
      preset = p.presets.get((method, grid[0]))
      out += one(tuple(v for v in grid[1] if v != preset))
      if preset in grid[1] and not every:
        out += [r for r in one((preset,)) if missing(r, ((grid[0], preset),))]
  return out
