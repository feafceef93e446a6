"""A study's report: its tables as data (`report(protocol, records)`), or rebuilt in place in
markdown files (`fill`, `update`).

A table sits in a report between marker lines naming it:

  <!-- table: stage1 -->
  ...rebuilt from the records...
  <!-- /table -->

`TABLES` names every table any protocol gets, each built from the report's context
(`stage_tables.context`: the records and the planner's decisions on them): the claims and
their verdicts, the stages' comparisons, scores, lr picks and budgets, the later stages' rules
and arms, the Holm correction, per-class results, machine-hours and reruns. A study adds its
own tables to these (this project's: studies/papers_report.py, e.g. its stage 2 rules' tables
in full, which read that stage's exit, λ and γ rules). A table with nothing recorded
yet is one "*pending*" line naming what it waits on.

  from acl_jax import study
  p = study.load("studies/mine.py")
  tables = study.report(p, "runs/my_study/records")   # {name: markdown}
  print(tables["claims"])

Imports nothing heavy.
"""
import os
import re
from collections.abc import Callable, Mapping

from acl_jax.study import (classes, holm, later_tables, protocol as proto, records as records_lib,
                           stage_tables as st, summary)

BLOCK = re.compile(r"(<!-- table: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)

Table = Callable[[st.Ctx], str]

TABLES: dict[str, Table] = {
    "claims": summary.claims_table, "protocol_tasks": st.protocol_tasks_table,
    "stage_hours": summary.stage_hours_table, "deviations": st.deviations_table,
    "lr": st.lr_table, "budget": st.budget_table, "stage1": st.stage1_table,
    "stage1_scores": st.stage1_scores_table,
    "classes": lambda ctx: classes.table(ctx.p, ctx.rs, ctx.p.labels),
    "holm": lambda ctx: holm.table(summary.holm_tests(ctx)),
    "reruns": summary.reruns_table,
    "holm_summary": lambda ctx: holm.summary(summary.holm_tests(ctx),
                                             summary.holm_registered(ctx.p)),
    "stage3_exits_holm": lambda ctx: summary.exit_holm_standing(ctx, 3),
    **{f"stage{s}_arms": (lambda ctx, s=s: st.arm_tables(ctx, s)) for s in (2, 3)},
    "described": lambda ctx: later_tables.described_tables(ctx.p, ctx.idx, ctx.p.labels),
    **{f"stage{s}_comparisons": (lambda ctx, s=s: st.later_comparisons_table(ctx, s))
       for s in (2, 3)},
}


def _rows(records: str | Mapping[str, list[dict]]) -> dict[str, list[dict]]:
  """The records: a folder of them (read), or {record: rows} as `records.read_all` gives."""
  if isinstance(records, str):
    if not os.path.isdir(records):  # else read as a study with no run
      raise FileNotFoundError(f"{records}: no such records folder.")
    return records_lib.read_all(records)
  return dict(records)


def report(p: proto.Protocol, records: str | Mapping[str, list[dict]],
           names=None, tables: Mapping[str, Table] = TABLES) -> dict[str, str]:
  """{name: markdown} of the tables `names` (default: every one of `tables`), built from
  `records` (a folder, or {record: rows}) under protocol `p`."""
  ctx = st.context(p, _rows(records))
  return {name: tables[name](ctx) for name in (names or tables)}


def render(text: str, tables) -> tuple[str, list[str]]:
  """(text with every table block rebuilt by `tables[name]()`, names of blocks that
  changed). A block whose table nothing builds is an error that lists the tables."""
  changed = []

  def fill_block(m):
    name = m.group("name")
    if name not in tables:
      raise SystemExit(f"a report has a table block {name!r} that no table builds; the "
                       f"tables: {', '.join(tables)}.")
    body = tables[name]()
    if body != m.group("body"):
      changed.append(name)
    return m.group(1) + body + m.group(4)

  return BLOCK.sub(fill_block, text), changed


def fill(p: proto.Protocol, text: str, records, tables: Mapping[str, Table] = TABLES,
         ) -> tuple[str, list[str]]:
  """(text with every table block rebuilt from `records` under `p`, names of the blocks that
  changed); each table is built only if a block names it."""
  ctx = st.context(p, _rows(records))
  return render(text, {name: (lambda build=build: build(ctx)) for name, build in tables.items()})


def update(p: proto.Protocol, paths, records, tables: Mapping[str, Table] = TABLES,
           check: bool = False) -> list[str]:
  """Rebuilds the table blocks of the markdown files `paths` from `records`; returns
  "<file>: <table>" for each block that changed (with `check`, nothing is written)."""
  rows, changed, rewritten = _rows(records), [], {}
  for path in paths:
    if not os.path.isfile(path):
      raise FileNotFoundError(f"{path}: no such report; create it with the table blocks to "
                              f"fill ({', '.join(tables)}).")
    with open(path) as f:
      text = f.read()
    new, names = fill(p, text, rows, tables)
    changed += [f"{os.path.basename(path)}: {n}" for n in names]
    if new != text:
      rewritten[path] = new
  for path, new in {} if check else rewritten.items():  # every file built before any is written
    with open(path, "w") as f:
      f.write(new)
  return changed
