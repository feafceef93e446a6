"""Stages 2 and 3's decision rules (acl_jax/study/rules.py) on numbers whose answer is known."""
import math

import pytest

from acl_jax.study import protocol as proto, rules
from studies.papers import PAPERS as p

SHALLOW_GAIN = {1: 3.0, 2: 2.0, 3: 1.5, 4: 0.5, 5: 0.2, 6: 0.1}


def _exits(gains, base=80.0):
  return {m: base + g for m, g in gains.items()}, {m: base for m in gains}


def test_exit_contrast_is_shallow_gain_minus_deep_gain():
  method, baseline = _exits(SHALLOW_GAIN)
  assert rules.exit_contrast(method, baseline) == pytest.approx(6.5 / 3 - 0.8 / 3)
  # Swapping the roles flips the sign: the contrast is not symmetric in the exits.
  assert rules.exit_contrast(baseline, method) == pytest.approx(-(6.5 - 0.8) / 3)
  # No deep exits: the shallow exits' own gain, e.g. one exit against the same exit.
  one = {6: 80.0}, {6: 78.5}
  assert rules.exit_contrast(*one, shallow=(6,), deep=()) == pytest.approx(1.5)


def test_exit_claim_holds_fails_and_waits():
  holds = rules.exit_verdict(p, [1.9, 2.0, 2.1], 1)
  fails = rules.exit_verdict(p, [-1.9, -2.0, -2.1], 1)
  open_ = rules.exit_verdict(p, [2.0, -1.0, 0.5], 1)
  assert (holds.word, fails.word, open_.word) == ("beats", "worse", "undecided")
  assert rules.exit_claim([holds, holds]) == "holds"
  assert rules.exit_claim([holds, fails]) == "fails"
  assert rules.exit_claim([holds, open_]) == "undecided"
  assert rules.exit_claim([rules.exit_verdict(p, [2.0, -1.0, 0.5, 1.0, -0.5], 2)]) == \
      "inconclusive"
  assert rules.exit_claim([]) == "undecided"  # no baseline recorded yet
  # One baseline's second look in (inconclusive), another's still to come (undecided at its
  # first look): the claim waits, so that the planner still asks for the second seeds.
  second = rules.exit_verdict(p, [2.0, -1.0, 0.5, 1.0, -0.5], 2)
  assert rules.exit_claim([second, open_]) == "undecided"
  assert rules.exit_claim([second, second]) == "inconclusive"
  assert rules.exit_claim([second, holds]) == "inconclusive"


def test_score_at_layers_interpolates_and_refuses_outside():
  curve = [(6.0, 90.0), (2.0, 80.0), (4.0, 88.0)]
  assert rules.score_at_layers(curve, 3.0) == pytest.approx(84.0)
  assert rules.score_at_layers(curve, 5.0) == pytest.approx(89.0)
  assert rules.score_at_layers(curve, 2.0) == pytest.approx(80.0)
  assert rules.score_at_layers(curve, 1.5) is None
  assert rules.score_at_layers([(3.0, 70.0)], 3.0) == 70.0
  assert rules.score_at_layers(curve, 6.0) == pytest.approx(90.0)  # the curve's last point
  # Two thresholds with one mean depth: a zero-width segment, not a division by zero.
  assert rules.score_at_layers([(2.0, 80.0), (2.0, 80.0), (4.0, 88.0)], 2.0) == 80.0


def test_spread_floor_is_tukeys_critical_difference():
  scores = [[80.0, 81.0, 82.0], [80.0, 81.0, 82.0], [86.0, 87.0, 88.0]]
  s = rules.spread(scores, p.decide_level)
  # pooled sd 1 on 6 df, 3 means of 3 seeds: q(0.975; 3, 6) / sqrt(3)
  from scipy import stats
  assert s.floor == pytest.approx(stats.studentized_range.ppf(0.975, 3, 6) / math.sqrt(3))
  assert s.range == pytest.approx(6.0) and s.passes
  assert s.means == pytest.approx((81.0, 81.0, 87.0)) and s.n == 3
  flat = rules.spread([[80.0, 81.0, 82.0], [80.5, 81.5, 82.5], [80.0, 81.0, 82.0]],
                      p.decide_level)
  assert not flat.passes


