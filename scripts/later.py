"""Stages 2 and 3 read from the records under their rules (scripts/sweeps.py STAGE2_RULES,
STAGE3_RULES; the statistics in scripts/rules.py), and the tables of results/STAGE2.md.

Each rule is read at the look its seeds allow: the first (seeds 0-2) when all are recorded,
the second (seeds 0-4) when the first left it undecided and seeds 3-4 are recorded too.
"""
import dataclasses

from scripts import rules, sweeps as P

EXITS = (1, 2, 3, 4, 5, 6)


def run_name(task: str, method: str, seed, grid=()) -> str:
  """A protocol run's name (scripts/stages.py Run.name): task, method, grid, seed."""
  return ",".join(f"{k}={v}" for k, v in (("task", task), ("method", method), *grid,
                                            ("seed", str(seed))))


def find(idx: dict, stage: int, task: str, method: str, seed, grid=()) -> dict | None:
  """A run's row: in the stage's record or an earlier stage's (a baseline trained there),
  else, for a grid point at the method's preset, stage 1's run of the same settings."""
  name = run_name(task, method, seed, grid)
  row = next((idx[k] for k in ((P.STAGE_SWEEP[s], name) for s in range(stage, 0, -1))
              if k in idx), None)
  if row is None and all(P.PRESETS.get((method, k)) == v for k, v in grid):
    row = idx.get((P.STAGE_SWEEP[1], run_name(task, method, seed)))
  return row


def looks(get, decide) -> tuple[int, object] | None:
  """(look, decision) of a rule: `get(seeds)` gives the per-seed inputs or None while any is
  unrecorded, `decide(inputs, look)` the decision, whose `.final` (or a word not "undecided")
  ends it at the first look. None before the first look is recorded."""
  first = get(P.LOOK_SEEDS[0])
  if first is None:
    return None
  out = decide(first, 1)
  if _word(out) != "undecided":
    return 1, out
  both = get(P.LOOK_SEEDS[0] + P.LOOK_SEEDS[1])
  return (2, decide(both, 2)) if both is not None else (1, out)


def _word(decision) -> str:
  return decision if isinstance(decision, str) else (
      decision.word if hasattr(decision, "word") else decision[0])


def _rows(idx, stage, task, method, seeds, grid=()):
  rows = [find(idx, stage, task, method, s, grid) for s in seeds]
  return None if None in rows else rows


# ---- ExitRule -----------------------------------------------------------------------------
def exit_points(row: dict) -> dict[int, float]:
  """The final weights' dev accuracy at each exit, points."""
  dev = row["evals"][-1]["dev"]
  return {m: P.points("", dev[f"exit_{m}/accuracy"]) for m in EXITS}


def curve(row: dict) -> list[tuple[float, float]]:
  """The entropy early-exit curve on dev: (mean layers per example, accuracy points), with
  the full model at its layer count."""
  pts = [(r["mean_layers"], P.points("", r["metric"])) for r in row["early_exit"]["entropy"]]
  full = row["early_exit"]["entropy"][0]
  return pts + [(float(full["num_layers"]), P.points("", full["full_metric"]))]


@dataclasses.dataclass(frozen=True)
class ExitResult:
  baseline: str
  look: int
  contrast: P.Verdict  # shallow minus deep gain, superiority
  matched: P.Verdict | None  # accuracy at rule.layers mean layers, superiority
  described: dict  # layers -> (mean, lo, hi) at DESCRIBE_LEVEL, or None where not reached
  per_exit: dict  # exit -> (mean, lo, hi) at DESCRIBE_LEVEL


def _at(rows_a, rows_b, layers):
  d = [(rules.score_at_layers(curve(a), layers), rules.score_at_layers(curve(b), layers))
       for a, b in zip(rows_a, rows_b)]
  return None if any(None in x for x in d) else [x - y for x, y in d]


def exit_result(idx: dict, stage: int, rule: P.ExitRule, baseline: str) -> ExitResult | None:
  def get(seeds):
    a = _rows(idx, stage, rule.task, rule.method, seeds)
    b = _rows(idx, stage, rule.task, baseline, seeds)
    return None if a is None or b is None else (a, b)

  def decide(pair, look):
    a, b = pair
    contrasts = [rules.exit_contrast(exit_points(x), exit_points(y), rule.shallow, rule.deep)
                 for x, y in zip(a, b)]
    at = _at(a, b, rule.layers)
    matched = P.verdict(at, "superior", 0.0, look) if at else None
    described = {}
    for layers in rule.described_layers:
      d = _at(a, b, layers)
      described[layers] = P.interval(d, P.DESCRIBE_LEVEL) if d else None
    per_exit = {m: P.interval([exit_points(x)[m] - exit_points(y)[m] for x, y in zip(a, b)],
                              P.DESCRIBE_LEVEL) for m in EXITS}
    return ExitResult(baseline, look, rules.exit_verdict(contrasts, look), matched, described,
                      per_exit)

  got = looks(get, lambda pair, look: decide(pair, look).contrast)
  if got is None:
    return None
  look, _ = got
  return decide(get(P.LOOK_SEEDS[0] + (P.LOOK_SEEDS[1] if look == 2 else ())), look)


