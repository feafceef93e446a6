r"""Every table and figure of RESULTS.md, rebuilt from the run records (results/records/).

  python scripts/report.py            # rewrite RESULTS.md's tables and results/figures/*.png
  python scripts/report.py --check    # exit 1, naming the tables that differ from the records

A table sits in RESULTS.md between marker lines naming it:

  <!-- table: glue -->
  ...written by this script...
  <!-- /table -->

and TABLES below says how each is computed. A table whose sweep has no rows yet says
"pending" and how many runs the sweep plans. tests/test_records.py runs the check.

Statistics. A method is compared with CE on the same seed (same data order and head
initialisation), and with every other setting equal: d_s = method_s - CE_s in points. A cell
gives the mean of d, its 95% t-interval (mean ± t_{0.975, n-1} * sd / sqrt(n)), and on how
many of the n seeds the method was ahead. A paper claim "holds" only when that interval
excludes zero in the paper's direction; "does not hold" when it excludes zero the other way;
otherwise the comparison is inconclusive. At a pilot (short) budget no verdict is drawn:
those rows read "not yet tested at a converged budget".
"""
import argparse
import math
import os
import re
import sys

import numpy as np
from scipy import stats as sps

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402  pylint: disable=wrong-import-position
import sweeps as specs  # noqa: E402  pylint: disable=wrong-import-position

