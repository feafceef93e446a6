r"""Quickstart: packaged MiniLM-L6 on Rotten Tomatoes snippets (fresh vs rotten), offline.

Runs a few hundred steps in under 10 minutes on 2 CPU cores and prints dev metrics:

  python train.py --config configs/quickstart.py --workdir runs/quickstart

Any method preset or `runlocal` can follow the colon, e.g. `configs/quickstart.py:acl`.
"""
from configs import common


def get_config(arg=None):
  c = common.base_config()
  c.task.name = "quickstart"
  c.task.max_length = 64
  c.batch_size = 16
  c.num_steps = 240
  c.eval_every = 80
  c.optim.lr = 5e-5
  return common.apply_args(c, arg)