def test_range_claim():
  noise = [0.0, 0.4, -0.3]
  robust = [[85 + e + 0.1 * v for e in noise] for v in range(5)]
  sensitive = [[85 + e + 2.0 * v + 0.2 * s for s, e in enumerate(noise)] for v in range(5)]
  word, r, s, v = rules.range_claim(p, robust, sensitive, 1)
  assert (word, r.passes, s.passes, v.word) == ("holds", False, True, "beats")
  # The roles swapped: the "robust" method moves with the field, so the claim fails.
  assert rules.range_claim(p, sensitive, robust, 1)[0] == "fails"
  # Both flat: neither shown, so it waits for the second look.
  assert rules.range_claim(p, robust, robust, 1)[0] == "undecided"
  assert rules.range_claim(p, robust, robust, 2)[0] == "inconclusive"
  # The paired difference is sensitive's seed range minus robust's (8 - 0.4 on every seed).
  assert v.mean == pytest.approx(7.6)
  assert rules.range_claim(p, robust, robust, 1)[3].word == "undecided"  # the look's own verdict
  # A robust method that moves with the field fails whatever the per-seed ranges say.
  assert rules.range_claim(p, sensitive, sensitive, 1)[0] == "fails"
  # Flat seed means but wide per-seed ranges (seed effects that cancel in the means): robust
  # does not pass, yet its seed ranges exceed sensitive's on every seed, so the claim fails.
  a, b = (0, 2, -2, 1, -1), (2, -2, 0, -1, 1)
  wide = [[85 + a[v], 85 - a[v], 85 + b[v], 85 - b[v]] for v in range(5)]
  narrow = [[85 + 0.1 * v + 0.05 * s for s in range(4)] for v in range(5)]
  word, r, _, v = rules.range_claim(p, wide, narrow, 1)
  assert (word, r.passes, v.word) == ("fails", False, "worse")
  # Sensitive passes its floor, but its seed ranges are no wider than robust's: not shown.
  moving = [[85 + v + 0.3 * ((v * s) % 3) for s in range(4)] for v in range(5)]
  word, r, s, v = rules.range_claim(p, wide, moving, 1)
  assert (word, r.passes, s.passes, v.word) == ("undecided", False, True, "undecided")


def test_seed_ranges():
  assert rules.seed_ranges([[1.0, 5.0], [3.0, 2.0], [2.0, 4.0]]) == [2.0, 3.0]


def test_stable_verdict_is_an_equivalence_test():
  assert rules.stable_verdict(p, [0.1, -0.1, 0.05], 1.0, 1)[0] == "stable"
  assert rules.stable_verdict(p, [3.0, 3.2, 2.9], 1.0, 1)[0] == "unstable"
  assert rules.stable_verdict(p, [-3.0, -3.2, -2.9], 1.0, 1)[0] == "unstable"
  assert rules.stable_verdict(p, [0.9, 0.95, 0.92], 1.0, 1)[0] == "undecided"
  assert rules.stable_verdict(p, [0.5, 1.5, 0.9, 1.2, 0.7], 1.0, 2)[0] == "inconclusive"
  # The superiority verdict it reports is the look's own.
  assert rules.stable_verdict(p, [0.5, -0.5, 0.2], 1.0, 1)[1].word == "undecided"
  # Wholly below zero, its upper end inside -margin: neither stable nor shown unstable.
  assert rules.stable_verdict(p, [-2.0, -1.7, -2.3], 1.0, 1)[0] == "undecided"
  # Seeds that agree exactly give a zero-width interval: on either end of the margin it is
  # neither strictly inside nor strictly outside.
  for d in (1.0, -1.0):
    assert rules.stable_verdict(p, [d, d, d], 1.0, 1)[0] == "undecided"


def test_every_later_arm_method_has_a_rule_or_a_description():
  """Each stage-2/3 arm's methods are judged by a rule (or described, with its reason)."""
  judged = set()
  for rule in p.rules[2] + p.rules[3]:
    if isinstance(rule, proto.Comparison):
      judged |= {(rule.task, rule.method), (rule.task, rule.baseline)}
    elif isinstance(rule, proto.ExitRule):
      judged |= {(rule.task, m) for m in (rule.method,) + rule.baselines}
    elif isinstance(rule, proto.RangeRule):
      judged |= {(rule.task, rule.robust), (rule.task, rule.sensitive)}
    else:
      judged.add((rule.task, rule.method))
  described = {(d.task, d.method) for d in p.described}
  for arm in p.arms[2] + p.arms[3]:
    for m in arm.methods:
      assert (arm.task, m) in judged | described, (arm.task, m)
  assert all(r.claim in p.claims for r in p.rules[2] + p.rules[3])


