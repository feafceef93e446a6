r"""Alternating step-time comparison of loss variants on one model and batch (one process).

Used by `acl_grad_overhead.py` and `gloss_overhead.py`: every variant gets its own jitted
train step and state; after each is compiled and warmed up, timed repetitions go round-robin
(v1, v2, ..., v1, v2, ...) so drift on the machine hits every variant alike.
"""
import argparse
import os
import time

from benchmarks import common

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def time_variants(model_name: str, batch_size: int, seq_len: int, variants: dict, *,
                  reps: int = 5, warmup: int = 2, seed: int = 0, num_labels: int = 2,
                  steps_per_rep: int = 1, exits: str = "last", exit_pooling: str = "cls") -> dict:
  """Median step seconds of each variant.

  Args:
    model_name: "minilm", "bert_base" or "tiny" (see common.model_spec).
    variants: name -> dict of `loss` config overrides (e.g. {"name": "acl_embed", "gate": True}),
      plus optionally "multi_exit": overrides of the `multi_exit` block (needs exits="all").
    exits, exit_pooling: the model's exits ("last" or "all") and what each exit reads, shared
      by every variant.
  Returns:
    name -> {"median": s, ..., "compile_s": first call, "loss": last loss}.
  """
  import jax
  from acl_jax.models import Classifier, config_from_hf, init_params, load_pretrained
  from acl_jax.train import setup as setup_lib, step as step_lib
  from configs.common import base_config

  spec, folder = common.model_spec(model_name)
  if folder:
    model, params, _ = load_pretrained(folder, num_labels, exits=exits, with_tokenizer=False,
                                       exit_pooling=exit_pooling)
  else:
    cfg = config_from_hf(spec, num_labels=num_labels, exits=exits, exit_pooling=exit_pooling)
    model, params = Classifier(cfg), init_params(cfg, jax.random.key(seed))
  mesh = step_lib.make_mesh()
  shape = common.Shape(model_name, batch_size, seq_len)
  batch = step_lib.shard_batch(common.synthetic_batch(shape, spec["vocab_size"], seed), mesh)
  total = 100_000
  runs = {}
  for name, over in variants.items():
    c = base_config()
    over = dict(over)
    c.multi_exit.update(over.pop("multi_exit", {}))
    c.loss.update(over)
    c.optim.lr, c.seed = 2e-5, seed
    tr = setup_lib.make_trainer(c, model, params, mesh, num_labels=num_labels,
                                total_steps=total)
    runs[name] = {"fn": tr.train_step, "state": tr.state, "times": []}

  def go(name, n):
    r = runs[name]
    t0 = time.perf_counter()
    for _ in range(n):
      r["state"], m = r["fn"](r["state"], batch)
    jax.block_until_ready(r["state"])
    r["loss"] = float(m["loss"])
    return (time.perf_counter() - t0) / n

  for name in runs:
    runs[name]["compile_s"] = go(name, 1)
    for _ in range(warmup):
      go(name, 1)
  for _ in range(reps):
    for name in runs:
      runs[name]["times"].append(go(name, steps_per_rep))
  return {name: {**common.summarize(r["times"]), "compile_s": r["compile_s"], "loss": r["loss"]}
          for name, r in runs.items()}


def arg_parser(out_name: str, one_batch: bool = True) -> argparse.ArgumentParser:
  """The variant benchmarks' shared flags; `out_name` is the JSON under benchmarks/results."""
  p = argparse.ArgumentParser()
  p.add_argument("--model", default="minilm")
  if one_batch:
    p.add_argument("--batch", type=int, default=32)
  p.add_argument("--seq", type=int, default=64)
  p.add_argument("--reps", type=int, default=5)
  p.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results", out_name))
  return p


def ratio_rows(res: dict, base: str) -> list:
  b = res[base]["median"]
  return [[name, r["median"], r["median"] / b] for name, r in res.items()]


def header(argv_note: str = "") -> dict:
  return {"command": common.command_line(), "machine": common.machine_info(REPO),
          "note": argv_note, "load_avg_start": os.getloadavg()}


