r"""How much of G-Loss can reach its target on each TextGCN corpus.

  python -m scripts.gloss_reach --data_dir ../shared/data            # the study's settings
  python -m scripts.gloss_reach --data_dir ../shared/data --batch_size 128 --tasks 20ng

Per corpus, from its train split as training reads it (configs/textgcn.py: the seeded 10%
dev holdout taken out): the expected share of a batch graph's hidden items whose class no kept
item has (`acl_jax.losses.unreachable_share`), and their expected share of a step's
class-balanced loss weight (`loss.class_weights=balanced`, as the study trains the TextGCN
corpora; simulated, seeded). Propagation gives such an item no mass on its class whatever
the features, so its clean-form term is a constant with no gradient. train.py logs the same
numbers for its own run before training.
"""
import argparse
import sys

import numpy as np

from acl_jax import data as data_lib
from acl_jax.losses import balanced_class_weights, unreachable_share
from acl_jax.train import objectives
from configs import textgcn
from studies.papers import PAPERS

TASKS = ("mr", "r8", "r52", "ohsumed", "20ng")


def reach_rows(data_dir: str, tasks, batch_size: int, gamma_keep: float) -> list[list]:
  rows = []
  for name in tasks:
    t = textgcn.get_config(f"{name},gloss").task
    task = data_lib.load_task(t.name, data_dir, text=t.text, val_fraction=t.val_fraction,
                              split_seed=t.split_seed, on_empty=t.on_empty)
    labels = np.asarray(task.splits["train"]["label"])
    k = task.num_labels
    items, weight = unreachable_share(labels, k, batch_size, gamma_keep,
                                      balanced_class_weights(labels, k))
    shown = PAPERS.tasks[name].label if name in PAPERS.tasks else name
    rows.append([shown, k, len(labels), f"{100 * items:.1f}", f"{100 * weight:.1f}"])
  return rows


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--data_dir", required=True, help="the folder holding <corpus>/")
  ap.add_argument("--tasks", default=",".join(TASKS))
  ap.add_argument("--batch_size", type=int, default=32, help="nodes of one batch graph")
  ap.add_argument("--gamma_keep", type=float, default=objectives.GAMMA_KEEP)
  a = ap.parse_args(argv)
  rows = reach_rows(a.data_dir, [x.strip() for x in a.tasks.split(",") if x.strip()],
                    a.batch_size, a.gamma_keep)
  print("| corpus | classes | train examples | unreachable hidden items, % | their share of "
        "a step's balanced loss, % |\n|---|---|---|---|---|")
  for r in rows:
    print("| " + " | ".join(str(x) for x in r) + " |")
  print(f"\n{a.batch_size}-node graphs keeping gamma_keep={a.gamma_keep:g} of the labels.")
  return 0


if __name__ == "__main__":
  sys.exit(main())
