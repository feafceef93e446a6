r"""Cross-task tables from sweep roots: one row per method, one column per task.

  python scripts/results_tables.py --root runs/results/single --tasks mr,r8 \
      --metrics test/accuracy,test/macro_f1,test/silhouette_macro --out results/single/tables.md
  python scripts/results_tables.py --root runs/results/single --tasks sst2,cola,mrpc,rte,mr,r8 \
      --metrics headline --methods ce,scl,acl_embed,acl,gloss

The metric `headline` gives each task its own reported metric: the task's main metric (GLUE's
MCC for CoLA, F1 for MRPC, accuracy otherwise) on test where the runs have a test split, else
on dev (GLUE's labelled dev set, as GLUE papers report).

Each `<root>/<task>` is a `scripts/sweep.py` root; its runs are re-aggregated here (mean +- std
over seeds, n = seeds), so the table always matches the `results.json` files on disk. Paper
numbers (SPEC §1, DistilBERT, CE and CE+G-Loss) are shown beside accuracy columns where the
paper has them.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep  # noqa: E402  pylint: disable=wrong-import-position

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from acl_jax.data import tasks as task_registry  # noqa: E402  pylint: disable=wrong-import-position

# G-Loss paper, DistilBERT, 3 seeds: test accuracy of CE and CE+G-Loss (SPEC §1).
PAPER = {
    "mr": {"ce": 84.85, "gloss": 85.10},
    "r8": {"ce": 97.48, "gloss": 97.71},
    "r52": {"ce": 95.78, "gloss": 96.07},
    "20ng": {"ce": 83.15, "gloss": 83.64},
    "ohsumed": {"ce": 69.50, "gloss": 70.16},
    # BERT-base, SST-2 dev accuracy (G-Loss paper, SPEC §1).
    "sst2": {"ce": 91.2, "scl": 92.1, "gloss": 92.32},
}
# The metric each task's paper numbers are in, where it is not test accuracy.
PAPER_METRIC = {"sst2": "dev/accuracy"}
LABELS = {"ce": "CE", "scl": "CE+SCL", "gloss": "CE+G-Loss (sigma fixed)",
          "gloss_sqrt": "CE+G-Loss (sigma sqrt)", "triplet": "CE+triplet", "cosine": "CE+cosine",
          "acl_embed": "CE+ACL-Embed", "acl": "ACL (Embed+Grad)", "scl_grad": "CE+SCL+Grad"}


def cell(m) -> str:
  if not m:
    return "—"
  if m["n"] < 2:
    return f"{100 * m['mean']:.2f} (n=1)"
  return f"{100 * m['mean']:.2f} ± {100 * m['std']:.2f} (n={m['n']})"


def _row_name(key: str) -> str:
  s = sweep.parse_name(key)
  name = s.pop("method", "")
  label = LABELS.get(name, name)
  extra = ", ".join(f"{k}={v}" for k, v in s.items())
  return (f"{label} [{extra}]" if label else extra) if extra else (label or "(all)")


def _order(key: str):
  name = sweep.parse_name(key).get("method", "")
  return (list(LABELS).index(name) if name in LABELS else len(LABELS), key)


def headline_metric(task: str, summary: dict) -> str:
  """The task's main metric, on test if any run of the task has a test split, else on dev."""
  name = task_registry.get_task(task).main_metric
  has_test = any(m.startswith("test/") for g in summary.values() for m in g["metrics"])
  return f"{'test' if has_test else 'dev'}/{name}"


# The budget fields stated under every table, as (config field, label).
BUDGET = (("num_steps", "steps"), ("batch_size", "batch"), ("task.max_length", "max length"),
          ("optim.lr", "lr"))


def budget_line(root: str, tasks: list[str]) -> str:
  """Each task's training budget, read from its runs' config.json files.

  A field the runs of a task set to different values lists them all (e.g. "steps 200/800"), so
  a column that mixes budgets shows it.
  """
  parts = []
  for t in tasks:
    path = os.path.join(root, t)
    names = sorted(os.listdir(path)) if os.path.isdir(path) else []
    configs = [c for c in (sweep.flat_config(os.path.join(path, n)) for n in names) if c]
    fields = []
    for key, label in BUDGET:
      vals = sorted({c[key] for c in configs if isinstance(c.get(key), (int, float))})
      if vals:
        fields.append(f"{label} {'/'.join(f'{v:g}' for v in vals)}")
    if fields:
      parts.append(f"{t.upper()} " + ", ".join(fields))
  return ("Budgets (from the runs' config.json): " + "; ".join(parts) + ".") if parts else ""


def summaries(root: str, tasks: list[str], results: str = "results.json") -> dict:
  """{task: its sweep summary, re-aggregated from the runs ({} without a folder)}."""
  out = {}
  for t in tasks:
    path = os.path.join(root, t)
    out[t] = sweep.aggregate(path, results=results)[1] if os.path.isdir(path) else {}
  return out


def columns(per_task: dict, tasks: list[str], metric: str) -> dict:
  """{task: the metric its column shows} (`headline` resolves per task)."""
  if metric == "headline":
    return {t: headline_metric(t, per_task[t]) for t in tasks}
  return dict.fromkeys(tasks, metric)


