r"""A study of your own: ACL against CE on your CSV file, three seeds, one comparison.

Copy this file, point `STUDY` at your files and columns, and run it (README, "Your own
study"):

  python -m scripts.sweep --protocol studies/example_csv.py --stage 1 \
      --root runs/my_study --records runs/my_study/records --workers 2
  python -m scripts.sweep --protocol studies/example_csv.py --status \
      --records runs/my_study/records
  python -m scripts.report --protocol studies/example_csv.py \
      --records runs/my_study/records --file runs/my_study/REPORT.md

The planner first trains CE seed 0 (the learning rate's run: one rate here, so no choice),
then CE and ACL at seeds 0-2; CE's seed 0 is that first run. Where the first look leaves the
comparison undecided, seeds 3 and 4 of both follow, and decide it for good.
"""
from acl_jax.study.protocol import Comparison, Protocol, Task


def study(train_file: str, dev_file: str, *, text_column: str = "text",
          label_column: str = "label", epochs: int = 3, max_length: int = 128,
          margin: float = 1.0, runlocal: bool = False, extra: tuple[str, ...] = (),
          look_seeds=((0, 1, 2), (3, 4))) -> Protocol:
  """ACL against CE, non-inferiority within `margin` points of dev accuracy.

  Args:
    train_file, dev_file: the CSV files (configs/files.py reads them).
    text_column, label_column: their columns.
    epochs, max_length: every run's budget.
    margin: the non-inferiority margin, points of dev accuracy.
    runlocal: every run a smoke run of seconds (configs/common.py `runlocal`).
    extra: more `key=value` overrides of every run (e.g. `model.name=...`).
    look_seeds: the seeds of the first look, and those the second adds.
  """
  task = Task(
      "mine", "My task", "configs/files.py", max_length, epochs, "accuracy", "dev", margin,
      config_arg="csv,runlocal" if runlocal else "csv",
      sets=tuple(sorted((f"task.train_file={train_file}", f"task.dev_file={dev_file}",
                         f"task.text_column={text_column}",
                         f"task.label_column={label_column}",
                         f"task.max_length={max_length}", "eval_every=0", *extra))))
  return Protocol(
      name="example_csv",
      tasks={"mine": task},
      comparisons=(Comparison("acl_vs_ce", "mine", "acl", "ce", "noninferior"),),
      claims={"acl_vs_ce": "ACL matches or beats CE on my task"},
      stages={1: "ACL against CE"},
      lr_grid=("5e-5",),
      lr_preferred="5e-5",
      budget_gain=None,
      look_seeds=look_seeds,
      labels={"ce": "CE", "acl": "ACL"},
  )


STUDY = study("data/train.csv", "data/dev.csv")
