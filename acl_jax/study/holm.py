"""How many of the study's verdicts survive a Holm correction over every registered comparison.

Description, not a rule: the protocol decides each comparison on its own 97.5% interval. Here
each decided comparison gets the one-sided p-value of what its verdict asserts, at its
deciding look, from the same paired t statistic:
- "beats": the difference is above zero; "matches or beats" and "within the margin, lower":
  above minus the margin; "worse": below zero (superiority) or below minus the margin;
  "lower; non-inferiority not shown": below zero;
- the later rules' contrasts likewise ("holds": above zero; "fails": below), and "stable" the
  larger of its two one-sided p-values (TOST).
An undecided or inconclusive comparison asserts nothing; it counts in the family (m) with
p = 1. Holm's step-down runs at a family-wise 2.5% one-sided, the study's two-sided 5%.
"""
import dataclasses

from acl_jax.study import protocol as proto

ALPHA = 0.025


@dataclasses.dataclass(frozen=True)
class Test:
  name: str
  word: str
  p: float


def _se(v: proto.Verdict) -> float:
  return (v.decide[1] - v.decide[0]) / 2 / proto.t_quantile(v.level, v.n - 1)


def p_above(v: proto.Verdict, bound: float) -> float:
  """One-sided p of "the true difference is above `bound`"."""
  from scipy import stats  # pylint: disable=import-outside-toplevel
  se = _se(v)
  if se == 0:
    return 0.0 if v.mean > bound else 1.0
  return float(stats.t.sf((v.mean - bound) / se, v.n - 1))


def p_below(v: proto.Verdict, bound: float) -> float:
  from scipy import stats  # pylint: disable=import-outside-toplevel
  se = _se(v)
  if se == 0:
    return 0.0 if v.mean < bound else 1.0
  return float(stats.t.cdf((v.mean - bound) / se, v.n - 1))


def p_of(v: proto.Verdict, kind: str, margin: float) -> float:
  """The one-sided p-value of what a stage-1-style verdict asserts (1 where it asserts
  nothing)."""
  floor = -margin if kind == "noninferior" else 0.0
  if v.word == "beats":
    return p_above(v, 0.0)
  if v.word in ("matches or beats", "within the margin, lower"):
    return p_above(v, floor)
  if v.word == "worse":
    return p_below(v, floor)
  if v.word == "lower; non-inferiority not shown":
    return p_below(v, 0.0)
  return 1.0


def holm(tests: list[Test], alpha: float = ALPHA) -> dict[str, bool]:
  """{name: survives} under Holm's step-down over the whole family."""
  order = sorted(tests, key=lambda t: t.p)
  out, going = {}, True
  for i, t in enumerate(order):
    going = going and t.p <= alpha / (len(order) - i)
    out[t.name] = going
  return out


def _family(n: int, registered: int | None) -> str:
  """The family in words: `n` comparisons with a final verdict, of `registered` in all."""
  if registered is None:
    return f"the {n} registered comparisons with a verdict so far"
  return (f"all {n} registered comparisons" if n == registered else
          f"the {n} of {registered} registered comparisons with a final verdict")


def summary(tests: list[Test], registered: int | None = None) -> str:
  """How many decided verdicts survive Holm over `tests`; `registered`: how many comparisons
  the protocol registers (all of them with a final verdict: the family is complete)."""
  kept = holm(tests)
  decided = [t for t in tests if t.p < 1.0]
  survive = [t for t in decided if kept[t.name]]
  if not tests:
    return "*pending*: no registered comparison is decided.\n"
  verb = "survives" if len(survive) == 1 else "survive"
  return (f"Of {len(decided)} decided verdicts among {_family(len(tests), registered)}, "
          f"{len(survive)} {verb} a Holm correction over all {len(tests)} (family-wise "
          f"{100 * ALPHA:g}% one-sided): {', '.join(t.name for t in survive) or 'none'}.\n")


def standing(tests: list[Test], names: dict[str, str], registered: int | None = None) -> str:
  """Where the named tests ({what to call it: test name}) stand in Holm's step-down over all
  of `tests`: each one's p, its rank, and the threshold that rank gets (ALPHA over the tests
  left), as one paragraph; `registered` as in `summary`."""
  order = sorted(tests, key=lambda t: t.p)
  kept, rank = holm(tests), {t.name: i for i, t in enumerate(order)}
  final = [n for n in names.values() if n in rank]
  if not final:
    return "*pending*: none of these comparisons has a final verdict.\n"
  parts = []
  for call, name in names.items():
    if name not in rank:
      parts.append(f"{call} has no final verdict yet")
      continue
    i = rank[name]
    p, thr = order[i].p, f"{100 * ALPHA:g}%/{len(order) - i}"
    if p >= 1.0:
      parts.append(f"{call} asserts nothing (p = 1)")
    elif kept[name]:
      parts.append(f"{call}, one-sided p {p:.4f}, ranked {i + 1}, is within its threshold, {thr}")
    elif p <= ALPHA / (len(order) - i):
      parts.append(f"{call}, one-sided p {p:.4f}, ranked {i + 1}, is within its threshold, "
                   f"{thr}, but a comparison ranked before it is not, so the step-down stops")
    else:
      parts.append(f"{call}, one-sided p {p:.4f}, ranked {i + 1}, misses its threshold, {thr}")
  k = sum(kept[n] for n in final)
  verb = "survives" if k == 1 else "survive"
  more = ("" if registered is not None and len(order) == registered else
          " Each further comparison with a verdict raises the count the thresholds divide by.")
  return (f"{k} of these {len(names)} comparisons {verb} Holm's correction over "
          f"{_family(len(order), registered)} (family-wise {100 * ALPHA:g}% one-sided; "
          "`results/STAGE1.md`): " + "; ".join(parts) + "." + more + "\n")


def table(tests: list[Test]) -> str:
  if not tests:
    return "*pending*: no registered comparison is decided.\n"
  kept = holm(tests)
  lines = ["| comparison | verdict | one-sided p | survives Holm |", "|---|---|---|---|"]
  for t in sorted(tests, key=lambda t: t.p):
    lines.append(f"| {t.name} | {t.word} | {t.p:.4f} | "
                 f"{'yes' if kept[t.name] else 'no' if t.p < 1 else '—'} |")
  return "\n".join(lines) + "\n"