def test_holm_step_down_and_the_p_of_a_verdict():
  from acl_jax.study import holm  # pylint: disable=import-outside-toplevel
  tests = [holm.Test("a", "beats", 0.001), holm.Test("b", "worse", 0.006),
           holm.Test("c", "beats", 0.004), holm.Test("d", "inconclusive", 1.0)]
  # thresholds 0.025/4, /3, /2, /1: a (0.001 <= 0.00625), c (0.004 <= 0.00833), b (0.006 <=
  # 0.0125), then d (1 > 0.025)
  assert holm.holm(tests) == {"a": True, "c": True, "b": True, "d": False}
  # four more comparisons that assert nothing still enlarge the family: c (0.004 > 0.025/7)
  # stops the step-down, and b after it fails too
  wider = holm.holm(tests + [holm.Test(f"n{i}", "inconclusive", 1.0) for i in range(4)])
  assert (wider["a"], wider["c"], wider["b"]) == (True, False, False)
  assert holm.summary(tests).startswith("Of 3 decided verdicts among the 4 registered "
                                        "comparisons with a verdict so far, 3 survive")
  assert holm.summary(tests, 6).startswith("Of 3 decided verdicts among the 4 of 6 registered "
                                           "comparisons with a final verdict, 3 survive")
  assert holm.summary(tests, 4).startswith("Of 3 decided verdicts among all 4 registered "
                                           "comparisons, 3 survive")
  from scipy import stats
  v = p.verdict([1.0, 1.2, 0.8], "superior", 0.0, 1)  # mean 1, sd 0.2
  t = 1.0 / (0.2 / math.sqrt(3))
  assert holm.p_of(v, "superior", 0.0) == pytest.approx(stats.t.sf(t, 2), rel=1e-6)
  w = p.verdict([-0.2, 0.0, 0.2], "noninferior", 1.0, 1)  # matches or beats: above -1
  assert holm.p_of(w, "noninferior", 1.0) == pytest.approx(
      stats.t.sf(1.0 / (0.2 / math.sqrt(3)), 2), rel=1e-6)
  assert holm.p_of(p.verdict([-1.0, 1.0, 0.0], "superior", 0.0, 2), "superior", 0.0) == 1.0
  # "worse" under non-inferiority: below minus the margin.
  x = p.verdict([-3.0, -3.2, -2.8], "noninferior", 1.0, 1)  # mean -3, sd 0.2
  assert x.word == "worse" and holm.p_of(x, "noninferior", 1.0) == pytest.approx(
      stats.t.cdf(-2.0 / (0.2 / math.sqrt(3)), 2), rel=1e-6)
  # Seeds that agree exactly (zero standard error): p is 0 strictly past the bound, else 1.
  same = p.verdict([1.0, 1.0, 1.0], "superior", 0.0, 1)
  assert (holm.p_above(same, 0.0), holm.p_above(same, 1.0)) == (0.0, 1.0)
  assert (holm.p_below(same, 2.0), holm.p_below(same, 1.0)) == (0.0, 1.0)
  assert holm.table([]) == holm.summary([]) == "*pending*: no registered comparison is decided.\n"
  assert holm.summary([holm.Test("d", "inconclusive", 1.0)]).endswith(": none.\n")
  assert ", 1 survives a Holm" in holm.summary([holm.Test("a", "beats", 0.001),
                                                 holm.Test("d", "inconclusive", 1.0)])
  # "within the margin, lower" asserts non-inferiority: above minus the margin.
  y = p.verdict([-1.0, -1.1, -0.9], "noninferior", 2.0, 1)  # mean -1, sd 0.1
  assert y.word == "within the margin, lower" and holm.p_of(y, "noninferior", 2.0) == \
      pytest.approx(stats.t.sf(1.0 / (0.1 / math.sqrt(3)), 2), rel=1e-6)
  # "lower; non-inferiority not shown" asserts that the difference is below zero.
  z = p.verdict([-2.0, -2.4, -1.6], "noninferior", 1.0, 2)  # mean -2, sd 0.4; past -1
  assert z.word == "lower; non-inferiority not shown" and holm.p_of(z, "noninferior", 1.0) == \
      pytest.approx(stats.t.cdf(-2.0 / (0.4 / math.sqrt(3)), 2), rel=1e-6)
  # Holm's bound is inclusive: p = alpha / m survives.
  assert holm.holm([holm.Test("a", "beats", holm.ALPHA)]) == {"a": True}


