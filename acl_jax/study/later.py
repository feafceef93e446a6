"""Later stages read from the records under their rules (the protocol's `rules`; the
statistics in acl_jax/study/rules.py).

Each rule is read at the look its seeds allow: the first (the protocol's look_seeds[0]) when
all are recorded, the second (both looks' seeds) when the first left it undecided and the
second look's seeds are recorded too.
"""
import dataclasses

from acl_jax.study import protocol as proto, rules


def run_name(task: str, method: str, seed, grid=()) -> str:
  """A protocol run's name (planner.Run.name): task, method, grid, seed."""
  return ",".join(f"{k}={v}" for k, v in (("task", task), ("method", method), *grid,
                                            ("seed", str(seed))))


def find(p: proto.Protocol, idx: dict, stage: int, task: str, method: str, seed,
         grid=()) -> dict | None:
  """A run's row: in the stage's record or an earlier stage's (a baseline trained there),
  else, for a grid point at the method's preset, stage 1's run of the same settings."""
  name = run_name(task, method, seed, grid)
  row = next((idx[k] for k in ((p.stage_record[s], name) for s in range(stage, 0, -1))
              if k in idx), None)
  if row is None and all(p.presets.get((method, k)) == v for k, v in grid):
    row = idx.get((p.stage_record[1], run_name(task, method, seed)))
  return row


def looks(p: proto.Protocol, get, decide) -> tuple[int, object] | None:
  """(look, decision) of a rule: `get(seeds)` gives the per-seed inputs or None while any is
  unrecorded, `decide(inputs, look)` the decision, whose `.final` (or a word not "undecided")
  ends it at the first look. None before the first look is recorded."""
  first = get(p.look_seeds[0])
  if first is None:
    return None
  out = decide(first, 1)
  if _word(out) != "undecided":
    return 1, out
  both = get(p.look_seeds[0] + p.look_seeds[1])
  return (2, decide(both, 2)) if both is not None else (1, out)


def _word(decision) -> str:
  return decision if isinstance(decision, str) else (
      decision.word if hasattr(decision, "word") else decision[0])


def _rows(p: proto.Protocol, idx, stage, task, method, seeds, grid=()):
  rows = [find(p, idx, stage, task, method, s, grid) for s in seeds]
  return None if None in rows else rows


# ---- ExitRule -----------------------------------------------------------------------------
def contrast_name(rule: proto.ExitRule) -> str:
  """What an exit rule's contrast is called: "shallow − deep", or with no deep exits the
  shallow exits' own gain ("exit 6 gain")."""
  if rule.deep:
    return "shallow − deep"
  return f"exit{'s' * (len(rule.shallow) > 1)} {', '.join(map(str, rule.shallow))} gain"


def exits_of(rule: proto.ExitRule) -> tuple[int, ...]:
  """The exits an exit rule reads: its shallow and its deep ones, in order."""
  return tuple(sorted({*rule.shallow, *rule.deep}))


def exit_points(row: dict, exits) -> dict[int, float]:
  """The final weights' dev accuracy at each of the exits, points."""
  dev = row["evals"][-1]["dev"]
  return {m: proto.points(dev[f"exit_{m}/accuracy"]) for m in exits}


def curve(row: dict) -> list[tuple[float, float]]:
  """The entropy early-exit curve on dev: (mean layers per example, accuracy points), with
  the full model at its layer count."""
  pts = [(r["mean_layers"], proto.points(r["metric"])) for r in row["early_exit"]["entropy"]]
  full = row["early_exit"]["entropy"][0]
  return pts + [(float(full["num_layers"]), proto.points(full["full_metric"]))]


@dataclasses.dataclass(frozen=True)
class ExitResult:
  baseline: str
  look: int
  contrast: proto.Verdict  # shallow minus deep gain (no deep exits: the gain), superiority
  matched: proto.Verdict | None  # accuracy at rule.layers mean layers, superiority
  described: dict  # layers -> (mean, lo, hi) at the describing level, or None where not reached
  per_exit: dict  # exit -> (mean, lo, hi) at the describing level


def _at(rows_a, rows_b, layers):
  d = [(rules.score_at_layers(curve(a), layers), rules.score_at_layers(curve(b), layers))
       for a, b in zip(rows_a, rows_b)]
  return None if any(None in x for x in d) else [x - y for x, y in d]


def exit_result(p: proto.Protocol, idx: dict, stage: int, rule: proto.ExitRule,
                baseline: str) -> ExitResult | None:
  def get(seeds):
    a = _rows(p, idx, stage, rule.task, rule.method, seeds)
    b = _rows(p, idx, stage, rule.task, baseline, seeds)
    return None if a is None or b is None else (a, b)

  def decide(pair, look):
    a, b = pair
    exits = exits_of(rule)
    contrasts = [rules.exit_contrast(exit_points(x, exits), exit_points(y, exits),
                                     rule.shallow, rule.deep) for x, y in zip(a, b)]
    at = _at(a, b, rule.layers)
    matched = p.verdict(at, "superior", 0.0, look) if at else None
    described = {}
    for layers in rule.described_layers:
      d = _at(a, b, layers)
      described[layers] = proto.interval(d, p.describe_level) if d else None
    per_exit = {m: proto.interval([exit_points(x, exits)[m] - exit_points(y, exits)[m]
                                   for x, y in zip(a, b)], p.describe_level) for m in exits}
    return ExitResult(baseline, look, rules.exit_verdict(p, contrasts, look), matched,
                      described, per_exit)

  got = looks(p, get, lambda pair, look: decide(pair, look).contrast)
  if got is None:
    return None
  look, _ = got
  return decide(get(p.look_seeds[0] + (p.look_seeds[1] if look == 2 else ())), look)


