"""A Protocol's refusals: what its planner could not run, or would run wrongly, named with
the fix; and a record's rows that the planner's decisions refuse (`later_rows`).
`loader.load` and the planner's `decisions` call `check`, so a protocol that is planned is
one the planner can take to the end: every run it plans has a name of its own and can be
recorded, and every rule reads runs that some stage trains.
"""
from acl_jax import metrics
from acl_jax.study import later, protocol as proto, records

# Run-name fields, and the fields the gates set (a grid or `extra` may set neither).
NAMED = ("task", "method", "seed", "framework")
GATED = ("optim.lr", "num_epochs")


def check(p: "proto.Protocol") -> None:
  _metrics(p)
  _variants(p)
  _stages(p)
  _looks(p)
  _learning_rates(p)
  _comparisons(p)
  _arms(p)
  _extras(p)
  _anchors(p)
  _rules(p)
  _described(p)
  _costs(p)
  _claims(p)


def _metrics(p) -> None:
  """Each task scores a metric that runs record (its lr pick, verdicts and report read it)."""
  for t in p.tasks.values():
    if t.metric not in metrics.METRICS:
      raise ValueError(f"task {t.name!r}: metric {t.metric!r} is not one that runs record; "
                       f"give one of {', '.join(metrics.METRICS)} (acl_jax/metrics.py).")


def _variants(p) -> None:
  """A variant is named as a run's method is, trains as a preset (not another variant), and
  sets fields that neither its tasks' sets, the gates, the seed nor its name set."""
  for name, v in p.variants.items():
    if not records.fits_a_name(name) or v.method in p.variants or not v.sets:
      raise ValueError(f"variant {name!r}: {v}: a variant's name is part of its runs' names "
                       "(no '/', '=', ','), its method a preset (not a variant), and it sets "
                       "at least one field; e.g. variants={'ce_balanced': "
                       "Variant('ce', ('loss.class_weights=balanced',))}.")
    clash = _keys(v.sets) & {*NAMED, *GATED, "seed", *(
        k for t in p.tasks.values() for k in _keys(t.sets))}
    if clash:
      raise ValueError(f"variant {name!r} sets {', '.join(sorted(clash))}, which a task's "
                       "sets, a run's name, the gates or the seed set already; set it in one "
                       "place.")


def _claims(p) -> None:
  """Each comparison and rule decides a claim that `claims` states in words (the report's
  rows are keyed by it)."""
  named = [(f"comparison {c.method} vs {c.baseline} on {c.task}", c.claim)
           for c in p.comparisons] + [
      (f"stage {s}'s {type(r).__name__} on {r.task}", r.claim)
      for s, rules in sorted(p.rules.items()) for r in rules]
  for where, claim in named:
    if claim not in p.claims:
      raise ValueError(f"{where} decides claim {claim!r}, which `claims` lacks; add "
                       f"{claim!r}: \"the claim in words\" to `claims` (it has "
                       f"{', '.join(map(repr, p.claims)) or 'none'}).")


def _stages(p) -> None:
  if 1 not in p.stages:
    raise ValueError(f"stages {sorted(p.stages)}: stage 1 (the comparisons and the gates "
                     "every task passes first) must be one of them.")
  for name, per_stage in (("arms", p.arms), ("rules", p.rules)):
    if set(per_stage) - set(p.stages) or 1 in per_stage:
      raise ValueError(f"{name} of stages {sorted(per_stage)}: give later stages' {name}, "
                       f"of stages named in `stages` ({sorted(p.stages)}), not stage 1.")


