r"""One run of the HF transformers + PyTorch loop (benchmarks/vs_hf.py's), written as train.py
writes a run, so that a study records it like any run: a protocol arm with
`framework="torch"` trains through this (acl_jax/study/jobs.py builds the command).

  python -m benchmarks.hf_run --workdir runs/hf_mr --task mr --data_dir ../shared/data \
      --max_length 64 --epochs 2 --lr 5e-5 --seed 0

The workdir gets config.json (the budget), metrics.jsonl (dev after every epoch),
results.json (the best dev epoch's scores, and the "train" record that marks the run
finished) and results_latest.json (the final weights' scores). The loop evaluates after
every epoch and keeps no checkpoints. Needs torch and the packaged MiniLM-L6; the task is one
acl_jax.data names (GLUE's, the TextGCN corpora).
"""
import argparse
import json
import os
import sys

from acl_jax import provenance
from benchmarks import common, vs_hf

# The scored metric and the one dev selects on, per task family (vs_hf.tasks' for its own).
GLUE_METRIC = {"cola": "mcc", "mrpc": "f1"}


def task_spec(name: str, data_dir: str, max_length: int, epochs: int) -> dict:
  """The loop's task: vs_hf's settings where it has the task, else the TextGCN protocol's
  (test accuracy, dev macro-F1) or GLUE's (dev)."""
  known = vs_hf.tasks(os.path.dirname(data_dir.rstrip("/")))
  base = dict(known.get(name) or (
      dict(report="test", metric="accuracy", dev_metric="macro_f1", val_fraction=0.1)
      if not data_dir.rstrip("/").endswith("glue") else
      dict(report="dev", metric=GLUE_METRIC.get(name, "accuracy"),
           dev_metric=GLUE_METRIC.get(name, "accuracy"), val_fraction=0.1)))
  return {**base, "data_dir": data_dir, "max_length": max_length, "epochs": epochs}


def write_run(workdir: str, task: dict, name: str, seed: int, lr: float, fit: dict) -> None:
  """The loop's epochs as a train.py run folder."""
  epochs = fit["epochs"]
  per_epoch = fit["steps"] // max(len(epochs), 1)
  best = max(range(len(epochs)), key=lambda i: epochs[i]["dev"][task["dev_metric"]])
  config = {"framework": "torch", "seed": seed, "num_epochs": task["epochs"], "num_steps": 0,
            "batch_size": vs_hf.BATCH, "early_stop_patience": 0, "eval_every": 0,
            "optim": {"lr": lr}, "task": {"name": name, "max_length": task["max_length"],
                                         "data_dir": task["data_dir"]}}
  common.write_json(os.path.join(workdir, "config.json"), config)
  with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    for i, ep in enumerate(epochs):
      f.write(json.dumps({"step": per_epoch * (i + 1), "kind": "dev", **ep["dev"]}) + "\n")
  common.write_json(os.path.join(workdir, "results_latest.json"),
                    {"checkpoint_step": fit["steps"], **epochs[-1]})
  common.write_json(os.path.join(workdir, "results.json"), {
      "checkpoint_step": per_epoch * (best + 1), **epochs[best],
      "train": {"framework": "torch", "code_versions": [provenance.git_revision()],
                "final_step": fit["steps"],
                "best_step": per_epoch * (best + 1), "final_loss": fit["final_loss"],
                "train_seconds": fit["train_s"], "train_examples": fit["train_examples"]}})


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--workdir", required=True)
  ap.add_argument("--task", required=True, help="a task acl_jax.data names, e.g. mr, rte")
  ap.add_argument("--data_dir", required=True)
  ap.add_argument("--max_length", type=int, required=True)
  ap.add_argument("--epochs", type=int, required=True)
  ap.add_argument("--lr", type=float, required=True)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--torch_threads", type=int, default=len(os.sched_getaffinity(0)))
  ap.add_argument("--max_train", type=int, default=0, help="seeded train subsample; 0 = all")
  ap.add_argument("--max_eval", type=int, default=0, help="eval subsample; 0 = all")
  a = ap.parse_args(argv)
  if os.path.isfile(os.path.join(a.workdir, "results.json")):
    print(f"{a.workdir} is finished (results.json); nothing to do.")
    return 0
  if not os.path.isdir(a.data_dir):
    sys.exit(f"--data_dir {a.data_dir}: no such folder; point it at the task's data.")
  os.makedirs(a.workdir, exist_ok=True)
  task = task_spec(a.task, a.data_dir, a.max_length, a.epochs)
  fit = vs_hf.torch_fit(task, a.task, a.seed, a.lr, a.torch_threads, a.max_train, a.max_eval)
  write_run(a.workdir, task, a.task, a.seed, a.lr, fit)
  print(f"wrote {a.workdir}: best dev epoch's and final weights' scores")
  return 0


if __name__ == "__main__":
  sys.exit(main())
