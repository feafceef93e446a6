"""The decision rules of later stages (acl_jax.study.protocol: ExitRule, RangeRule,
StableRule), as pure functions of per-seed scores in points. `Protocol.verdict` decides the
plain comparisons; these decide the claims that are not one paired difference.

Each function takes numbers, not records, so a test can state what a rule must conclude.
"""
import dataclasses
import math

from acl_jax.study import protocol as proto

# The words of the claim-level rules, beside stage 1's VERDICT_WORDS.
RULE_WORDS = ("holds", "fails", "stable", "unstable", "undecided", "inconclusive")


def _open(look: int) -> str:
  return "undecided" if look == 1 else "inconclusive"


# ---- ExitRule -----------------------------------------------------------------------------
def exit_contrast(method: dict[int, float], baseline: dict[int, float],
                  shallow=(1, 2, 3), deep=(4, 5, 6)) -> float:
  """One seed's mean gain (method − baseline, points) over the shallow exits minus that over
  the deep ones; positive when the shallow exits gain more. No deep exits: the shallow
  exits' gain itself (the method's exits against the baseline's at the same layers)."""
  def gain(exits):
    return sum(method[m] - baseline[m] for m in exits) / len(exits)
  return gain(shallow) - (gain(deep) if deep else 0.0)


def score_at_layers(curve, layers: float) -> float | None:
  """A seed's accuracy at `layers` mean layers per example, linear between the points of its
  early-exit curve [(mean layers, score)]; None outside the curve's span."""
  pts = sorted(curve)
  for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
    if x0 <= layers <= x1:
      return y0 if x1 == x0 else y0 + (y1 - y0) * (layers - x0) / (x1 - x0)
  if pts and pts[0][0] == layers:
    return pts[0][1]
  return None


def exit_verdict(p: proto.Protocol, contrasts, look: int) -> proto.Verdict:
  """The shallow-minus-deep contrasts' verdict against one baseline (with no deep exits, the
  shallow exits' own gains): "beats" (the interval lies above zero) is the claim holding,
  "worse" its failing."""
  return p.verdict(contrasts, "superior", 0.0, look)


def exit_claim(verdicts: list[proto.Verdict]) -> str:
  """Over the baselines: holds when it holds against every one, fails when it fails against
  any; else undecided while any baseline's comparison is (its second look still to come),
  and inconclusive once none is."""
  if any(v.word == "worse" for v in verdicts):
    return "fails"
  if verdicts and all(v.word == "beats" for v in verdicts):
    return "holds"
  return "undecided" if not verdicts or any(not v.final for v in verdicts) else "inconclusive"


# ---- RangeRule ----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Spread:
  """One method's sensitivity to the swept field: its range of seed means against the range
  that seed noise alone would give those means (Tukey's critical difference)."""
  means: tuple[float, ...]
  range: float
  floor: float
  n: int

  @property
  def passes(self) -> bool:
    return self.range > self.floor


def spread(scores: list[list[float]], level: float) -> Spread:
  """scores[v][s]: the score at value v, seed s (the same seeds at every value)."""
  from scipy import stats  # pylint: disable=import-outside-toplevel
  k, n = len(scores), len(scores[0])
  means = tuple(sum(col) / n for col in scores)
  df = k * (n - 1)
  pooled = math.sqrt(sum((x - m) ** 2 for col, m in zip(scores, means) for x in col) / df)
  floor = float(stats.studentized_range.ppf(level, k, df)) * pooled / math.sqrt(n)
  return Spread(means, max(means) - min(means), floor, n)


def seed_ranges(scores: list[list[float]]) -> list[float]:
  """Per seed, the range (max − min) of its scores over the values."""
  return [max(col[s] for col in scores) - min(col[s] for col in scores)
          for s in range(len(scores[0]))]


def range_claim(p: proto.Protocol, robust: list[list[float]], sensitive: list[list[float]],
                look: int) -> tuple[str, Spread, Spread, proto.Verdict]:
  """(word, robust's spread, sensitive's spread, the paired per-seed range verdict)."""
  r, s = spread(robust, p.decide_level), spread(sensitive, p.decide_level)
  diffs = [b - a for a, b in zip(seed_ranges(robust), seed_ranges(sensitive))]
  v = p.verdict(diffs, "superior", 0.0, look)
  if r.passes or v.word == "worse":
    word = "fails"
  elif v.word == "beats" and s.passes:
    word = "holds"
  else:
    word = _open(look)
  return word, r, s, v


# ---- StableRule ---------------------------------------------------------------------------
def stable_verdict(p: proto.Protocol, diffs, margin: float, look: int) -> tuple[str, proto.Verdict]:
  """Equivalence of the range's two ends: the deciding interval of the paired difference
  within ± margin is "stable", wholly outside it "unstable"."""
  v = p.verdict(diffs, "superior", 0.0, look)
  lo, hi = v.decide
  if -margin < lo and hi < margin:
    return "stable", v
  if lo > margin or hi < -margin:
    return "unstable", v
  return _open(look), v


# ---- CostRule -----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CostVerdict:
  """A cost rule's word, and the statistic's mean and deciding interval in the rule's own
  units (a share of the step, or a ratio of steps) over `n` rounds."""
  word: str
  mean: float
  low: float
  high: float
  n: int


def cost_verdict(p: proto.Protocol, rule: proto.CostRule, method_s: list[float],
                 other_s: list[float]) -> CostVerdict:
  """A cost rule's verdict from its rounds' seconds, round by round: for a "share" rule the
  method's term alone (`other_s`) over its step (`method_s`); for a "ratio" rule the method's
  step (`method_s`) over the baseline's (`other_s`)."""
  if len(method_s) != len(other_s) or len(method_s) < 2:
    raise ValueError(f"{rule.claim}: a cost rule needs the same 2 or more rounds of both "
                     f"timings, got {len(method_s)} and {len(other_s)}.")
  if rule.kind == "share":
    mean, lo, hi = proto.interval([o / m for m, o in zip(method_s, other_s)], p.decide_level)
    word = "holds" if hi < rule.bound else "fails" if lo > rule.bound else "inconclusive"
  elif rule.kind == "ratio":
    logs = [math.log(m / o) for m, o in zip(method_s, other_s)]
    mean, lo, hi = (math.exp(v) for v in proto.interval(logs, p.decide_level))
    word = "holds" if hi < 1 else "fails" if lo > rule.bound else "inconclusive"
  else:
    raise ValueError(f"{rule.claim}: cost rule kind {rule.kind!r} is not 'share' or 'ratio'.")
  return CostVerdict(word, mean, lo, hi, len(method_s))