def _looks(p) -> None:
  if not p.look_seeds or not p.look_seeds[0]:
    raise ValueError("look_seeds[0], the first look's seeds, is empty.")
  if len(p.look_seeds) != 2:
    raise ValueError(f"look_seeds {p.look_seeds}: give the seeds of two looks, e.g. "
                     "((0, 1, 2), (3, 4)); a comparison undecided at the first adds the "
                     "second's.")
  seeds = [*p.look_seeds[0], *p.look_seeds[1]]
  if len(set(seeds)) != len(seeds):
    raise ValueError(f"look_seeds {p.look_seeds}: the second look adds seeds of its own, "
                     "each seed once, e.g. ((0, 1, 2), (3, 4)); a repeated seed would be "
                     "counted twice.")
  if p.cpu_budget_h is not None and not p.cpu_budget_h > 0:
    raise ValueError(f"cpu_budget_h {p.cpu_budget_h}: give the CPU machine-hours second looks "
                     "may start within (e.g. 40.0), or None for no budget.")
  if p.cpu_budget_h is not None or p.later_after_first_looks:
    for stage, arms in p.arms.items():
      for a in arms:
        if set(a.seeds) & set(p.look_seeds[1]):
          raise ValueError(f"stage {stage} arm {a}: its seeds {a.seeds} include the second "
                           f"look's {p.look_seeds[1]}, by which the CPU budget and "
                           "later_after_first_looks tell a second look's runs; give the arm "
                           "other seeds.")


def _learning_rates(p) -> None:
  if p.lr_preferred not in p.lr_grid:
    raise ValueError(f"lr_preferred {p.lr_preferred!r} is not in lr_grid "
                     f"{p.lr_grid}; ties go to it.")
  first = p.first_stages()  # where each task's own lr is picked
  for task, source in p.lr_from.items():
    if source in p.lr_from or first.get(source, len(p.stages) + 1) > first.get(task, 1):
      raise ValueError(f"lr_from {task!r}: {source!r}: a task takes the lr of a task that "
                       "picks its own, in the same stage or before (a comparison or an arm "
                       "trains it there); name such a task.")


def _comparisons(p) -> None:
  for c in p.comparisons:
    if c.task not in p.tasks:
      raise ValueError(f"comparison {c} names task {c.task!r}, not one of the protocol's "
                       f"tasks ({', '.join(p.tasks)}); add it to `tasks`.")
    if c.kind not in ("noninferior", "superior"):
      raise ValueError(f"comparison {c}: kind {c.kind!r} is not 'noninferior' or "
                       "'superior'.")


def _arms(p) -> None:
  for stage, arms in p.arms.items():
    for a in arms:
      if a.task not in p.tasks:
        raise ValueError(f"stage {stage} arm {a} names task {a.task!r}, not one of the "
                         f"protocol's tasks ({', '.join(p.tasks)}).")
      if a.framework not in proto.FRAMEWORKS:
        raise ValueError(f"stage {stage} arm {a}: framework {a.framework!r} is not one of "
                         f"{', '.join(proto.FRAMEWORKS)}.")
      if a.framework == "torch" and (set(a.methods) != {"ce"} or a.grid):
        raise ValueError(f"stage {stage} arm {a}: the torch loop trains CE alone, without "
                         "a grid; give methods=('ce',).")
      if a.framework == "torch" and not _has_data_dir(p, a.task):
        raise ValueError(f"stage {stage} arm {a}: the torch loop reads task "
                         f"{a.task!r} from its task.data_dir; set it in the task's `sets`.")
      for field, values in a.grid:
        if (field in NAMED + GATED or not values
            or not all(map(records.fits_a_name, values))):
          raise ValueError(
              f"stage {stage} arm {a}: grid {field}={','.join(values)}: a grid value is part "
              "of a run's name and workdir (no '/', '=', ',' or empty value), and a grid may "
              f"not set {', '.join(NAMED + GATED)} (the run's name and the gates do).")


def _keys(sets) -> set[str]:
  return {kv.partition("=")[0] for kv in sets}


