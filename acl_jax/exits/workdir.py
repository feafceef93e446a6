"""The early-exit sweep of a finished multi-exit run: its best checkpoint, one split, a policy
over thresholds (eval.py --exit_policy)."""
import os

import jax

from acl_jax import data as data_lib
from acl_jax import metrics as metrics_lib
from acl_jax import run as run_lib
from acl_jax.errors import UserError
from acl_jax.exits.policies import check_threshold
from acl_jax.exits.sweep import sweep, write_table


def early_exit_workdir(workdir: str, split: str, policy: str, thresholds,
                       batch_size: int = 32, repeats: int = 3) -> tuple[str, str]:
  """Sweeps an early-exit policy over thresholds on a multi-exit run's best checkpoint.

  Writes `early_exit_{policy}_{split}.md/.json` into the workdir (metric, mean layers, layer
  speed-up and measured wall-clock speed-up against the full model on the same batches) and
  returns their paths.
  """
  config = run_lib.read_config(workdir)
  if config.model.exits != "all":
    raise UserError(f"{workdir} was trained with model.exits={config.model.exits!r}: "
                    "early-exit evaluation needs a checkpoint trained with exits='all' "
                    "(e.g. configs/glue.py:sst2,jt).")
  for t in thresholds:  # fail before loading anything
    check_threshold(policy, t)
  run = run_lib.open(workdir, "best", splits=[split])
  setup = run.setup
  params = jax.device_get(run.params)  # the fast path jits per layer on one device
  batches = list(data_lib.eval_batches(setup.tok[split], batch_size, setup.boundaries,
                                       pad_id=setup.tokenizer.pad_token_id or 0))
  names = setup.task.metrics
  k = setup.task.num_labels

  def metric_fn(preds, labels):
    return metrics_lib.compute(preds, labels, k, names)

  rows = sweep(run.model.cfg, params, batches, None, policy, thresholds, metric_fn=metric_fn,
               repeats=repeats)
  about = {"task": setup.task.name,
           "model": os.path.basename(os.path.normpath(run.config.model.name)), "split": split}
  return write_table(rows, os.path.join(workdir, f"early_exit_{policy}_{split}.md"),
                     label=os.path.basename(os.path.normpath(workdir)), about=about)