REPO = records.REPO
FIGURES = os.path.join(REPO, "results", "figures")
BLOCK = re.compile(r"(<!-- table: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)

LABELS = {"ce": "CE", "scl": "CE+SCL", "acl_embed": "CE+ACL-Embed", "acl": "ACL (Embed+Grad)",
          "scl_grad": "CE+SCL+Grad", "gloss": "CE+G-Loss (sigma fixed)",
          "gloss_sqrt": "CE+G-Loss (sigma sqrt)", "triplet": "CE+triplet", "cosine": "CE+cosine",
          "jt": "JT", "2st": "2ST", "alt": "ALT", "kd": "KD", "acl_cl": "ACL-CL"}
TASK_NAMES = {"sst2": "SST-2", "cola": "CoLA", "mrpc": "MRPC", "rte": "RTE", "mr": "MR",
              "r8": "R8", "r52": "R52", "ohsumed": "Ohsumed", "20ng": "20NG"}
# Paper numbers (SPEC §1): the G-Loss paper's DistilBERT test accuracy (CE, CE+G-Loss) and its
# BERT-base SST-2 dev accuracy; the ACL paper publishes no tables.
PAPER = {"mr": {"ce": 84.85, "gloss": 85.10}, "r8": {"ce": 97.48, "gloss": 97.71},
         "r52": {"ce": 95.78, "gloss": 96.07}, "ohsumed": {"ce": 69.50, "gloss": 70.16},
         "20ng": {"ce": 83.15, "gloss": 83.64},
         "sst2": {"ce": 91.2, "scl": 92.1, "gloss": 92.32}}
HF_MR = (82.2, 0.3, 3)  # HF transformers + PyTorch CE on MR, 2 epochs, L64, B32, lr 5e-5


# ---- statistics ---------------------------------------------------------------------------

def t_interval(d) -> tuple[float, float]:
  """(mean, half-width of the 95% t-interval) of the values; half-width nan for one value."""
  d = np.asarray(d, float)
  if len(d) < 2:
    return float(d.mean()), float("nan")
  half = sps.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
  return float(d.mean()), float(half)


def verdict(d, direction: int = 1, converged: bool = True) -> str:
  """The claim "method - baseline has the sign `direction`" judged on paired differences d."""
  if not converged:
    return "not yet tested at a converged budget"
  if len(d) < 2:
    return "one seed: no interval"
  mean, half = t_interval(d)
  lo, hi = mean - half, mean + half
  if (lo > 0 and direction > 0) or (hi < 0 and direction < 0):
    return "holds"
  if (hi < 0 and direction > 0) or (lo > 0 and direction < 0):
    return "does not hold"
  return "inconclusive (interval includes 0)"


def fmt_paired(d) -> str:
  """`+0.29 [-0.43, +1.01] (3/3)`: mean, 95% t-interval, seeds ahead / seeds."""
  if not len(d):
    return "—"
  mean, half = t_interval(d)
  # A tie (the same number of examples right) can differ from 0 by float round-off; one
  # example of the largest split we score is 0.01 points.
  ahead = f"({sum(x > 1e-6 for x in d)}/{len(d)})"
  if math.isnan(half):
    return f"{mean:+.2f} {ahead}"
  return f"{mean:+.2f} [{mean - half:+.2f}, {mean + half:+.2f}] {ahead}"


def fmt_mean(v) -> str:
  if not len(v):
    return "—"
  v = np.asarray(v, float)
  return f"{v.mean():.2f}" + (f" ± {v.std(ddof=1):.2f}" if len(v) > 1 else "") + f" (n={len(v)})"


# ---- reading rows -------------------------------------------------------------------------

def score(row: dict, metric: str | None = None, which: str | None = None) -> float | None:
  """A row's reported score in points: GLUE's final checkpoint on dev (the last evaluation)
  when the row comes from a converged sweep, else the selected checkpoint's (`final`) test
  score where there is a test split, dev otherwise. `which` forces final/latest/last."""
  task = row["task"]
  metric = metric or specs.METRIC[task]
  if which is None:
    which = "last" if task in specs.GLUE_TASKS and not row["sweep"].startswith("pilot") else (
        "final")
  vals = records.scores(row, which)
  for split in ("test", "dev"):
    if f"{split}/{metric}" in vals:
      return 100 * vals[f"{split}/{metric}"]
  return None


def split_of(rows: list[dict], which: str | None = None) -> str:
  if not rows:
    return ""
  vals = records.scores(rows[0], which or ("last" if rows[0]["task"] in specs.GLUE_TASKS and
                                           not rows[0]["sweep"].startswith("pilot") else "final"))
  return "test" if any(k.startswith("test/") for k in vals) else "dev"


def group_key(row: dict, drop=("seed",)) -> tuple:
  return tuple(sorted((k, v) for k, v in row.get("overrides", {}).items() if k not in drop))


def select(rows, task=None, method=None, **overrides):
  """Rows of a task and method whose overrides include `overrides` (dots as __); a value None
  means the field is absent."""
  out = []
  for r in rows:
    if task and r.get("task") != task or method and r.get("method") != method:
      continue
    ok = True
    for k, v in overrides.items():
      k = k.replace("__", ".")
      if r.get("overrides", {}).get(k) != v:
        ok = False
    if ok:
      out.append(r)
  return out


def by_seed(rows, value) -> dict:
  out = {}
  for r in rows:
    v = value(r)
    if v is not None:
      out.setdefault(r["seed"], v)
  return out


def paired_diffs(rows_a, rows_b, value=score) -> list[float]:
  a, b = by_seed(rows_a, value), by_seed(rows_b, value)
  return [a[s] - b[s] for s in sorted(a) if s in b]


def budget_text(rows: list[dict]) -> str:
  """The budgets of the rows: steps or epochs, batch, max length, lr (every value found)."""
  def vals(key):
    return sorted({r["budget"][key] for r in rows if r["budget"].get(key) not in (None, "")},
                  key=str)
  parts = []
  steps = [v for v in vals("num_steps") if v]
  if steps:
    parts.append("steps " + "/".join(map(str, steps)))
  else:
    parts.append("epochs " + "/".join(map(str, vals("num_epochs"))))
  parts.append("B" + "/".join(map(str, vals("batch_size"))))
  parts.append("L" + "/".join(map(str, vals("max_length"))))
  parts.append("lr " + "/".join(f"{v:g}" for v in vals("lr")))
  return ", ".join(parts)


def pending(sweep: str) -> str:
  n = len(specs_jobs(sweep))
  return (f"*pending*: no run of `{sweep}` is recorded yet ({n} runs planned; "
          f"`python scripts/sweep.py --status {sweep}`).\n")


def specs_jobs(sweep: str) -> list:
  import sweep as sweep_mod  # pylint: disable=import-outside-toplevel
  return sweep_mod.jobs_of_sweep(sweep, "/nonexistent")


def task_col(t: str, rows) -> str:
  split = split_of(rows) or "dev"
  return f"{TASK_NAMES.get(t, t)} ({split} {specs.METRIC[t]})"


# ---- tables -------------------------------------------------------------------------------

def methods_table(rows: list[dict], tasks, methods, vs=("ce",), paper=True) -> str:
  """Mean ± std per method and task, then each method's paired difference to each `vs`."""
  tasks = [t for t in tasks if select(rows, t)]
  heads = [task_col(t, select(rows, t)) for t in tasks]
  pcols = [t for t in tasks if paper and t in PAPER]
  lines = ["| method | " + " | ".join(heads)
           + "".join(f" | {TASK_NAMES[t]} paper" for t in pcols) + " |",
           "|---|" + "---|" * (len(heads) + len(pcols))]
  for m in methods:
    if not any(select(rows, t, m) for t in tasks):
      continue
    cells = [fmt_mean(list(by_seed(select(rows, t, m), score).values())) for t in tasks]
    cells += [f"{PAPER[t][m]:.2f}" if m in PAPER[t] else "" for t in pcols]
    lines.append(f"| {LABELS.get(m, m)} | " + " | ".join(cells) + " |")
  out = "\n".join(lines) + "\n"
  for base in vs:
    lines = ["", f"Paired difference to {LABELS[base]} (points; mean, 95% t-interval, seeds "
             "ahead / seeds):", "", "| method | " + " | ".join(heads) + " |",
             "|---|" + "---|" * len(heads)]
    for m in methods:
      if m == base or not any(select(rows, t, m) for t in tasks):
        continue
      cells = [fmt_paired(paired_diffs(select(rows, t, m), select(rows, t, base)))
               for t in tasks]
      lines.append(f"| {LABELS.get(m, m)} | " + " | ".join(cells) + " |")
    out += "\n".join(lines) + "\n"
  return out + f"\nBudget: {budget_text(rows)}.\n"


def convergence_table(rows: list[dict], tasks) -> str:
  """Per task: evaluations per run, the last evaluation's change over the one before (dev,
  points, mean over runs) and how many runs early stopping ended."""
  lines = ["| task | runs | evaluations per run | last − previous dev eval (points) | "
           "early-stopped |", "|---|---|---|---|---|"]
  for t in tasks:
    rs = select(rows, t)
    if not rs:
      continue
    metric = "macro_f1" if t not in specs.GLUE_TASKS else specs.METRIC[t]
    steps = [len(r["evals"]) for r in rs]
    deltas = [100 * (r["evals"][-1]["dev"][metric] - r["evals"][-2]["dev"][metric])
              for r in rs if len(r["evals"]) > 1 and metric in r["evals"][-1]["dev"]]
    stopped = sum("early_stopped_at" in r["budget"] for r in rs)
    lines.append(f"| {TASK_NAMES[t]} | {len(rs)} | {min(steps)}–{max(steps)} | "
                 f"{fmt_mean(deltas)} | {stopped}/{len(rs)} |")
  return "\n".join(lines) + "\n"


def axis_table(rows: list[dict], axis: str, curves: dict, which=None) -> str:
  """Per curve (name -> rows), the mean score at every axis value, the spread of the means,
  and each seed's own spread (best minus worst axis point) as mean, 95% interval."""
  values = sorted({float(r["overrides"][axis]) for rs in curves.values() for r in rs})
  sym = "λ" if axis == "loss.lam" else axis.split(".")[-1]
  lines = ["| curve | " + " | ".join(f"{sym}={v:g}" for v in values)
           + " | spread of the means | spread per seed, mean [95% interval] | seeds |",
           "|---|" + "---|" * (len(values) + 3)]
  per_seed = {}
  for name, rs in curves.items():
    means, pts = [], {}
    for v in values:
      vs = [score(r, which=which) for r in rs if float(r["overrides"][axis]) == v]
      vs = [x for x in vs if x is not None]
      means.append(np.mean(vs) if vs else None)
      for r in rs:
        if float(r["overrides"][axis]) == v and score(r, which=which) is not None:
          pts.setdefault(r["seed"], {})[v] = score(r, which=which)
    full = {s: max(p.values()) - min(p.values()) for s, p in pts.items() if len(p) == len(values)}
    per_seed[name] = full
    got = [m for m in means if m is not None]
    cells = [f"{m:.2f}" if m is not None else "—" for m in means]
    sp = list(full.values())
    mean, half = t_interval(sp) if sp else (float("nan"), float("nan"))
    sp_cell = (f"{mean:.2f} [{mean - half:.2f}, {mean + half:.2f}]" if len(sp) > 1 else
               (f"{mean:.2f}" if sp else "—"))
    lines.append(f"| {name} | " + " | ".join(cells)
                 + f" | {max(got) - min(got):.2f} | {sp_cell} | {len(full)} |")
  return "\n".join(lines) + "\n", per_seed


def lambda_table(rows: list[dict], which=None) -> str:
  curves = {"CE+SCL": select(rows, "mr", "scl", loss__combine=None),
            "ACL": select(rows, "mr", "acl"),
            "CE+SCL, additive (CE + λ SCL)": select(rows, "mr", "scl", loss__combine="additive")}
  curves = {k: v for k, v in curves.items() if v}
  table, per_seed = axis_table(rows, "loss.lam", curves, which)
  out = table
  if "ACL" in per_seed:
    out += ("\nSpread over λ seed by seed, minus ACL's on the same seed (points; mean, 95% "
            "t-interval, seeds on which the curve moved more than ACL's):\n\n"
            "| curve | spread − ACL's spread |\n|---|---|\n")
    for name, sp in per_seed.items():
      if name == "ACL":
        continue
      d = [sp[s] - per_seed["ACL"][s] for s in sorted(sp) if s in per_seed["ACL"]]
      out += f"| {name} | {fmt_paired(d)} |\n"
  return out


def gloss_axis_tables(rows: list[dict]) -> str:
  out = ""
  for axis, label in (("loss.gamma_keep", "gamma_keep"), ("loss.sigma", "sigma")):
    rs = [r for r in select(rows, "mr", "gloss") if axis in r["overrides"]]
    if rs:
      table, _ = axis_table(rows, axis, {f"CE+G-Loss over {label}": rs})
      out += ("\n" if out else "") + table
  return out


def exits_of(row: dict) -> list[int]:
  return sorted({int(m.group(1)) for k in records.scores(row)
                 for m in [re.match(r"\w+/exit_(\d+)/", k)] if m})


def exit_score(row, m, split):
  metric = specs.METRIC[row["task"]]
  v = records.scores(row).get(f"{split}/exit_{m}/{metric}")
  return None if v is None else 100 * v


def multi_exit_table(rows: list[dict], task: str) -> str:
  rs = select(rows, task)
  if not rs:
    return ""
  split = "test" if any(k.startswith("test/") for k in records.scores(rs[0])) else "dev"
  exits = exits_of(rs[0])
  methods = [m for m in specs.MULTI_EXIT if select(rs, task, m)]
  head = "| strategy | " + " | ".join(f"exit {m}" for m in exits) + " |"
  lines = [f"{TASK_NAMES[task]}, {split} {specs.METRIC[task]} per exit (%):", "", head,
           "|---|" + "---|" * len(exits)]
  for meth in methods:
    cells = [fmt_mean(list(by_seed(select(rs, task, meth),
                                   lambda r, m=m: exit_score(r, m, split)).values()))
             for m in exits]
    lines.append(f"| {LABELS[meth]} | " + " | ".join(cells) + " |")
  lines += ["", "Paired gain over JT (points; mean, 95% t-interval, seeds ahead / seeds):", "",
            head, "|---|" + "---|" * len(exits)]
  for meth in methods:
    if meth == "jt":
      continue
    cells = [fmt_paired(paired_diffs(select(rs, task, meth), select(rs, task, "jt"),
                                     lambda r, m=m: exit_score(r, m, split))) for m in exits]
    lines.append(f"| {LABELS[meth]} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def early_exit_table(rows: list[dict], max_drop: float = 1.0) -> str:
  """Per task and strategy: the threshold with the largest mean layer speed-up whose mean
  change against the full model is above -max_drop points, and the measured wall-clock
  speed-up where seed 0 was timed."""
  lines = [f"| task | strategy | threshold | change (points) | layer speed-up | measured "
           f"speed-up (seed 0) | seeds |", "|---|---|---|---|---|---|---|"]
  for task in ("sst2", "mr"):
    for meth in specs.MULTI_EXIT:
      rs = [r for r in select(rows, task, meth) if r.get("early_exit", {}).get("entropy")]
      if not rs:
        continue
      per_thr = {}
      for r in rs:
        for e in r["early_exit"]["entropy"]:
          per_thr.setdefault(e["threshold"], []).append(
              (r["seed"], 100 * (e["metric"] - e["full_metric"]), e["layer_speedup"],
               e.get("speedup")))
      best = None
      for thr, pts in sorted(per_thr.items()):
        change = np.mean([p[1] for p in pts])
        if change > -max_drop and (best is None or np.mean([p[2] for p in pts]) >
                                   np.mean([p[2] for p in per_thr[best]])):
          best = thr
      if best is None:
        continue
      pts = per_thr[best]
      timed = [p[3] for p in pts if p[0] == 0 and p[3] is not None]
      lines.append(f"| {TASK_NAMES[task]} | {LABELS[meth]} | {best:g} | "
                   f"{fmt_mean([p[1] for p in pts])} | "
                   f"{np.mean([p[2] for p in pts]):.2f}x | "
                   + (f"{timed[0]:.2f}x" if timed else "—") + f" | {len(pts)} |")
  timed = sorted({r.get("timed_on", "not recorded") for r in rows if r.get("early_exit")})
  return "\n".join(lines) + f"\n\nMeasured speed-ups timed on: {'; '.join(timed)}.\n"


def grad_conflict_table(rows: list[dict]) -> str:
  lines = ["| task | trained with | angle | steps > 90° | median | p10–p90 | top-layer gate "
           "agrees |", "|---|---|---|---|---|---|---|"]
  for r in rows:
    for k, name in (("scl", "CE vs SCL"), ("acl", "CE vs ACL-Embed")):
      a = np.array([s[k] for s in r["steps"]])
      top = np.array([s[k + "_top"] for s in r["steps"]])
      lines.append(
          f"| {TASK_NAMES[r['task']]} | {LABELS[r['method']]} | {name} | "
          f"{100 * (a > 90).mean():.0f}% | {np.median(a):.1f}° | "
          f"{np.percentile(a, 10):.1f}–{np.percentile(a, 90):.1f}° | "
          f"{100 * ((a <= 90) == (top <= 90)).mean():.0f}% |")
  r0 = rows[0]["budget"]
  return ("\n".join(lines) + f"\n\nBudget: {len(rows[0]['steps'])} steps per run, "
          f"B{r0['batch_size']}, lr {r0['lr']:g}, seed 0, MiniLM-L6.\n")


def lr_table(rows: list[dict]) -> str:
  import sweep as sweep_mod  # pylint: disable=import-outside-toplevel
  picks = sweep_mod.lr_picks(rows)
  lines = ["| task | " + " | ".join(f"CE dev, lr {lr}" for lr in specs.LR_GRID) + " | pick |",
           "|---|" + "---|" * (len(specs.LR_GRID) + 1)]
  for arm in specs.SWEEPS["lr_pick"].arms:
    cells = [fmt_mean([100 * specs.select_score(r) for r in select(rows, arm.task, "ce",
                                                                   optim__lr=lr)])
             for lr in specs.LR_GRID]
    lines.append(f"| {TASK_NAMES[arm.task]} | " + " | ".join(cells)
                 + f" | {picks.get(arm.task, '—')} |")
  return "\n".join(lines) + "\n"


def hf_verdict(v) -> str:
  """Whether our CE's seeds match HF's within seed noise: Welch's t-test of the two means."""
  if len(v) < 2:
    return "one seed: no test"
  p = sps.ttest_ind_from_stats(np.mean(v), np.std(v, ddof=1), len(v), HF_MR[0], HF_MR[1],
                               HF_MR[2], equal_var=False).pvalue
  return (f"matches within seed noise (Welch p = {p:.2f})" if p >= 0.05 else
          f"differs (Welch p = {p:.3f}): find out why before reading other rows")


def hf_table(rows: list[dict]) -> str:
  v = list(by_seed(rows, lambda r: score(r, "accuracy", "latest")).values())
  mean, half = t_interval(v) if v else (float("nan"), float("nan"))
  return ("| run | MR test accuracy, final weights | seeds |\n|---|---|---|\n"
          f"| ours (CE) | {fmt_mean(v)} | {len(v)} |\n"
          f"| HF transformers + PyTorch | {HF_MR[0]:.2f} ± {HF_MR[1]:.2f} | {HF_MR[2]} |\n"
          + (f"\nOurs minus HF: {mean - HF_MR[0]:+.2f} points; our 95% t-interval "
             f"[{mean - half:.2f}, {mean + half:.2f}]; {hf_verdict(v)}.\n" if len(v) > 1
             else ""))


# ---- the claims table ---------------------------------------------------------------------

def _cells(pairs) -> str:
  return "; ".join(f"{label} {fmt_paired(d)}" for label, d in pairs if len(d)) or "—"


def _verdicts(pairs, direction, converged) -> str:
  vs = {label: verdict(d, direction, converged) for label, d in pairs if len(d)}
  if not vs:
    return "no runs recorded"
  if len(set(vs.values())) == 1:
    return next(iter(vs.values()))
  return "; ".join(f"{k}: {v}" for k, v in vs.items())


def claim_rows(rs: dict[str, list[dict]]) -> list[tuple]:
  """(claim, paper, ours, verdict, budget) per SPEC §1 claim, from the converged sweep where
  it has rows, else from the pilot."""
  out = []
  # The HF baseline check first: nothing else is trusted without it.
  hf = rs.get("hf_baseline_mr", [])
  if hf:
    v = list(by_seed(hf, lambda r: score(r, "accuracy", "latest")).values())
    out.append(("Baseline check: our CE on MR matches HF PyTorch's", "82.2 ± 0.3 (3 seeds)",
                fmt_mean(v), hf_verdict(v), budget_text(hf)))
  else:
    out.append(("Baseline check: our CE on MR matches HF PyTorch's", "82.2 ± 0.3 (3 seeds)",
                "pending", "pending", "2 epochs, B32, L64, lr 5e-5"))
  gc = rs.get("pilot_grad_conflict", [])
  rte = [r for r in gc if r["task"] == "rte" and r["method"] == "scl"]
  if rte:
    a = np.array([s["scl"] for s in rte[0]["steps"]])
    out.append(("CE and SCL gradients often conflict (angles near or above 90°, RTE pilot)",
                "angles near or above 90°",
                f"RTE CE/SCL median {np.median(a):.1f}°, above 90° on {100 * (a > 90).mean():.0f}%"
                " of steps (1 seed)", "seen in a pilot (no interval: one run)",
                f"{len(a)} steps, B{rte[0]['budget']['batch_size']} — pilot"))
  # ACL against CE and CE+SCL on GLUE.
  conv = bool(rs.get("glue"))
  g = rs.get("glue") or rs.get("pilot_glue", [])
  pairs = []
  for t in specs.GLUE_TASKS:
    for base in ("ce", "scl"):
      d = paired_diffs(select(g, t, "acl"), select(g, t, base))
      pairs.append((f"{TASK_NAMES[t]} vs {LABELS[base]}", d))
  out.append(("ACL matches or beats CE and CE+SCL on GLUE (5 of 7 tasks, BERT)",
              "matches or beats them on 5 of 7 tasks (no tables)", _cells(pairs),
              _verdicts(pairs, 1, conv),
              budget_text(g) + ("" if conv else " — pilot") if g else "—"))
  # ACL-CL lifts shallow exits the most.
  conv = bool(rs.get("multi_exit"))
  me = rs.get("multi_exit") or rs.get("pilot_multi_exit", [])
  pairs = []
  for t in ("sst2", "mr"):
    rows_t = select(me, t)
    if not rows_t:
      continue
    split = "test" if any(k.startswith("test/") for k in records.scores(rows_t[0])) else "dev"
    # The claim has two parts: ACL-CL gains over JT at the first exit, and more there than at
    # the last (per seed: gain at exit 1 minus gain at exit 6).
    gain = {m: by_seed(select(me, t, "acl_cl"), lambda r, m=m, s=split: exit_score(r, m, s))
            for m in (1, 6)}
    jt = {m: by_seed(select(me, t, "jt"), lambda r, m=m, s=split: exit_score(r, m, s))
          for m in (1, 6)}
    seeds = [s for s in sorted(gain[1]) if all(s in d for d in (gain[6], jt[1], jt[6]))]
    pairs.append((f"{TASK_NAMES[t]} exit 1 vs JT", [gain[1][s] - jt[1][s] for s in seeds]))
    pairs.append((f"{TASK_NAMES[t]} exit-1 gain − exit-6 gain",
                  [(gain[1][s] - jt[1][s]) - (gain[6][s] - jt[6][s]) for s in seeds]))
  out.append(("ACL-CL lifts shallow exits the most", "largest gains at shallow exits",
              _cells(pairs), _verdicts(pairs, 1, conv) if conv else
              "not yet tested at a converged budget",
              budget_text(me) + ("" if conv else " — pilot") if me else "—"))
  out.append(("A 6-layer exit trained with ACL-CL matches TinyBERT/DistilBERT", "—",
              "not testable: MiniLM-L6 has 6 layers in all, so its 6-layer exit is the whole "
              "model; needs a 12-layer backbone (BERT-base weights)", "not testable here", "—"))
  # lambda robustness.
  conv = bool(rs.get("lambda_mr"))
  lam = rs.get("lambda_mr") or rs.get("pilot_lambda_mr", [])
  if lam:
    _, per_seed = axis_table(lam, "loss.lam", {"scl": select(lam, "mr", "scl", loss__combine=None),
                                               "acl": select(lam, "mr", "acl")})
    d = [per_seed["scl"][s] - per_seed["acl"][s] for s in sorted(per_seed["scl"])
         if s in per_seed["acl"]]
    out.append(("ACL is robust to λ, CE+SCL is not", "—",
                f"MR, spread over λ 0.1–0.9 per seed, CE+SCL − ACL: {fmt_paired(d)}",
                verdict(d, 1, conv), budget_text(lam) + ("" if conv else " — pilot")))
  # G-Loss beats CE on the TextGCN corpora.
  conv = bool(rs.get("textgcn"))
  tg = (rs.get("textgcn", []) + rs.get("textgcn_more", [])) if conv else (
      rs.get("pilot_single_mr", []) + [r for r in rs.get("pilot_gloss_ablation_mr", [])
                                       if r["overrides"].get("loss.gamma_keep") == "0.7"])
  pairs = [(TASK_NAMES[t], paired_diffs(select(tg, t, "gloss"), select(tg, t, "ce")))
           for t in ("mr", "r8", "r52", "ohsumed", "20ng")]
  out.append(("CE+G-Loss beats CE on the TextGCN corpora (DistilBERT)",
              "MR +0.25, R8 +0.23, R52 +0.29, Ohsumed +0.66, 20NG +0.49", _cells(pairs),
              _verdicts(pairs, 1, conv), budget_text(tg) + ("" if conv else " — pilot")))
  # SST-2 order.
  sst = select(rs.get("glue", []), "sst2")
  pairs = [(f"{LABELS[a]} − {LABELS[b]}", paired_diffs(select(sst, "sst2", a),
                                                      select(sst, "sst2", b)))
           for a, b in (("gloss", "scl"), ("scl", "ce"))]
  out.append(("On SST-2, CE+G-Loss beats CE+SCL, which beats CE (BERT-base)",
              "92.32 / 92.1 / 91.2 dev accuracy", _cells(pairs) if sst else "pending",
              _verdicts(pairs, 1, True) if sst else "pending", "1 epoch" if not sst else
              budget_text(sst)))
  out.append(("G-Loss fine-tunes BERT-base to MR 86.61, R8 97.99, R52 96.24, Ohsumed 70.67, "
              "20NG 84.99", "those accuracies", "not testable offline: no BERT-base weights "
              "here (online: `--config.model.name=bert-base-uncased`)", "not testable here",
              "—"))
  out.append(("Graph construction + propagation take < 2% of epoch time", "< 2%",
              "step-time ratios in BENCHMARKS.md (G-Loss step overhead)", "see BENCHMARKS.md",
              "B32–128, L64"))
  out.append(("A G-Loss epoch is faster than an SCL one (MR 27.77 s vs 33.04 s)", "0.84x",
              "step-time ratios in BENCHMARKS.md (G-Loss step overhead)", "see BENCHMARKS.md",
              "B32–128, L64"))
  # gamma_keep stability (the range SPEC §2.6 reports).
  conv = bool(rs.get("gloss_ablation_mr"))
  ga = rs.get("gloss_ablation_mr") or rs.get("pilot_gloss_ablation_mr", [])
  if ga:
    d = paired_diffs(select(ga, "mr", "gloss", loss__gamma_keep="0.5"),
                     select(ga, "mr", "gloss", loss__gamma_keep="0.7"))
    out.append(("G-Loss is stable for gamma_keep 0.5–0.7 (SPEC §2.6)", "stable range 0.5–0.7",
                f"MR, gamma_keep 0.5 − 0.7: {fmt_paired(d)}",
                ("not yet tested at a converged budget" if not conv else
                 "stable if the interval lies within ±0.5 points: " + (
                     "yes" if d and all(abs(x) < 0.5 for x in
                                        [t_interval(d)[0] - t_interval(d)[1],
                                         t_interval(d)[0] + t_interval(d)[1]]) else "no")),
                budget_text(ga) + ("" if conv else " — pilot")))
  return out


def claims_table(rs) -> str:
  lines = ["| claim (SPEC §1) | paper | ours: mean [95% interval] (seeds ahead / seeds) | "
           "verdict | budget |", "|---|---|---|---|---|"]
  lines += ["| " + " | ".join(row) + " |" for row in claim_rows(rs)]
  return "\n".join(lines) + "\n"


# ---- the blocks ---------------------------------------------------------------------------

def _or_pending(sweep, fn):
  def build(rs):
    return fn(rs[sweep]) if rs.get(sweep) else pending(sweep)
  return build


TABLES = {
    "claims": claims_table,
    "hf_baseline_mr": _or_pending("hf_baseline_mr", hf_table),
    "lr_pick": _or_pending("lr_pick", lr_table),
    "glue": _or_pending("glue", lambda r: methods_table(
        r, specs.GLUE_TASKS, specs.HEADLINE + specs.OTHERS)),
    "glue_convergence": _or_pending("glue", lambda r: convergence_table(r, specs.GLUE_TASKS)),
    "pilot_glue": lambda rs: methods_table(rs["pilot_glue"], specs.GLUE_TASKS,
                                           ("ce", "scl", "acl_embed", "acl", "gloss"),
                                           paper=False),
    "textgcn": _or_pending("textgcn", lambda r: methods_table(
        r, specs.TEXTGCN, specs.HEADLINE + specs.OTHERS)),
    "textgcn_convergence": _or_pending("textgcn", lambda r: convergence_table(
        r, specs.TEXTGCN)),
    "pilot_single_mr": lambda rs: methods_table(
        rs["pilot_single_mr"]
        + [dict(r, method="scl") for r in select(rs["pilot_lambda_mr"], "mr", "scl",
                                                 loss__lam="0.9", loss__combine=None)]
        + [dict(r, method="acl") for r in select(rs["pilot_lambda_mr"], "mr", "acl",
                                                 loss__lam="0.5")]
        + select(rs["pilot_gloss_ablation_mr"], "mr", "gloss", loss__gamma_keep="0.7"),
        ["mr"], ("ce", "scl", "acl", "gloss"), paper=True),
    "textgcn_more": _or_pending("textgcn_more", lambda r: methods_table(
        r, specs.TEXTGCN_MORE, ("ce", "gloss")) + "\n" + convergence_table(r, specs.TEXTGCN_MORE)),
    "lambda_mr": _or_pending("lambda_mr", lambda_table),
    "pilot_lambda_mr": lambda rs: (
        "Selected checkpoints:\n\n" + lambda_table(rs["pilot_lambda_mr"])
        + "\nFinal weights (no checkpoint selection):\n\n"
        + lambda_table(rs["pilot_lambda_mr"], which="latest")
        + f"\nBudget: {budget_text(rs['pilot_lambda_mr'])}.\n"),
    "gloss_ablation_mr": _or_pending("gloss_ablation_mr", gloss_axis_tables),
    "pilot_gloss_ablation_mr": lambda rs: (
        gloss_axis_tables(rs["pilot_gloss_ablation_mr"])
        + f"\nBudget: {budget_text(rs['pilot_gloss_ablation_mr'])}.\n"),
    "multi_exit": _or_pending("multi_exit", lambda r: multi_exit_table(r, "sst2") + "\n"
                              + multi_exit_table(r, "mr") + "\n" + early_exit_table(r)),
    "pilot_multi_exit": lambda rs: (
        multi_exit_table(rs["pilot_multi_exit"], "sst2") + "\n"
        + multi_exit_table(rs["pilot_multi_exit"], "mr") + "\nEarly exit (entropy policy, dev; "
        "the largest mean layer speed-up within 1 point of the full model):\n\n"
        + early_exit_table(rs["pilot_multi_exit"])
        + f"\nBudget: {budget_text(rs['pilot_multi_exit'])}, seed 0.\n"),
    "pilot_grad_conflict": lambda rs: grad_conflict_table(rs["pilot_grad_conflict"]),
}


# A pilot's table gives way to its converged sweep's once that has rows (no superseded
# tables); the pilot's rows stay in its record.
PILOT_OF = {"pilot_glue": "glue", "pilot_single_mr": "textgcn", "pilot_lambda_mr": "lambda_mr",
            "pilot_gloss_ablation_mr": "gloss_ablation_mr", "pilot_multi_exit": "multi_exit"}


def build(name: str, rs: dict) -> str:
  if rs.get(PILOT_OF.get(name, "")):
    return (f"Superseded by the converged `{PILOT_OF[name]}` sweep above; the pilot's rows "
            f"stay in `results/records/{name}.jsonl`.\n")
  return TABLES[name](rs)


def render(text: str, rs: dict) -> tuple[str, list[str]]:
  """(text with every table block rebuilt from the records, names of blocks that changed)."""
  changed = []

  def fill(m):
    name = m.group("name")
    if name not in TABLES:
      raise SystemExit(f"RESULTS.md has a table block {name!r} that scripts/report.py does "
                       f"not know; its tables: {', '.join(TABLES)}.")
    body = build(name, rs)
    if body != m.group("body"):
      changed.append(name)
    return m.group(1) + body + m.group(4)

  return BLOCK.sub(fill, text), changed


# ---- figures ------------------------------------------------------------------------------

def _plt():
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  return plt


def curve_figure(rows, axis, curves, path, title, baseline=None, logx=False, which=None):
  plt = _plt()
  fig, ax = plt.subplots(figsize=(6.5, 4))
  if baseline:
    v = list(by_seed(baseline, lambda r: score(r, which=which)).values())
    if v:
      ax.axhspan(np.mean(v) - np.std(v, ddof=1), np.mean(v) + np.std(v, ddof=1), color="gray",
                 alpha=0.2)
      ax.axhline(np.mean(v), color="gray", ls="--", label=f"CE (n={len(v)}, ± std)")
  for name, rs in curves.items():
    xs = sorted({float(r["overrides"][axis]) for r in rs})
    ys = [[score(r, which=which) for r in rs if float(r["overrides"][axis]) == x] for x in xs]
    ax.errorbar(xs, [np.mean(y) for y in ys],
                yerr=[np.std(y, ddof=1) if len(y) > 1 else 0 for y in ys], marker="o",
                capsize=3, label=f"{name} (n={min(len(y) for y in ys)})")
  if logx:
    ax.set_xscale("log")
  ax.set_xlabel(axis)
  ax.set_ylabel(f"MR test accuracy (%){', final weights' if which == 'latest' else ''}")
  ax.set_title(title, fontsize=10)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def _task_panels(rows, path, title, draw):
  """One panel per multi-exit task with rows (SST-2, MR): `draw(ax, task)` fills its curves,
  then every panel gets a grid and a legend, and the figure is saved to `path`."""
  plt = _plt()
  tasks = [t for t in ("sst2", "mr") if select(rows, t)]
  fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 3.8), squeeze=False)
  for ax, t in zip(axes[0], tasks):
    draw(ax, t)
    ax.set_ylabel(f"{specs.METRIC[t]} (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def per_exit_figure(rows, path, title):
  def draw(ax, t):
    rs = select(rows, t)
    split = "test" if any(k.startswith("test/") for k in records.scores(rs[0])) else "dev"
    exits = exits_of(rs[0])
    for meth in specs.MULTI_EXIT:
      ys = [[v for v in by_seed(select(rs, t, meth), lambda r, m=m: exit_score(r, m, split)
                                ).values()] for m in exits]
      if all(ys):
        ax.errorbar(exits, [np.mean(y) for y in ys],
                    yerr=[np.std(y, ddof=1) if len(y) > 1 else 0 for y in ys], marker="o",
                    capsize=2, label=LABELS[meth])
    ax.set_title(f"{TASK_NAMES[t]} ({split})", fontsize=10)
    ax.set_xlabel("exit (layer)")
  _task_panels(rows, path, title, draw)


def quality_speed_figure(rows, path, title):
  def draw(ax, t):
    for meth in specs.MULTI_EXIT:
      rs = [r for r in select(rows, t, meth) if r.get("early_exit", {}).get("entropy")]
      if not rs:
        continue
      thr = sorted({e["threshold"] for r in rs for e in r["early_exit"]["entropy"]})
      xs = [np.mean([e["layer_speedup"] for r in rs for e in r["early_exit"]["entropy"]
                     if e["threshold"] == x]) for x in thr]
      ys = [np.mean([100 * e["metric"] for r in rs for e in r["early_exit"]["entropy"]
                     if e["threshold"] == x]) for x in thr]
      ax.plot(xs, ys, marker="o", label=LABELS[meth])
    ax.set_title(f"{TASK_NAMES[t]} dev, entropy policy", fontsize=10)
    ax.set_xlabel("layer speed-up (6 / mean layers)")
  _task_panels(rows, path, title, draw)


def angles_figure(rows, path):
  plt = _plt()
  fig, axes = plt.subplots(1, len(rows), figsize=(4.2 * len(rows), 3.4), squeeze=False)
  every = [s[k] for r in rows for s in r["steps"] for k in ("scl", "acl")]
  bins = np.arange(np.floor(min(every)) - 1, np.ceil(max(every)) + 2, 1.0)
  for ax, r in zip(axes[0], rows):
    for k, lab in (("scl", "CE vs SCL"), ("acl", "CE vs ACL-Embed")):
      ax.hist([s[k] for s in r["steps"]], bins=bins, alpha=0.6, label=lab)
    ax.axvline(90, color="k", lw=0.8, ls="--")
    ax.set_title(f"{TASK_NAMES[r['task']]}: training with {LABELS[r['method']]}", fontsize=9)
    ax.set_xlabel("gradient angle (degrees)")
    ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def figures(rs: dict, out: str = FIGURES) -> list[str]:
  """Writes every figure the records support; returns their paths."""
  os.makedirs(out, exist_ok=True)
  made = []

  for sweep, base in (("lambda_mr", "textgcn"), ("pilot_lambda_mr", "pilot_single_mr")):
    lam = rs.get(sweep)
    if lam:
      curves = {"CE+SCL": select(lam, "mr", "scl", loss__combine=None),
                "ACL": select(lam, "mr", "acl"),
                "CE+SCL additive": select(lam, "mr", "scl", loss__combine="additive")}
      curves = {k: v for k, v in curves.items() if v}
      path = os.path.join(out, f"{sweep}.png")
      curve_figure(lam, "loss.lam", curves, path, f"λ sensitivity on MR ({sweep})",
                   baseline=select(rs.get(base, []), "mr", "ce"))
      made.append(path)
  for sweep, base in (("gloss_ablation_mr", "textgcn"),
                      ("pilot_gloss_ablation_mr", "pilot_single_mr")):
    ga = rs.get(sweep)
    for axis, logx in (("loss.gamma_keep", False), ("loss.sigma", True)):
      rows = [r for r in (ga or []) if axis in r["overrides"]]
      if rows:
        path = os.path.join(out, f"{sweep}_{axis.split('.')[-1]}.png")
        curve_figure(rows, axis, {"CE+G-Loss": rows}, path, f"G-Loss {axis} on MR ({sweep})",
                     baseline=select(rs.get(base, []), "mr", "ce"), logx=logx)
        made.append(path)
  for sweep in ("multi_exit", "pilot_multi_exit"):
    if rs.get(sweep):
      path = os.path.join(out, f"{sweep}_per_exit.png")
      per_exit_figure(rs[sweep], path, f"Per-exit score, MiniLM-L6, mean-pooled exits ({sweep})")
      made.append(path)
      path = os.path.join(out, f"{sweep}_quality_speed.png")
      quality_speed_figure(rs[sweep], path, f"Early exit, mean over seeds ({sweep})")
      made.append(path)
  if rs.get("pilot_grad_conflict"):
    path = os.path.join(out, "pilot_grad_conflict.png")
    angles_figure(rs["pilot_grad_conflict"], path)
    made.append(path)
  return made


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--file", default=os.path.join(REPO, "RESULTS.md"))
  p.add_argument("--records", default=records.RECORDS)
  p.add_argument("--check", action="store_true",
                 help="only compare; exit 1 naming the tables that differ from the records")
  p.add_argument("--no_figures", action="store_true")
  a = p.parse_args(argv)
  rs = records.read_all(a.records)
  text = open(a.file).read()
  new, changed = render(text, rs)
  if a.check:
    if changed:
      print(f"{a.file}: tables that differ from the records: {', '.join(changed)}; run "
            "scripts/report.py.")
      return 1
    return 0
  if changed:
    with open(a.file, "w") as f:
      f.write(new)
  print(f"tables rewritten: {', '.join(changed) or 'none (in sync)'}")
  if not a.no_figures:
    for path in figures(rs):
      print(f"wrote {os.path.relpath(path, REPO)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