def _extras(p) -> None:
  """One `extra` per method and task in the whole protocol, setting nothing set elsewhere: a
  run's name (task, method, grid, seed) does not carry it, and a later rule reads a method's
  runs from any stage by that name."""
  trained = [("stage 1", c.task, m, "jax", c.extra, ()) for c in p.comparisons
             for m in (c.method, c.baseline)] + [
      (f"stage {st}", a.task, m, a.framework, a.extra, tuple(k for k, _ in a.grid))
      for st, arms in sorted(p.arms.items()) for a in arms for m in a.methods]
  seen = {}
  for where, task, method, framework, extra, grid in trained:
    clash = _keys(extra) & (_keys(p.tasks[task].sets) | {*GATED, "seed", *grid})
    if clash:
      raise ValueError(f"{where} trains {method} on {task} with extra {list(extra)}, which "
                       f"sets {', '.join(sorted(clash))}: the task's sets, the gates, the "
                       "seed or the grid set that already; set it in one place.")
    first, had = seen.setdefault((task, method, framework), (where, extra))
    if sorted(had) != sorted(extra):
      raise ValueError(f"{first} trains {method} on {task} with extra {list(had)} and "
                       f"{where} with {list(extra)}: their runs would share a name and a "
                       "workdir, and a rule would read one for the other. Give the setting "
                       "as a grid field, or as a method preset of its own.")


def _has_data_dir(p, task: str) -> bool:
  return any(s.startswith("task.data_dir=") for s in p.tasks[task].sets)


def _anchors(p) -> None:
  if p.anchors and not p.glue_hf_anchor[0]:
    raise ValueError("anchors need glue_hf_anchor's record: a task whose CE misses its "
                     "anchor is read once HF PyTorch's run there is recorded.")
  for task in p.anchors:
    if task in p.tasks and not _has_data_dir(p, task):
      raise ValueError(f"anchors[{task!r}]: a task whose CE misses its anchor waits on HF "
                       "PyTorch's run, which reads the task from its task.data_dir; set it "
                       "in the task's `sets`, or drop the anchor.")


def _rules(p) -> None:
  """Every rule reads runs that a stage up to its own trains: an arm's (multi-exit methods,
  with their early-exit sweep, for an exit rule), or stage 1's comparisons'; a grid rule reads
  an arm's one grid field at its values (the method's preset may come from stage 1)."""
  stage1 = {(c.task, m) for c in p.comparisons for m in (c.method, c.baseline)}
  for stage, rules in p.rules.items():
    arms = [a for st, arms in p.arms.items() if st <= stage for a in arms
            if a.framework == "jax"]
    for rule in rules:
      if rule.task not in p.tasks:
        raise ValueError(f"stage {stage} rule {rule} names task {rule.task!r}, not one of "
                         f"the protocol's tasks ({', '.join(p.tasks)}).")
      grid = getattr(rule, "field", None)
      for method in later.rule_methods(rule):
        own = [a for a in arms if a.task == rule.task and method in a.methods]
        if isinstance(rule, proto.ExitRule) and (method not in p.multi_exit or not own):
          raise ValueError(f"stage {stage} rule {rule}: {method} on {rule.task} must be a "
                           f"multi-exit method ({', '.join(p.multi_exit)}) that an arm of "
                           f"stage {stage} or before trains (with the early-exit sweep).")
        if grid is not None and not any(
            [k for k, _ in a.grid] == [grid] and all(
                v in dict(a.grid)[grid] or (v == p.presets.get((method, grid))
                                            and (rule.task, method) in stage1)
                for v in rule.values) for a in own):
          raise ValueError(f"stage {stage} rule {rule}: no arm of stage {stage} or before "
                           f"trains {method} on {rule.task} over {grid} alone, at "
                           f"{', '.join(rule.values)} (a value outside its grid must be the "
                           "method's preset, from stage 1's runs).")
        if not own and (rule.task, method) not in stage1:
          raise ValueError(f"stage {stage} rule {rule}: nothing trains {method} on "
                           f"{rule.task}: add it to an arm of stage {stage} or before.")
        short = [a for a in own if a.seeds and not set(p.look_seeds[0]) <= set(a.seeds)]
        if short:
          raise ValueError(f"stage {stage} rule {rule} reads {method} on {rule.task}, whose "
                           f"arm {short[0]} lacks the first look's seeds {p.look_seeds[0]}.")
      if isinstance(rule, proto.Comparison) and rule.kind not in ("noninferior", "superior"):
        raise ValueError(f"stage {stage} rule {rule}: kind {rule.kind!r} is not "
                         "'noninferior' or 'superior'.")