# ---- RangeRule and StableRule -------------------------------------------------------------
def grid_scores(idx, stage, task, method, field, values, seeds):
  """scores[value][seed] in points, None while any is unrecorded."""
  out = []
  for v in values:
    rows = _rows(idx, stage, task, method, seeds, ((field, v),))
    if rows is None:
      return None
    out.append([P.score(r) for r in rows])
  return out


def range_result(idx: dict, stage: int, rule: P.RangeRule):
  """(look, (word, robust spread, sensitive spread, paired verdict)) or None."""
  def get(seeds):
    r = grid_scores(idx, stage, rule.task, rule.robust, rule.field, rule.values, seeds)
    s = grid_scores(idx, stage, rule.task, rule.sensitive, rule.field, rule.values, seeds)
    return None if r is None or s is None else (r, s)
  return looks(get, lambda rs, look: rules.range_claim(rs[0], rs[1], look))


def stable_result(idx: dict, stage: int, rule: P.StableRule):
  """(look, (word, verdict of the range's two ends)) or None."""
  def get(seeds):
    return grid_scores(idx, stage, rule.task, rule.method, rule.field, rule.values, seeds)
  margin = P.TASKS[rule.task].margin
  return looks(get, lambda s, look: rules.stable_verdict(
      [a - b for a, b in zip(s[0], s[1])], margin, look))


# ---- plain comparisons --------------------------------------------------------------------
def comparison_result(idx: dict, stage: int, c: P.Comparison) -> P.Verdict | None:
  def get(seeds):
    a = _rows(idx, stage, c.task, c.method, seeds)
    b = _rows(idx, stage, c.task, c.baseline, seeds)
    return None if a is None or b is None else [P.score(x) - P.score(y) for x, y in zip(a, b)]
  got = looks(get, lambda d, look: P.verdict(d, c.kind, P.TASKS[c.task].margin, look))
  return None if got is None else got[1]


def rule_methods(rule) -> tuple[str, ...]:
  """The methods a stage-2/3 rule reads."""
  if isinstance(rule, P.ExitRule):
    return (rule.method,) + rule.baselines
  if isinstance(rule, P.RangeRule):
    return rule.robust, rule.sensitive
  if isinstance(rule, P.StableRule):
    return (rule.method,)
  return rule.method, rule.baseline


def rule_values(rule) -> tuple[str, tuple[str, ...]] | None:
  """(field, values) a grid rule reads; None for the others."""
  if isinstance(rule, (P.RangeRule, P.StableRule)):
    return rule.field, tuple(rule.values)
  return None


def second_look_wanted(idx: dict, stage: int, rule) -> bool:
  """Whether the rule's first look is recorded and left it undecided: its seeds 3-4 follow."""
  got = claim_word(idx, stage, rule)
  return got is not None and got[0] == "undecided"


def claim_word(idx: dict, stage: int, rule) -> tuple[str, str] | None:
  """(the rule's word, a short cell) once its first look is recorded; None before."""
  if isinstance(rule, P.ExitRule):
    res = [exit_result(idx, stage, rule, b) for b in rule.baselines]
    if None in res:
      return None
    word = rules.exit_claim([r.contrast for r in res])
    cell = "; ".join(f"vs {b.upper()} shallow − deep {r.contrast.mean:+.2f} "
                     f"[{r.contrast.decide[0]:+.2f}, {r.contrast.decide[1]:+.2f}]"
                     for b, r in zip(rule.baselines, res))
    return word, f"{cell}: {word}"
  if isinstance(rule, P.RangeRule):
    got = range_result(idx, stage, rule)
    if got is None:
      return None
    word, r, s, v = got[1]
    return word, (f"range of seed means ACL {r.range:.2f} (floor {r.floor:.2f}), CE+SCL "
                  f"{s.range:.2f} (floor {s.floor:.2f}); per-seed range CE+SCL − ACL "
                  f"{v.mean:+.2f} [{v.decide[0]:+.2f}, {v.decide[1]:+.2f}]: {word}")
  if isinstance(rule, P.StableRule):
    got = stable_result(idx, stage, rule)
    if got is None:
      return None
    word, v = got[1]
    return word, (f"{rule.values[0]} − {rule.values[1]} {v.mean:+.2f} "
                  f"[{v.decide[0]:+.2f}, {v.decide[1]:+.2f}]: {word}")
  v = comparison_result(idx, stage, rule)
  if v is None:
    return None
  return v.word, f"{v.mean:+.2f} [{v.decide[0]:+.2f}, {v.decide[1]:+.2f}] ({v.ahead}/{v.n}) " \
                 f"{v.word}"
