"""How the reports write numbers and tables: one definition for every table of a study's
reports (stage_tables.py, summary.py, tables.py and the project's studies/papers_report.py)."""
import numpy as np


def span(lo: float, hi: float) -> str:
  """`[-0.43, +1.01]`: an interval in points."""
  return f"[{lo:+.2f}, {hi:+.2f}]"


def mean_sd(v, n: bool = True) -> str:
  """`82.61 ± 0.23 (n=5)`: mean ± sample std (none for one value), and the count unless
  `n` is False; "—" for no values."""
  if not len(v):
    return "—"
  v = np.asarray(v, float)
  return (f"{v.mean():.2f}" + (f" ± {v.std(ddof=1):.2f}" if len(v) > 1 else "")
          + (f" (n={len(v)})" if n else ""))


def table(head: list[str], rows: list[list]) -> str:
  """A markdown table of `rows` under `head`."""
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows]) + "\n"
