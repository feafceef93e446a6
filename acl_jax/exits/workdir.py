"""The early-exit sweep of a finished multi-exit run: its best checkpoint, one split, a policy
over thresholds (eval.py --exit_policy)."""
import os

import jax

from acl_jax import data as data_lib
from acl_jax import evaluate
from acl_jax import metrics as metrics_lib
from acl_jax.exits.sweep import sweep, write_table
from acl_jax.exits.policies import check_threshold


def early_exit_workdir(config, workdir: str, split: str, policy: str, thresholds,
                       batch_size: int = 32, repeats: int = 3) -> tuple[str, str]:
  """Sweeps an early-exit policy over thresholds on a multi-exit run's best checkpoint.

  Writes `early_exit_{policy}_{split}.md/.json` into the workdir (metric, mean layers, layer
  speed-up and measured wall-clock speed-up against the full model on the same batches).
  """
  if config.model.exits != "all":
    raise ValueError(f"{workdir} was trained with model.exits={config.model.exits!r}: "
                     "early-exit evaluation needs a checkpoint trained with exits='all' "
                     "(e.g. configs/glue.py:sst2,jt).")
  for t in thresholds:  # fail before loading anything
    check_threshold(policy, t)
  setup, ckpts, target = evaluate.open_workdir(config, workdir, [split])
  restored = ckpts.restore_selected(target)
  ckpts.close()
  params = jax.device_get(restored[0])
  ds = setup.tok[split]
  batches = list(data_lib.eval_batches(ds, batch_size, setup.boundaries,
                                       pad_id=setup.tokenizer.pad_token_id or 0))
  names = setup.task.metrics
  k = setup.task.num_labels

  def metric_fn(preds, labels):
    return metrics_lib.compute(preds, labels, k, names)

  rows = sweep(setup.model.cfg, params, batches, None, policy, thresholds,
                     metric_fn=metric_fn, repeats=repeats)
  label = f"{os.path.basename(os.path.normpath(workdir))}"
  about = {"task": setup.task.name, "model": os.path.basename(os.path.normpath(
      config.model.name)), "split": split}
  return write_table(rows, os.path.join(workdir, f"early_exit_{policy}_{split}.md"),
                           label=label, about=about)
