"""Tables of runs for any study, from its record rows: the mean score per method and task
with the paired difference to a baseline (`methods_table`), a curve per method over a swept
config field (`axis_table`), and scores at every exit of multi-exit runs, with the early-exit
speed-ups (`multi_exit_table`, `early_exit_table`). Rows are paired by seed; intervals are
PILOT_LEVEL t-intervals.

Imports nothing heavy.
"""
import re

import numpy as np

from acl_jax.study import protocol as proto
from acl_jax.study.fmt import mean_sd as fmt_mean, span
from acl_jax.study.runs import row_scores as scores

def label(p: proto.Protocol, task: str) -> str:
  return p.tasks[task].label


def pts(x) -> str:
  return "—" if x is None else f"{x:.2f}"




PILOT_LEVEL = 0.95  # the pilot tables' intervals


def fmt_paired(d) -> str:
  """`+0.29 [-0.43, +1.01] (3/3)`: mean, 95% t-interval, seeds ahead / seeds."""
  if not len(d):
    return "—"
  mean, lo, hi = proto.interval(list(d), PILOT_LEVEL)
  # A tie (the same number of examples right) can differ from 0 by float round-off.
  ahead = f"({sum(x > 1e-6 for x in d)}/{len(d)})"
  return f"{mean:+.2f} {ahead}" if len(d) < 2 else f"{mean:+.2f} {span(lo, hi)} {ahead}"


def pilot_score(p: proto.Protocol, row: dict, which: str | None = None) -> float | None:
  """A pilot row's score in points: the selected checkpoint's (`final`, or `which`) on test
  where there is a test split, else dev."""
  vals = scores(row, which or "final")
  metric = p.tasks[row["task"]].metric
  for split in ("test", "dev"):
    if f"{split}/{metric}" in vals:
      return 100 * vals[f"{split}/{metric}"]
  return None


def split_of(rows: list[dict]) -> str:
  return "test" if rows and any(k.startswith("test/") for k in scores(rows[0])) else "dev"


def select(rows, task=None, method=None, **overrides):
  """Rows of a task and method whose overrides include `overrides` (dots as __); a value None
  means the field is absent."""
  return [r for r in rows if (not task or r.get("task") == task)
          and (not method or r.get("method") == method)
          and all(r.get("overrides", {}).get(k.replace("__", ".")) == v
                  for k, v in overrides.items())]


def by_seed(rows, value) -> dict:
  out = {}
  for r in rows:
    v = value(r)
    if v is not None:
      out.setdefault(r["seed"], v)
  return out


def paired_diffs(rows_a, rows_b, value) -> list[float]:
  a, b = by_seed(rows_a, value), by_seed(rows_b, value)
  return [a[s] - b[s] for s in sorted(a) if s in b]


def budget_text(rows: list[dict]) -> str:
  """The budgets of the rows: steps or epochs, batch, max length, lr (every value found)."""
  def vals(key):
    return sorted({r["budget"][key] for r in rows if r["budget"].get(key) not in (None, "")},
                  key=str)
  steps = [v for v in vals("num_steps") if v]
  parts = ["steps " + "/".join(map(str, steps)) if steps else
           "epochs " + "/".join(map(str, vals("num_epochs")))]
  parts.append("B" + "/".join(map(str, vals("batch_size"))))
  parts.append("L" + "/".join(map(str, vals("max_length"))))
  parts.append("lr " + "/".join(f"{v:g}" for v in vals("lr")))
  return ", ".join(parts)


def task_col(p: proto.Protocol, t: str, rows) -> str:
  return f"{label(p, t)} ({split_of(rows)} {p.tasks[t].metric})"