# ---- RangeRule and StableRule -------------------------------------------------------------
def grid_scores(p: proto.Protocol, idx, stage, task, method, field, values, seeds):
  """scores[value][seed] in points, None while any is unrecorded."""
  out = []
  for v in values:
    rows = _rows(p, idx, stage, task, method, seeds, ((field, v),))
    if rows is None:
      return None
    out.append([p.score(r) for r in rows])
  return out


def range_result(p: proto.Protocol, idx: dict, stage: int, rule: proto.RangeRule):
  """(look, (word, robust spread, sensitive spread, paired verdict)) or None."""
  def get(seeds):
    r = grid_scores(p, idx, stage, rule.task, rule.robust, rule.field, rule.values, seeds)
    s = grid_scores(p, idx, stage, rule.task, rule.sensitive, rule.field, rule.values, seeds)
    return None if r is None or s is None else (r, s)
  return looks(p, get, lambda rs, look: rules.range_claim(p, rs[0], rs[1], look))


def stable_result(p: proto.Protocol, idx: dict, stage: int, rule: proto.StableRule):
  """(look, (word, verdict of the range's two ends)) or None."""
  def get(seeds):
    return grid_scores(p, idx, stage, rule.task, rule.method, rule.field, rule.values, seeds)
  margin = p.tasks[rule.task].margin
  return looks(p, get, lambda s, look: rules.stable_verdict(
      p, [a - b for a, b in zip(s[0], s[1])], margin, look))


def described_stages(p: proto.Protocol, d: proto.Described) -> list[int]:
  """The stages, in order, whose arm trains described grid `d`: `d.method` on `d.task` in
  JAX, over `d.field` alone, at (at least) `d.values`."""
  return sorted({st for st, arms in p.arms.items() for a in arms
                 if a.task == d.task and d.method in a.methods and a.framework == "jax"
                 and [k for k, _ in a.grid] == [d.field] and set(d.values) <= set(a.grid[0][1])})


# ---- plain comparisons --------------------------------------------------------------------
def comparison_result(p: proto.Protocol, idx: dict, stage: int,
                      c: proto.Comparison) -> proto.Verdict | None:
  def get(seeds):
    a = _rows(p, idx, stage, c.task, c.method, seeds)
    b = _rows(p, idx, stage, c.task, c.baseline, seeds)
    return None if a is None or b is None else [p.score(x) - p.score(y) for x, y in zip(a, b)]
  got = looks(p, get, lambda d, look: p.verdict(d, c.kind, p.tasks[c.task].margin, look))
  return None if got is None else got[1]


def rule_methods(rule) -> tuple[str, ...]:
  """The methods a stage-2/3 rule reads."""
  if isinstance(rule, proto.ExitRule):
    return (rule.method,) + rule.baselines
  if isinstance(rule, proto.RangeRule):
    return rule.robust, rule.sensitive
  if isinstance(rule, proto.StableRule):
    return (rule.method,)
  return rule.method, rule.baseline


def rule_values(rule) -> tuple[str, tuple[str, ...]] | None:
  """(field, values) a grid rule reads; None for the others."""
  if isinstance(rule, (proto.RangeRule, proto.StableRule)):
    return rule.field, tuple(rule.values)
  return None


def second_look_wanted(p: proto.Protocol, idx: dict, stage: int, rule) -> bool:
  """Whether the rule's first look is recorded and left it undecided: its seeds 3-4 follow."""
  got = claim_word(p, idx, stage, rule)
  return got is not None and got[0] == "undecided"


def claim_word(p: proto.Protocol, idx: dict, stage: int, rule) -> tuple[str, str] | None:
  """(the rule's word, a short cell) once its first look is recorded; None before."""
  if isinstance(rule, proto.ExitRule):
    res = [exit_result(p, idx, stage, rule, b) for b in rule.baselines]
    if None in res:
      return None
    word = rules.exit_claim([r.contrast for r in res])
    cell = "; ".join(f"vs {b.upper()} {contrast_name(rule)} {r.contrast.mean:+.2f} "
                     f"[{r.contrast.decide[0]:+.2f}, {r.contrast.decide[1]:+.2f}]"
                     for b, r in zip(rule.baselines, res))
    return word, f"{cell}: {word}"
  if isinstance(rule, proto.RangeRule):
    got = range_result(p, idx, stage, rule)
    if got is None:
      return None
    word, r, s, v = got[1]
    robust, sensitive = p.label(rule.robust), p.label(rule.sensitive)
    return word, (f"range of seed means {robust} {r.range:.2f} (floor {r.floor:.2f}), "
                  f"{sensitive} {s.range:.2f} (floor {s.floor:.2f}); per-seed range "
                  f"{sensitive} − {robust} {v.mean:+.2f} [{v.decide[0]:+.2f}, "
                  f"{v.decide[1]:+.2f}]: {word}")
  if isinstance(rule, proto.StableRule):
    got = stable_result(p, idx, stage, rule)
    if got is None:
      return None
    word, v = got[1]
    return word, (f"{rule.values[0]} − {rule.values[1]} {v.mean:+.2f} "
                  f"[{v.decide[0]:+.2f}, {v.decide[1]:+.2f}]: {word}")
  v = comparison_result(p, idx, stage, rule)
  if v is None:
    return None
  return v.word, f"{v.mean:+.2f} [{v.decide[0]:+.2f}, {v.decide[1]:+.2f}] ({v.ahead}/{v.n}) " \
                 f"{v.word}"