def _described(p) -> None:
  """Each described grid is an arm's grid at the first look's seeds, and its preset is the
  method's, whose runs stage 1 trains."""
  stage1 = {(c.task, m) for c in p.comparisons for m in (c.method, c.baseline)}
  for d in p.described:
    if not later.described_stages(p, d):
      raise ValueError(f"described {d}: no arm of a later stage trains {d.method} on "
                       f"{d.task} over {d.field} alone at {', '.join(d.values)}; add the "
                       "grid to an arm, or describe the arm's own values.")
    if p.presets.get((d.method, d.field)) != d.preset or (d.task, d.method) not in stage1:
      raise ValueError(f"described {d}: its preset {d.preset!r} is read from stage 1's "
                       f"{d.method} runs on {d.task}: give the method's preset "
                       f"(presets[({d.method!r}, {d.field!r})]) and a stage-1 comparison "
                       "that trains it there.")


def _costs(p) -> None:
  """Each cost rule names a claim and a task of the protocol, a kind its rule knows, and a
  bound that kind can decide on."""
  for rule in p.cost_rules:
    if rule.claim not in p.claims or rule.task not in p.tasks:
      raise ValueError(f"cost rule {rule}: its claim and task must be the protocol's "
                       f"(claims: {', '.join(p.claims)}; tasks: {', '.join(p.tasks)}).")
    if rule.kind == "share" and not 0 < rule.bound < 1:
      raise ValueError(f"cost rule {rule}: a share's bound is a fraction in (0, 1), got "
                       f"{rule.bound}.")
    elif rule.kind == "ratio" and (not rule.baseline or not 0 < rule.bound < 1):
      raise ValueError(f"cost rule {rule}: a ratio rule needs a baseline and the paper's "
                       f"ratio in (0, 1) as its bound, got {rule.baseline!r} and {rule.bound}.")
    elif rule.kind not in ("share", "ratio"):
      raise ValueError(f"cost rule {rule}: kind {rule.kind!r} is not 'share' or 'ratio'.")
    unknown = [m for m in (rule.method, rule.baseline) if m and p.labels and m not in p.labels]
    if unknown:
      raise ValueError(f"cost rule {rule}: {', '.join(unknown)} is no method the protocol "
                       f"labels ({', '.join(p.labels)}).")
    if not records.SWEEP_NAME.fullmatch(rule.record):
      raise ValueError(f"cost rule {rule}: record {rule.record!r} is not a record name "
                       "(letters, digits, '_', '.', '-').")


# ---- rows against the planner's decisions ------------------------------------------------


def later_rows(p: proto.Protocol, idx: dict, states: dict) -> None:
  """Every row of a later stage's record whose task has its lr and epochs decided (`states`:
  the planner's TaskState of each), checked to have trained at them (`trained_as_planned`),
  as stage 1's rows are where they are paired: the rules' lookups (`later.find`) name runs
  without either."""
  later_records = {p.stage_record[s] for s in p.stages if s > 1}
  for (record, _), row in idx.items():
    st = states.get(row.get("task"))
    if record in later_records and st is not None and None not in (st.lr, st.epochs):
      trained_as_planned(p, row, st)


def trained_as_planned(p: proto.Protocol, row: dict, st) -> dict:
  """The row, if it trained at the task's picked lr and epochs (`st`, its planner.TaskState);
  else a ValueError. Run names
  leave both out (they are the task's decisions), so a row trained before a decision changed
  would otherwise be paired as if it were planned."""
  b = row.get("budget", {})
  lr, epochs = b.get("lr"), b.get("num_epochs")
  if not proto.same_lr(lr, st.lr) or epochs != st.epochs:
    raise ValueError(
        f"{row['sweep']} row {row['run']} trained at lr {lr}, {proto.epochs_text(epochs)}, but "
        f"{st.task}'s decisions are lr {st.lr}, {proto.epochs_text(st.epochs)}; move the row "
        f"out of results/records/{row['sweep']}.jsonl (the sweep then trains it again).")
  return row