def methods_table(p: proto.Protocol, rows: list[dict], tasks, methods, paper=True) -> str:
  """Mean ± std per method and task, then each method's paired difference to CE."""
  tasks = [t for t in tasks if select(rows, t)]
  heads = [task_col(p, t, select(rows, t)) for t in tasks]
  pcols = [t for t in tasks if paper and t in p.published]
  lines = ["| method | " + " | ".join(heads)
           + "".join(f" | {label(p, t)} paper" for t in pcols) + " |",
           "|---|" + "---|" * (len(heads) + len(pcols))]
  shown = [m for m in methods if any(select(rows, t, m) for t in tasks)]
  for m in shown:
    cells = [fmt_mean(list(by_seed(select(rows, t, m), lambda r: pilot_score(p, r)).values()))
             for t in tasks]
    cells += [f"{p.published[t][m]:.2f}" if m in p.published[t] else "" for t in pcols]
    lines.append(f"| {p.label(m)} | " + " | ".join(cells) + " |")
  lines += ["", "Paired difference to CE (points; mean, 95% t-interval, seeds ahead / seeds):",
            "", "| method | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
  for m in shown:
    if m != "ce":
      cells = [fmt_paired(paired_diffs(select(rows, t, m), select(rows, t, "ce"),
                                       lambda r: pilot_score(p, r))) for t in tasks]
      lines.append(f"| {p.label(m)} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + f"\n\nBudget: {budget_text(rows)}.\n"


def axis_table(p: proto.Protocol, axis: str, curves: dict, which=None,
               score=None) -> tuple[str, dict]:
  """Per curve (name -> rows), the mean score at every axis value, the spread of the means,
  and each seed's own spread (best minus worst axis point) as mean, 95% interval. `score`:
  a row's score (default: `pilot_score` of the `which` checkpoint)."""
  score = score or (lambda r: pilot_score(p, r, which))
  values = sorted({float(r["overrides"][axis]) for rs in curves.values() for r in rs})
  sym = "λ" if axis == "loss.lam" else axis.split(".")[-1]
  lines = ["| curve | " + " | ".join(f"{sym}={v:g}" for v in values)
           + " | spread of the means | spread per seed, mean [95% interval] | seeds |",
           "|---|" + "---|" * (len(values) + 3)]
  per_seed = {}
  for name, rs in curves.items():
    means, at = [], {}
    for v in values:
      got = [(r["seed"], score(r)) for r in rs if float(r["overrides"][axis]) == v]
      got = [(s, x) for s, x in got if x is not None]
      means.append(np.mean([x for _, x in got]) if got else None)
      for s, x in got:
        at.setdefault(s, {})[v] = x
    full = {s: max(v.values()) - min(v.values()) for s, v in at.items() if len(v) == len(values)}
    per_seed[name] = full
    have = [m for m in means if m is not None]
    sp = list(full.values())
    mean, lo, hi = proto.interval(sp, PILOT_LEVEL) if sp else (None, None, None)
    sp_cell = (f"{mean:.2f} [{lo:.2f}, {hi:.2f}]" if len(sp) > 1 else
               f"{mean:.2f}" if sp else "—")
    lines.append(f"| {name} | " + " | ".join(pts(m) for m in means)
                 + f" | {max(have) - min(have):.2f} | {sp_cell} | {len(full)} |")
  return "\n".join(lines) + "\n", per_seed


def exits_of(row: dict) -> list[int]:
  return sorted({int(m.group(1)) for k in scores(row)
                 for m in [re.match(r"\w+/exit_(\d+)/", k)] if m})


def exit_score(p: proto.Protocol, row, m, split, which: str = "final"):
  """Exit m's score in points on `split`, of the `which` checkpoint (`row_scores`)."""
  v = scores(row, which).get(f"{split}/exit_{m}/{p.tasks[row['task']].metric}")
  return None if v is None else 100 * v


def multi_exit_table(p: proto.Protocol, rows: list[dict], task: str,
                     baseline: str | None = None, final_weights: bool = False) -> str:
  """Each multi-exit method's score at every exit, and its paired gain over `baseline` (the
  protocol's first multi-exit method by default): of the selected checkpoint (`final`), or
  with `final_weights` of the final weights on the task's scored split, as the protocol
  scores a run."""
  baseline = baseline or p.multi_exit[0]
  rs = select(rows, task)
  if not rs:
    return ""
  exits = exits_of(rs[0])
  if final_weights:
    split = p.tasks[task].scored
    which = "last" if split == "dev" else "latest"
  else:
    split, which = split_of(rs), "final"
  methods = [m for m in p.multi_exit if select(rs, task, m)]
  head = "| strategy | " + " | ".join(f"exit {m}" for m in exits) + " |"
  lines = [f"{label(p, task)}, {split} {p.tasks[task].metric} per exit (%):", "", head,
           "|---|" + "---|" * len(exits)]
  for meth in methods:
    lines.append(f"| {p.label(meth)} | " + " | ".join(
        fmt_mean(list(by_seed(select(rs, task, meth),
                              lambda r, m=m: exit_score(p, r, m, split, which)).values()))
        for m in exits) + " |")
  lines += ["", f"Paired gain over {p.label(baseline)} (points; mean, 95% t-interval, seeds "
            "ahead / seeds):", "", head, "|---|" + "---|" * len(exits)]
  for meth in methods:
    if meth != baseline:
      lines.append(f"| {p.label(meth)} | " + " | ".join(
          fmt_paired(paired_diffs(select(rs, task, meth), select(rs, task, baseline),
                                  lambda r, m=m: exit_score(p, r, m, split, which)))
          for m in exits) + " |")
  return "\n".join(lines) + "\n"


def early_exit_table(p: proto.Protocol, rows: list[dict], max_drop: float = 1.0) -> str:
  """Per task (in the rows' order) and multi-exit strategy: the threshold with the largest
  mean layer speed-up whose mean change against the full model is above -max_drop points, and
  the measured wall-clock speed-up where seed 0 was timed."""
  lines = ["| task | strategy | threshold | change (points) | layer speed-up | measured "
           "speed-up (seed 0) | seeds |", "|---|---|---|---|---|---|---|"]
  for task in dict.fromkeys(r["task"] for r in rows):
    for meth in p.multi_exit:
      rs = [r for r in select(rows, task, meth) if r.get("early_exit", {}).get("entropy")]
      per_thr = {}
      for r in rs:
        for e in r["early_exit"]["entropy"]:
          per_thr.setdefault(e["threshold"], []).append(
              (r["seed"], 100 * (e["metric"] - e["full_metric"]), e["layer_speedup"],
               e.get("speedup")))
      ok = [t for t, p in sorted(per_thr.items()) if np.mean([x[1] for x in p]) > -max_drop]
      if not ok:
        continue
      best = max(ok, key=lambda t: np.mean([x[2] for x in per_thr[t]]))
      got = per_thr[best]
      timed = [x[3] for x in got if x[0] == 0 and x[3] is not None]
      lines.append(f"| {label(p, task)} | {p.label(meth)} | {best:g} | "
                   f"{fmt_mean([x[1] for x in got])} | {np.mean([x[2] for x in got]):.2f}x | "
                   + (f"{timed[0]:.2f}x" if timed else "—") + f" | {len(got)} |")
  timed = sorted({r.get("timed_on", "not recorded") for r in rows if r.get("early_exit")})
  return "\n".join(lines) + f"\n\nMeasured speed-ups timed on: {'; '.join(timed)}.\n"