def test_holm_standing_names_each_rank_and_threshold():
  from acl_jax.study import holm  # pylint: disable=import-outside-toplevel
  # by p: a 0.001 (<= 0.025/5), y 0.005 (<= 0.025/4), x 0.02 (> 0.025/3), then d and e (p 1)
  tests = [holm.Test("a", "beats", 0.001), holm.Test("x", "holds", 0.02),
           holm.Test("y", "holds", 0.005), holm.Test("d", "inconclusive", 1.0),
           holm.Test("e", "inconclusive", 1.0)]
  got = holm.standing(tests, {"A": "a", "Y": "y", "X": "x", "D": "d", "Z": "z"})
  assert got.startswith("2 of these 5 comparisons survive Holm's correction over the 5 ")
  assert "A, one-sided p 0.0010, ranked 1, is within its threshold, 2.5%/5;" in got
  assert "Y, one-sided p 0.0050, ranked 2, is within its threshold, 2.5%/4;" in got
  assert "X, one-sided p 0.0200, ranked 3, misses its threshold, 2.5%/3;" in got
  assert "D asserts nothing (p = 1)" in got and "Z has no final verdict yet" in got
  # a p within its own threshold after a miss: the step-down has already stopped
  late = [holm.Test("x", "holds", 0.02), holm.Test("y", "holds", 0.021)]
  got = holm.standing(late, {"X": "x", "Y": "y"})
  assert got.startswith("0 of these 2 comparisons survive")
  assert "X, one-sided p 0.0200, ranked 1, misses its threshold, 2.5%/2;" in got
  assert "Y, one-sided p 0.0210, ranked 2, is within its threshold, 2.5%/1, but" in got
  assert holm.standing(late, {"Z": "z"}).startswith("*pending*")
  # the family complete: nothing further can raise the thresholds' divisor
  assert got.endswith("divide by.\n") and "over the 2 of 3 registered" in holm.standing(
      late, {"X": "x"}, 3)
  whole = holm.standing(late, {"X": "x", "Y": "y"}, 2)
  assert "over all 2 registered comparisons (" in whole and whole.endswith("the step-down stops.\n")


def test_cost_share_rule_decides_on_the_rounds_interval():
  """The share's interval over rounds against the bound: below it holds, above it fails,
  across it stays open; each round is the term over that round's own step."""
  share = proto.CostRule("c", "t", "share", "gloss", 0.02)
  steps = [1.0, 1.1, 0.9, 1.0]
  low = rules.cost_verdict(p, share, steps, [0.001 * s for s in steps])
  assert (low.word, low.n) == ("holds", 4) and low.mean == pytest.approx(0.001)
  assert low.low == pytest.approx(0.001) and low.high == pytest.approx(0.001)
  high = rules.cost_verdict(p, share, steps, [0.05, 0.06, 0.04, 0.05])
  assert high.word == "fails" and high.low > 0.02
  terms = [0.01, 0.033, 0.009, 0.03]
  across = rules.cost_verdict(p, share, steps, terms)
  assert across.word == "inconclusive" and across.low < 0.02 < across.high
  # the two-sided interval at the deciding level (97.5%), not the describing one
  assert (across.low, across.high) == pytest.approx(proto.interval(
      [t / s for s, t in zip(steps, terms)], p.decide_level)[1:])
  # The share is the term over the step: the term's seconds alone would read ~0.001
  # whatever the step took; with steps 10x as long the share is 10x smaller.
  assert rules.cost_verdict(p, share, [10 * s for s in steps],
                            [0.01 * s for s in steps]).mean == pytest.approx(0.001)


def test_cost_ratio_rule_decides_on_the_log_ratio():
  """Faster (the interval below 1) holds; an interval from above the paper's ratio that does
  not lie below 1 fails; one reaching down to the paper's ratio stays open."""
  ratio = proto.CostRule("c", "t", "ratio", "gloss", 0.84, baseline="scl")
  base = [1.0, 1.2, 0.8, 1.1]
  faster = rules.cost_verdict(p, ratio, [0.8 * b for b in base], base)
  assert faster.word == "holds" and faster.mean == pytest.approx(0.8)
  same = rules.cost_verdict(p, ratio, [b * f for b, f in zip(base, (1.01, 0.99, 1.0, 1.02))],
                            base)
  assert same.word == "fails" and same.low < 1 < same.high and same.low > 0.84
  wide = rules.cost_verdict(p, ratio, [b * f for b, f in zip(base, (0.7, 1.3, 0.9, 1.1))],
                            base)
  assert wide.word == "inconclusive" and wide.low < 0.84
  assert (math.log(wide.low), math.log(wide.high)) == pytest.approx(proto.interval(
      [math.log(f) for f in (0.7, 1.3, 0.9, 1.1)], p.decide_level)[1:])
  # the geometric mean: 2x and 0.5x average to 1, not to 1.25
  assert rules.cost_verdict(p, ratio, [2.0, 0.5], [1.0, 1.0]).mean == pytest.approx(1.0)
  with pytest.raises(ValueError, match="the same 2 or more rounds"):
    rules.cost_verdict(p, ratio, [1.0, 1.0], [1.0])
