r"""GLUE classification tasks (CoLA, SST-2, MRPC, QQP, MNLI, QNLI, RTE).

The argument is `task[,method][,runlocal]`. Data comes from the hub (nyu-mll/glue) unless
`--config.task.data_dir` points at a folder in the GLUE TSV layout:

  python train.py --config configs/glue.py:rte,acl --workdir runs/rte_acl \
      --config.task.data_dir=../shared/data/glue
  python train.py --config configs/glue.py:sst2,ce,runlocal --workdir /tmp/sst2 \
      --config.task.data_dir=../shared/data/glue

The paper setting uses BERT-base: add `--config.model.name=bert-base-uncased` (online).
"""
from configs import common

TASKS = ("cola", "sst2", "mrpc", "qqp", "mnli", "qnli", "rte")
# Small tasks get more epochs, as in the usual BERT recipes.
EPOCHS = {"cola": 3, "sst2": 3, "mrpc": 5, "qqp": 3, "mnli": 3, "qnli": 3, "rte": 5}


def get_config(arg="sst2"):
  c, rest = common.task_config(arg, "sst2", TASKS, "GLUE task")
  c.task.max_length = 128
  c.num_epochs = EPOCHS[c.task.name]
  if c.task.name == "mnli":
    c.eval_splits = "dev,dev_mm"  # matched and mismatched (SPEC §4: acc m/mm)
  return common.apply_args(c, rest)
