"""A protocol's runs resolved when it loads, as train.py would resolve them: a study that names
a method no preset has, or a config field that does not exist, is refused before its first
run trains, in one line that names the method or field and where the protocol names it.

`check(protocol, checkout)` (called by `loader.load`) resolves one run of every kind the
planner can release: each task's lr run and budget run, each stage-1 comparison's arms and
diagnostics, and each later arm's methods at every grid value. The learning rate, the epochs
and the seed are those of the gates and looks (numbers of a field that exists, whichever
value the records pick), so one run of each kind resolves as every run of it does.

It then checks that every paired comparison is fair by construction (`check_fair`): its two
arms' resolved configs differ only in their methods' own fields (`method_fields`: the loss
registry's, a variant's). `check_data` (sweep --stage) refuses runs whose data files are not
there.

Imports the checkout's configs (and with them jax) when it runs, not when it is imported.
"""
import dataclasses
import importlib
import os

from acl_jax import provenance
from acl_jax.errors import UserError
from acl_jax.study import identity, later, planner, protocol as proto

# Run-name fields that are no config field (the sweep turns them into the run's command).
NOT_FIELDS = ("task", "method", "framework")
# The data files a config names (configs/files.py's tasks), read relative to task.data_dir.
DATA_FILES = ("train_file", "dev_file", "test_file")


@dataclasses.dataclass(frozen=True)
class Planned:
  """One planned run to resolve, and where the protocol asks for it (for the message)."""
  where: str
  run: planner.Run


def overrides(run: planner.Run) -> list[str]:
  """The `--config.k=v` overrides the sweep gives the run (`identity.settings_identity`)."""
  return [*run.sets, *(f"{k}={v}" for k, v in run.settings if k not in NOT_FIELDS)]


def _state(p: proto.Protocol, task: str) -> planner.TaskState:
  return planner.TaskState(task, lr=p.lr_preferred, epochs=p.tasks[task].epochs)


def methods_named(p: proto.Protocol) -> list[tuple[str, str]]:
  """(where, method) for every method the protocol trains or reads."""
  out = [(f"comparison {c.claim!r} on {c.task}", m) for c in p.comparisons
         for m in (c.method, c.baseline)]
  out += [(f"diagnostic on {t}", m) for t, m, _ in p.diagnostics]
  out += [(f"stage {s} arm on {a.task}", m) for s, arms in sorted(p.arms.items())
          for a in arms for m in a.methods]
  out += [(f"stage {s} rule {r.claim!r} on {r.task}", m) for s, rules in sorted(p.rules.items())
          for r in rules for m in later.rule_methods(r)]
  out += [(f"cost rule {r.claim!r}", m) for r in p.cost_rules
          for m in (r.method, r.baseline) if m]
  out += [(f"described grid on {d.task}", d.method) for d in p.described]
  return out


def planned(p: proto.Protocol) -> list[Planned]:
  """One run of every kind the planner can release (see the module's docstring)."""
  out = []
  for task in p.tasks:
    st = _state(p, task)
    if task not in p.lr_from:
      out.append(Planned(f"task {task}'s lr grid", planner.lr_run(p, task, p.lr_grid[0])))
    if p.budget_gain is not None:
      out.append(Planned(f"task {task}'s budget check", planner.budget_run(p, task, st.lr)))
  seed = p.look_seeds[0][0]
  for c in p.comparisons:
    st = _state(p, c.task)
    out += [Planned(f"comparison {c.claim!r} on {c.task}",
                    planner.method_run(p, p.stage_record[1], st, m, seed, c.extra))
            for m in (c.method, c.baseline)]
  for task, method, settings in p.diagnostics:
    out.append(Planned(f"diagnostic on {task}", planner.method_run(
        p, p.gate_record, _state(p, task), method, seed, extra_settings=settings)))
  for stage, arms in sorted(p.arms.items()):
    for arm in arms:
      if arm.framework != "jax":  # benchmarks/hf_run.py's run: no config of train.py's
        continue
      one = dataclasses.replace(arm, seeds=p.first_seeds(arm)[:1])
      out += [Planned(f"stage {stage} arm on {arm.task}", r)
              for r in planner._arm_runs(p, stage, one, _state(p, arm.task))]  # pylint: disable=protected-access
  return out


def _config_words(checkout: str):
  """The checkout's configs/common.py: its method presets and multi-exit strategies."""
  identity.configs_of(checkout)
  return importlib.import_module("configs.common")


def check_methods(p: proto.Protocol, checkout: str) -> None:
  """Every method the protocol names is a preset or a multi-exit strategy."""
  common = _config_words(checkout)
  for where, method in methods_named(p) + [(f"variant {name!r}", v.method)
                                           for name, v in p.variants.items()]:
    if method in p.variants and not where.startswith("variant"):
      continue
    if method not in common.METHODS and method not in common.MULTI_EXIT:
      raise UserError(
          f"{where} names method {method!r}, which no preset has; methods: "
          f"{', '.join(common.METHODS)}; multi-exit: {', '.join(common.MULTI_EXIT)} "
          f"(configs/common.py){'; variants: ' + ', '.join(p.variants) if p.variants else ''}.")


def method_fields(p: proto.Protocol, common, method: str) -> set[str]:
  """The fields that are `method`'s own: a preset's (`common.method_fields`), or a variant's
  preset's and those its sets set."""
  v = p.variants.get(method)
  if v is None:
    return common.method_fields(method)
  return common.method_fields(v.method) | {kv.partition("=")[0] for kv in v.sets}


