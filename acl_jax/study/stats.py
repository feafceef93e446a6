"""The statistics of a study's verdicts: the paired t-interval, and a verdict with the
smallest effect its seeds could resolve."""
import dataclasses
import math


def t_quantile(level: float, df: int) -> float:
  from scipy import stats  # pylint: disable=import-outside-toplevel
  return float(stats.t.ppf(0.5 + level / 2, df))


def interval(diffs, level: float) -> tuple[float, float, float]:
  """(mean, low, high) of the paired differences' two-sided t-interval at `level`."""
  n = len(diffs)
  mean = sum(diffs) / n
  if n < 2:
    return mean, -math.inf, math.inf
  sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
  half = t_quantile(level, n - 1) * sd / math.sqrt(n)
  return mean, mean - half, mean + half


@dataclasses.dataclass(frozen=True)
class Verdict:
  word: str  # one of VERDICT_WORDS
  mean: float
  decide: tuple[float, float]  # the deciding interval (at `level`)
  describe: tuple[float, float]  # the describing interval
  n: int
  ahead: int  # seeds on which the method was ahead
  look: int  # 1 or 2
  level: float = 0.975  # the deciding interval's level
  power: float = 0.8  # of the "resolvable" effect

  @property
  def resolvable(self) -> float:
    """The smallest true difference these seeds would tell from zero with probability
    `power`: (t_level + t_power) x the standard error, from the observed spread (inf below 2
    seeds)."""
    if self.n < 2:
      return math.inf
    t_decide = t_quantile(self.level, self.n - 1)
    se = (self.decide[1] - self.decide[0]) / 2 / t_decide
    return (t_decide + t_quantile(2 * self.power - 1, self.n - 1)) * se

  @property
  def final(self) -> bool:
    return self.word != "undecided"
