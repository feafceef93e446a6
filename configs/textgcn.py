r"""TextGCN corpora (MR, R8, R52, Ohsumed, 20NG) under the G-Loss protocol.

The argument is `corpus[,method][,runlocal]`. 10% of train is a seeded dev split, max length
128, dev macro-F1 evaluated every epoch with early stopping after `early_stop_patience` (3)
evaluations without a gain, up to 10 epochs; `--config.loss.class_weights=balanced` gives the
class-balanced CE of the reference runs.

  python train.py --config configs/textgcn.py:mr,gloss --workdir runs/mr_gloss \
      --config.task.data_dir=../shared/data
  python train.py --config configs/textgcn.py:r8,ce,runlocal --workdir /tmp/r8 \
      --config.task.data_dir=../shared/data
"""
from configs import common

TASKS = ("mr", "r8", "r52", "ohsumed", "20ng")


def get_config(arg="mr"):
  c, rest = common.task_config(arg, "mr", TASKS, "TextGCN corpus")
  c.task.max_length = 128
  c.task.main_metric = "macro_f1"
  c.task.val_fraction = 0.1
  c.num_epochs = 10  # an upper bound: early stopping on dev macro-F1 ends most runs sooner
  c.early_stop_patience = 3
  c.eval_splits = "dev,test"
  return common.apply_args(c, rest)