def resolve_all(p: proto.Protocol, checkout: str) -> list[tuple[Planned, dict]]:
  """(planned run, its resolved config) of every `planned` run; a UserError naming the run,
  where the protocol asks for it and why it does not resolve (train.py's refusal)."""
  out = []
  for item in planned(p):
    run = item.run
    try:
      cfg = identity.resolve(run.config, overrides(run), checkout)
    except UserError as e:
      raise UserError(f"{item.where}: run {run.name} (--config {run.config}) does not "
                      f"resolve: {e} Fix the protocol's task sets, extra or grid.") from None
    out.append((item, cfg))
  return out


def _arm_run(p: proto.Protocol, stage: int, task: str, method: str) -> planner.Run | None:
  """The run of `method` on `task` that a stage-`stage` rule reads (seed of the first look):
  a later arm's without a grid, up to that stage, else a stage-1 comparison's."""
  st, seed = _state(p, task), p.look_seeds[0][0]
  for s in sorted(p.arms, reverse=True):
    for arm in p.arms[s] if s <= stage else ():
      if arm.task == task and method in arm.methods and not arm.grid and (
          arm.framework == "jax"):
        return planner.method_run(p, p.stage_record[s], st, method, seed, arm.extra)
  for c in p.comparisons:
    if c.task == task and method in (c.method, c.baseline):
      return planner.method_run(p, p.stage_record[1], st, method, seed, c.extra)
  return None


def paired_arms(p: proto.Protocol) -> list[tuple[str, str, str, planner.Run, planner.Run]]:
  """(where, method, baseline, method's run, baseline's run) of every comparison the protocol
  decides by pairing two methods' runs seed by seed: stage 1's, and the later stages'
  comparisons and exit rules (against each baseline)."""
  seed, out = p.look_seeds[0][0], []
  for c in p.comparisons:
    st = _state(p, c.task)
    out.append((f"comparison {c.claim!r} on {c.task}", c.method, c.baseline,
                planner.method_run(p, p.stage_record[1], st, c.method, seed, c.extra),
                planner.method_run(p, p.stage_record[1], st, c.baseline, seed, c.extra)))
  for stage, rules in sorted(p.rules.items()):
    for r in rules:
      if isinstance(r, proto.Comparison):
        pairs = [(r.method, r.baseline)]
      elif isinstance(r, proto.ExitRule):
        pairs = [(r.method, b) for b in r.baselines]
      else:  # a grid rule: each method against itself over its grid
        continue
      for method, baseline in pairs:
        a, b = _arm_run(p, stage, r.task, method), _arm_run(p, stage, r.task, baseline)
        if a is not None and b is not None:
          out.append((f"stage {stage} rule {r.claim!r} on {r.task}", method, baseline, a, b))
  return out


def unfair_fields(a: dict, b: dict, own: set[str]) -> list[str]:
  """The fields in which resolved configs `a` and `b` differ, beyond `own` (the methods')."""
  la, lb = provenance.flatten(a), provenance.flatten(b)
  return sorted(k for k in la.keys() | lb.keys() if la.get(k) != lb.get(k) and k not in own)


def check_fair(p: proto.Protocol, checkout: str) -> None:
  """Refuses (UserError) a comparison whose two arms would train with a field set apart
  that is neither method's own (`configs.common.method_fields`, from the loss registry): its
  verdict would measure that field too, e.g. a config file that weighs G-Loss's classes and
  not CE's. The fix is the task's `sets`, which both arms share."""
  common = _config_words(checkout)
  for where, method, baseline, run_a, run_b in paired_arms(p):
    a = identity.resolve(run_a.config, overrides(run_a), checkout)
    b = identity.resolve(run_b.config, overrides(run_b), checkout)
    apart = unfair_fields(a, b, method_fields(p, common, method)
                          | method_fields(p, common, baseline))
    if apart:
      field, la, lb = apart[0], provenance.flatten(a), provenance.flatten(b)
      more = f" (and {', '.join(apart[1:])})" if apart[1:] else ""
      raise UserError(
          f"{where}: {method} would train with {field}={la.get(field)!r} and {baseline} with "
          f"{lb.get(field)!r}{more} (--config {run_a.config}, {run_b.config}), a field of "
          "neither method, so the verdict would measure it too. Set it for both in the sets "
          f"of task {run_a.task!r}, e.g. \"{field}={la.get(field)}\" (or, to compare "
          "against a method with other settings, name that method as a Variant).")


def check(p: proto.Protocol, checkout: str) -> None:
  """Refuses (UserError) a protocol one of whose runs train.py would refuse, or one of whose
  comparisons would train its two arms apart in a field neither method owns."""
  check_methods(p, checkout)
  resolve_all(p, checkout)
  check_fair(p, checkout)


def missing_data(cfg: dict, checkout: str) -> str:
  """The first data file the resolved config `cfg` names that does not exist, as train.py in
  `checkout` would look for it ("task.train_file data/train.csv"), or ""."""
  task = cfg.get("task", {})
  for key in DATA_FILES:
    name = task.get(key) or ""
    if not name:
      continue
    path = os.path.join(task.get("data_dir") or "", name)
    if not os.path.isfile(os.path.join(checkout, path)):
      return f"task.{key} {path}"
  return ""


def check_data(p: proto.Protocol, checkout: str) -> None:
  """Refuses (UserError) a protocol whose runs name a data file that is not there, before
  the first of them would fail on it."""
  for item, cfg in resolve_all(p, checkout):
    gone = missing_data(cfg, checkout)
    if gone:
      raise UserError(f"{item.where}: {gone} does not exist (read from {checkout}); point "
                      "the study at your data files (README, \"Your own study\").")