def table(root: str, tasks: list[str], metric: str, methods: list[str] | None,
          results: str = "results.json", per_task: dict | None = None) -> str:
  """One row per method, one column per task; `per_task` (from `summaries`) saves reading
  the runs again."""
  per_task = summaries(root, tasks, results) if per_task is None else per_task
  col = columns(per_task, tasks, metric)
  if methods:
    keys = [m if "=" in m else f"method={m}" for m in methods]
  else:
    keys = sorted({k for s in per_task.values() for k in s}, key=_order)
  paper_cols = [t for t in tasks if t in PAPER and col[t] == PAPER_METRIC.get(t, "test/accuracy")]
  if metric == "headline":
    head = ["method"] + [f"{t.upper()} ({col[t]})" for t in tasks]
  else:
    head = ["method"] + [t.upper() for t in tasks]
  head += [f"{t.upper()} paper" for t in paper_cols]
  unit = "x100" if "silhouette" in metric else "%"
  lines = [f"**{metric}** ({unit}, mean ± std over seeds)", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for k in keys:
    row = [_row_name(k)]
    row += [cell(per_task[t].get(k, {}).get("metrics", {}).get(col[t])) for t in tasks]
    settings = sweep.parse_name(k)
    name = settings.get("method", "")
    only_method = set(settings) <= {"method"}
    row += [f"{PAPER[t][name]:.2f}" if only_method and name in PAPER[t] else ""
            for t in paper_cols]
    lines.append("| " + " | ".join(row) + " |")
  return "\n".join(lines) + "\n"


def paired_table(root: str, tasks: list[str], metric: str, baseline: str,
                 methods: list[str] | None, results: str = "results.json",
                 per_task: dict | None = None) -> str:
  """Each method's per-seed difference to the baseline method on the same seed, in points.

  Cells: mean ± std of the paired differences, and on how many seeds the method was ahead
  (ties count as not ahead). Seeds share the data order, so pairing removes that part of the
  seed spread from the comparison.
  """
  col = columns(summaries(root, tasks, results) if per_task is None else per_task, tasks,
                metric)
  per_task = {}
  for t in tasks:
    path = os.path.join(root, t)
    split, _, name = col[t].partition("/")
    per_task[t] = sweep.paired(
        path, baseline,
        lambda res, s=split, n=name: {n: 100 * res[s][n]} if n in res.get(s, {}) else {},
        results) if os.path.isdir(path) else {}
  keys = ([m if "=" in m else f"method={m}" for m in methods] if methods else
          sorted({k for d in per_task.values() for k in d}, key=_order))
  keys = [k for k in keys if sweep.parse_name(k).get("method") != baseline]
  base = LABELS.get(baseline, baseline)
  unit = "x100" if "silhouette" in metric else "points"
  head = ["method"] + [f"{t.upper()} ({col[t]})" for t in tasks]
  lines = [f"**{metric}: paired difference to {base}** ({unit}; mean ± std over seeds, "
           f"seeds ahead / seeds)", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for k in keys:
    row = [_row_name(k)]
    for t in tasks:
      d = per_task[t].get(k, {})
      d = next(iter(d.values()), []) if d else []
      if not d:
        row.append("—")
        continue
      row.append(f"{sweep.mean_std(d, signed=True)} ({sum(x > 0 for x in d)}/{len(d)})")
    lines.append("| " + " | ".join(row) + " |")
  return "\n".join(lines) + "\n"


def check_names(root: str, tasks: list[str], metrics: list[str], methods: list[str] | None,
                per_task: dict) -> None:
  """Fails, naming what the runs have, on a metric or method found under no task: a typo
  would otherwise print a table of empty cells. A task without a folder is only warned about
  (run_results.sh tabulates while sweeps are still running)."""
  missing = [t for t in tasks if not os.path.isdir(os.path.join(root, t))]
  if missing:
    print(f"results_tables: no folder under {root} for task(s) {missing}; their columns are "
          "empty.", file=sys.stderr)
  groups = [g for s in per_task.values() for g in s.values()]
  if not groups:
    return
  have = sorted({m for g in groups for m in g["metrics"]})
  bad = [m for m in metrics if m != "headline" and m not in have]
  if bad:
    raise SystemExit(f"--metrics {bad}: no run under {root} has them; the runs have {have}.")
  keys = {k for s in per_task.values() for k in s}
  bad = [m for m in methods or [] if (m if "=" in m else f"method={m}") not in keys]
  if bad:
    raise SystemExit(f"--methods {bad}: no such rows under {root}; the rows are "
                     f"{sorted(keys)}.")


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--root", required=True)
  p.add_argument("--tasks", required=True, help="comma list of task folders under --root")
  p.add_argument("--metrics", default="test/accuracy,test/macro_f1,test/silhouette_macro")
  p.add_argument("--methods", default="", help="row order (default: every method found)")
  p.add_argument("--out", default="")
  p.add_argument("--results", default="results.json",
                 help="per-run file: results.json (selected checkpoint) or results_latest.json "
                 "(final weights, from eval.py --checkpoint latest)")
  p.add_argument("--vs", default="",
                 help="a baseline method (e.g. ce): also tabulate every method's per-seed "
                 "difference to it (same seed and other settings), mean ± std and seeds ahead")
  a = p.parse_args(argv)
  tasks = a.tasks.split(",")
  methods = [m for m in a.methods.split(",") if m] or None
  per_task = summaries(a.root, tasks, a.results)
  check_names(a.root, tasks, a.metrics.split(","), methods, per_task)
  text = "\n".join(table(a.root, tasks, m, methods, a.results, per_task)
                   for m in a.metrics.split(","))
  if a.vs:
    text += "\n" + "\n".join(paired_table(a.root, tasks, m, a.vs, methods, a.results, per_task)
                              for m in a.metrics.split(","))
  budgets = budget_line(a.root, tasks)
  text += f"\n{budgets}\n" if budgets else ""
  print(text)
  if a.out:
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
      f.write(text)


if __name__ == "__main__":
  main()
