"""What accuracy hides on imbalanced corpora: macro-F1 and the lowest per-class recall of every
method on every task whose runs evaluated their final weights per class (eval.py
--checkpoint latest on the scored split: this project's TextGCN corpora, any study's task
scored on test).

The lowest recall is eval.py's per-class recall on the scored split (records keep it as
`per_class_recall`, with each class's support); runs recorded before rows kept it show
macro-F1 alone.
"""
from acl_jax.study import fmt, protocol as proto

# A method whose mean lowest per-class recall is this many points below CE's, on the same
# corpus, gets a note in the claims table.
FAR_BELOW = 10.0


def scored(p: proto.Protocol, row: dict) -> dict:
  task = p.tasks[row["task"]]
  return (row.get("latest") or {}).get(task.scored, {})


def lowest_recall(p: proto.Protocol, row: dict) -> tuple[str, float, int] | None:
  """(class, recall in points, support) of the run's least-recalled class, None where its
  per-class recall was not recorded."""
  res = scored(p, row)
  recall, support = res.get("per_class_recall"), res.get("per_class_support", {})
  if not recall:
    return None
  name = min(recall, key=lambda c: (recall[c], c))
  return name, 100.0 * recall[name], int(support.get(name, 0))


def method_rows(p: proto.Protocol, rs: dict, task: str) -> dict[str, list[dict]]:
  """{method: rows} of the task's scored comparison runs in every stage's record (seed order,
  each run once)."""
  out = {}
  for sweep in p.stage_record.values():
    for r in rs.get(sweep, []):
      if r["task"] == task and not r.get("overrides") and scored(p, r):
        out.setdefault(r["method"], {})[r["seed"]] = r
  return {m: [by[s] for s in sorted(by)] for m, by in out.items()}


def mean_lowest(p: proto.Protocol, rows) -> float | None:
  lows = [lowest_recall(p, r) for r in rows]
  return None if not lows or None in lows else sum(x[1] for x in lows) / len(lows)


def table(p: proto.Protocol, rs: dict, labels: dict) -> str:
  """Per task and method: accuracy, macro-F1, and the lowest per-class recall (its class and
  support), means ± std over seeds, points; the tasks whose runs recorded their final
  weights' scores on the scored split (a "corpus" column where all are TextGCN corpora)."""
  tasks = {task: t for task, t in p.tasks.items() if method_rows(p, rs, task)}
  what = "corpus" if all(t.family == "textgcn" for t in tasks.values()) else "task"
  lines = [f"| {what} | method | accuracy | macro-F1 | lowest class recall (class, support) |",
           "|---|---|---|---|---|"]
  for task, t in tasks.items():
    for method, rows in method_rows(p, rs, task).items():
      lows = [lowest_recall(p, r) for r in rows]
      if None in lows:
        low = f"not recorded ({sum(x is None for x in lows)} of {len(rows)} runs)"
      else:
        classes = sorted({c for c, _, _ in lows})
        low = f"{fmt.mean_sd([x[1] for x in lows])} ({', '.join(classes)}; support " \
              f"{', '.join(str(n) for n in sorted({n for _, _, n in lows}))})"
      scores = [scored(p, r) for r in rows]
      lines.append(f"| {t.label} | {labels.get(method, method)} | "
                   f"{fmt.mean_sd([100 * x['accuracy'] for x in scores])} | "
                   f"{fmt.mean_sd([100 * x['macro_f1'] for x in scores if 'macro_f1' in x])} | "
                   f"{low} |")
  if len(lines) == 2:
    return ("*pending*: no run has recorded its final weights' scores per class (eval.py "
            "--checkpoint latest, which the sweep runs for a task scored on test).\n")
  return "\n".join(lines) + "\n"


def note(p: proto.Protocol, rs: dict, task: str, method: str) -> str:
  """" (lowest class recall X, CE's Y)" where the method's mean lowest per-class recall on the
  task lies FAR_BELOW points or more under CE's; "" otherwise or where not recorded."""
  by = method_rows(p, rs, task)
  ours, ce = mean_lowest(p, by.get(method, [])), mean_lowest(p, by.get("ce", []))
  if ours is None or ce is None or ce - ours < FAR_BELOW:
    return ""
  return f" (lowest class recall {ours:.1f}, CE's {ce:.1f})"
