r"""CPU train-step throughput and peak memory: acl-jax against Hugging Face PyTorch.

Full run (on a quiet machine; roughly 15-25 min on 2 cores):
  python -m benchmarks.throughput
Smoke test (tiny model, 2 reps, about 2 min):
  python -m benchmarks.throughput --quick

What is measured:
  (a) Examples/s of one CE train step (forward, backward, global-norm clip, AdamW update,
      dropout on): our jitted `shard_map` step from `acl_jax.train.step` against
      `BertForSequenceClassification` in train mode with `torch.optim.AdamW`
      (zero_grad, backward, clip_grad_norm_, step). Both see the same batch: B rows of random
      token ids with lengths drawn from [L/2, L], padded to L.
  (b) Peak RSS (`ru_maxrss`) of each framework, per shape. Every framework and shape runs in
      its own worker process, so the peak covers exactly one framework's import, model
      load, compilation and steps. The parent starts the JAX worker, then the PyTorch one
      (each warms up alone), then asks them for timed repetitions in turn (jax, torch, jax,
      torch, ...); the idle worker waits blocked on a pipe, so drift on the machine hits both.
  (c) A sample of one MR epoch (MiniLM, B32, max length 128, seed 0, epoch 0) with length
      bucketing against padding every batch to 128. The sample is a seeded, stratified
      subset of the epoch's `train_plan` batches (every bucket of the epoch is present,
      in proportion where possible); the padded run uses the very same examples. Both pay
      for batch building (`make_batch`, `shard_batch`), and every step is waited for, so
      each batch gets its own time. Every shape is compiled before timing. The full-epoch estimate weights each bucket's median step time by its batch
      count in the whole epoch.

Ratios are ours/torch in examples/s: above 1 means acl-jax is faster.
"""
# Workers import jax, torch and acl_jax lazily: the parent stays light, and each worker
# process loads only its own framework.
# pylint: disable=import-outside-toplevel
import argparse
import dataclasses
import os
import sys
import time

import numpy as np

from benchmarks import common

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_LABELS = 2
LR = 2e-5
TOTAL_STEPS = 100_000  # only shapes the LR schedule; no run gets near it


SHAPES = {
    "minilm_b32_l64": common.Shape("minilm", 32, 64),
    "minilm_b32_l128": common.Shape("minilm", 32, 128),
    "bert_base_b32_l128": common.Shape("bert_base", 32, 128),
}
# MPNet-base (all-mpnet-base-v2; `python -m acl_jax.weights all-mpnet-base-v2` first), on
# request: --shapes mpnet_b32_l128,mpnet_b32_l64
MPNET_SHAPES = {
    "mpnet_b32_l128": common.Shape("mpnet", 32, 128),
    "mpnet_b32_l64": common.Shape("mpnet", 32, 64),
}
QUICK_SHAPES = {
    "tiny_b32_l32": common.Shape("tiny", 32, 32),
    "tiny_b32_l64": common.Shape("tiny", 32, 64),
}

# ----------------------------------------------------------------------------------------------
# Workers (each in its own process).


def jax_train_setup(model_name: str, seed: int):
  """Our model, CE objective, AdamW and jitted train step, as the training loop builds them.

  The exit head is the family's HF head (BERT's pooler; MPNet's RoBERTa-style head), so both
  do the same work.
  """
  import jax
  from acl_jax.models import Classifier, config_from_hf, init_params, load_pretrained
  from acl_jax.models.hf import FAMILY_HEADS
  from acl_jax.train import setup as setup_lib, step as step_lib
  from configs.common import base_config

  spec, folder = common.model_spec(model_name)
  if folder:
    model, params, _ = load_pretrained(folder, NUM_LABELS, with_tokenizer=False,
                                       head=FAMILY_HEADS[model_spec_family(spec)])
  else:
    cfg = config_from_hf(spec, num_labels=NUM_LABELS, head="bert_pooler")
    model, params = Classifier(cfg), init_params(cfg, jax.random.key(seed))
  c = base_config()
  c.optim.lr, c.seed = LR, seed
  mesh = step_lib.make_mesh()
  n_params = sum(x.size for x in jax.tree.leaves(params))
  tr = setup_lib.make_trainer(c, model, params, mesh, num_labels=NUM_LABELS,
                              total_steps=TOTAL_STEPS)
  return tr.train_step, tr.state, mesh, n_params


def model_spec_family(spec: dict) -> str:
  from acl_jax.models.config import FAMILIES
  return FAMILIES[spec.get("model_type", "bert")]


def _cache_size(jitted) -> int:
  """Compiled variants of a jitted function (-1 where jax does not expose it)."""
  size = getattr(jitted, "_cache_size", None)
  return size() if size else -1


def jax_worker(args, chan: common.Channel) -> None:
  """Warms up our train step on one shape, then serves timed repetitions."""
  from acl_jax import host_heap
  with host_heap.managed() as heap:  # as train.py runs its steps
    import jax
    from acl_jax.train import step as step_lib
    rss_import = common.peak_rss_mib()
    shape = all_shapes()[args.shape]
    train_step, state, mesh, n_params = jax_train_setup(shape.model, args.seed)
    vocab = common.model_spec(shape.model)[0]["vocab_size"]
    batch = step_lib.shard_batch(common.synthetic_batch(shape, vocab, args.seed), mesh)

    def steps(n):
      nonlocal state
      t0 = time.perf_counter()
      for _ in range(n):
        state, metrics = train_step(state, batch)
      jax.block_until_ready((state, metrics))
      return time.perf_counter() - t0, float(metrics["loss"])

    compile_s, _ = steps(1)
    warm_s = [steps(1)[0] for _ in range(args.warmup)]
    compiled = _cache_size(train_step)
    chan.send(ready=True, n_params=int(n_params), first_step_s=compile_s, warmup_s=warm_s,
              devices=jax.device_count(), backend=jax.default_backend(),
              xla_flags=os.environ.get("XLA_FLAGS", ""), rss_after_import_mib=rss_import,
              keep_step_memory=heap.kept)
    serve(chan, steps, lambda: {"recompiled": _cache_size(train_step) != compiled})


def torch_worker(args, chan: common.Channel) -> None:
  """Warms up an HF BertForSequenceClassification step on one shape, then serves reps."""
  import torch
  import transformers
  rss_import = common.peak_rss_mib()
  torch.set_num_threads(args.torch_threads)
  torch.manual_seed(args.seed)
  transformers.logging.set_verbosity_error()
  shape = all_shapes()[args.shape]
  spec, folder = common.model_spec(shape.model)
  kw = {"attn_implementation": args.torch_attn} if args.torch_attn else {}
  if folder:  # the family's sequence classifier (BERT's, MPNet's)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        folder, num_labels=NUM_LABELS, **kw)
  else:
    cfg = transformers.BertConfig(**{k: v for k, v in spec.items() if k != "model_type"},
                                  num_labels=NUM_LABELS, **kw)
    model = transformers.BertForSequenceClassification(cfg)
  model.train()
  # AdamW as acl_jax.train.optim: eps 1e-6, decay 0.01 except on biases and LayerNorm.
  no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
  decay = [p for n, p in model.named_parameters()
           if not (n.endswith("bias") or "LayerNorm" in n)]
  opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                           {"params": no_decay, "weight_decay": 0.0}], lr=LR, eps=1e-6)
  batch = {k: torch.from_numpy(v.astype(np.int64))
           for k, v in common.synthetic_batch(shape, spec["vocab_size"], args.seed).items()
           if not (k == "token_type_ids" and spec.get("model_type") == "mpnet")}  # has none

  def steps(n):
    t0 = time.perf_counter()
    for _ in range(n):
      opt.zero_grad(set_to_none=True)
      loss = model(**batch).loss
      loss.backward()
      torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
      opt.step()
    return time.perf_counter() - t0, float(loss.detach())

  first_s, _ = steps(1)
  warm_s = [steps(1)[0] for _ in range(args.warmup)]
  chan.send(ready=True, n_params=sum(p.numel() for p in model.parameters()),
            first_step_s=first_s, warmup_s=warm_s, threads=torch.get_num_threads(),
            attn_implementation=getattr(model.config, "_attn_implementation", None),
            rss_after_import_mib=rss_import)
  serve(chan, steps, dict)


def serve(chan: common.Channel, steps, extra) -> None:
  """Answers {"cmd": "time", "steps": n} until {"cmd": "finish"} (or EOF)."""
  loss = None
  while (req := chan.recv()) is not None:
    if req["cmd"] == "time":
      seconds, loss = steps(req["steps"])
      if not np.isfinite(loss):
        raise FloatingPointError(f"Loss became {loss} during the benchmark.")
      chan.send(seconds=seconds)
    elif req["cmd"] == "finish":
      chan.send(peak_rss_mib=common.peak_rss_mib(), final_loss=loss, **extra())
      return
    else:
      raise ValueError(f"Unknown request {req!r}.")


def sample_plan(plan, n: int, seed: int) -> list[int]:
  """Positions of a seeded, stratified sample of n batches of an epoch plan, ascending.

  Each bucket gets its proportional share (at least one batch), so the sample's length mix
  follows the epoch's and every bucket's step time is measured.
  """
  seqs = np.array([s for s, _ in plan])
  buckets, counts = np.unique(seqs, return_counts=True)
  n = max(min(n, len(plan)), len(buckets))
  share = counts * n / len(plan)
  k = np.maximum(1, np.floor(share)).astype(int)
  while k.sum() < n:
    k[np.argmax(np.where(k < counts, share - k, -np.inf))] += 1
  while k.sum() > n:
    k[np.argmax(np.where(k > 1, k - share, -np.inf))] -= 1
  rng = np.random.default_rng(seed)
  picks = [rng.choice(np.flatnonzero(seqs == b), kb, replace=False) for b, kb in zip(buckets, k)]
  return sorted(int(i) for i in np.concatenate(picks))


def epoch_worker(args, chan: common.Channel) -> None:
  """MR, B32: a sample of epoch 0 with length bucketing vs everything padded to max length."""
  import jax
  from acl_jax import data as data_lib
  from acl_jax.models import load_tokenizer
  from acl_jax.train import step as step_lib
  from configs.common import base_config

  cfg = base_config()
  max_len, batch_size = cfg.task.max_length, cfg.batch_size
  model_name = "tiny" if args.quick else "minilm"
  tokenizer = load_tokenizer(common.minilm_folder())
  task = data_lib.load_task("mr", args.data_dir, val_fraction=cfg.task.val_fraction,
                            split_seed=cfg.task.split_seed)
  cols = data_lib.to_columns(data_lib.tokenize_dataset(task.splits["train"], tokenizer, max_len))
  boundaries = data_lib.bucket_boundaries(max_len, cfg.task.num_buckets)
  plan = data_lib.train_plan(cols["length"], batch_size, args.seed, 0, boundaries)
  positions = sample_plan(plan, args.epoch_batches, args.seed)
  sample = [plan[i] for i in positions]
  train_step, state, mesh, _ = jax_train_setup(model_name, args.seed)
  pad_id = tokenizer.pad_token_id

  def run(pad_to, batches):
    """Per-step seconds, batch building included; pad_to None = the batch's own bucket."""
    nonlocal state
    times = []
    for seq_len, idx in batches:
      t0 = time.perf_counter()
      batch = data_lib.make_batch(cols, idx, pad_to or seq_len, pad_id)
      state, metrics = train_step(state, step_lib.shard_batch(batch, mesh))
      jax.block_until_ready((state, metrics))
      times.append(time.perf_counter() - t0)
    return times

  shortest = min(sample, key=lambda b: b[0])[1]
  t0 = time.perf_counter()
  for seq_len in sorted({s for s, _ in sample} | {max_len}):  # every shape timed below
    run(None, [(seq_len, shortest)])
  compile_s = time.perf_counter() - t0
  compiled = _cache_size(train_step)

  times = {"bucketed": [], "padded": []}
  for r in range(args.epoch_reps):
    for mode, pad_to in (("bucketed", None), ("padded", max_len)):
      times[mode].append(run(pad_to, sample))
      print(f"[mr_epoch] rep {r + 1}/{args.epoch_reps} {mode}: {sum(times[mode][-1]):.2f} s",
            file=sys.stderr)
  if _cache_size(train_step) != compiled:
    raise RuntimeError("The train step recompiled during timing; the numbers are invalid.")

  n_sample = len(sample) * batch_size
  seqs = np.array([s for s, _ in sample])
  epoch_seqs = np.array([s for s, _ in plan])
  real_tokens = sum(int(cols["length"][idx].sum()) for _, idx in sample)
  out = {"task": "mr", "model": model_name, "batch_size": batch_size, "max_length": max_len,
         "boundaries": list(boundaries), "plan": f"train_plan(seed={args.seed}, epoch=0)",
         "epoch_batches": len(plan), "epoch_examples": len(plan) * batch_size,
         "epoch_bucket_counts": _counts(epoch_seqs), "sample_batches": len(sample),
         "sample_examples": n_sample, "sample_bucket_counts": _counts(seqs),
         "sample_positions": positions,
         "compile_all_shapes_s": compile_s, "reps": args.epoch_reps}
  for mode in times:
    steps = np.array(times[mode])  # [reps, sample batches]
    total = np.median(steps.sum(1))
    padded_len = seqs if mode == "bucketed" else np.full_like(seqs, max_len)
    if mode == "bucketed":
      per_bucket = {int(b): float(np.median(steps[:, seqs == b])) for b in np.unique(seqs)}
      est = sum(per_bucket[int(b)] for b in epoch_seqs)
    else:
      per_bucket = {max_len: float(np.median(steps))}
      est = len(plan) * per_bucket[max_len]
    out[mode] = {"sample_s": common.summarize(steps.sum(1).tolist()),
                 "sample_examples_per_s": n_sample / total,
                 "median_step_s_by_length": per_bucket,
                 "real_token_fraction": real_tokens / float(batch_size * padded_len.sum()),
                 "est_epoch_s": est, "est_epoch_examples_per_s": len(plan) * batch_size / est}
  out["ratio_bucketed_over_padded"] = (out["bucketed"]["sample_examples_per_s"]
                                       / out["padded"]["sample_examples_per_s"])
  out["est_epoch_ratio_bucketed_over_padded"] = (out["padded"]["est_epoch_s"]
                                                 / out["bucketed"]["est_epoch_s"])
  out["peak_rss_mib"] = common.peak_rss_mib()
  chan.send(**out)


def _counts(seqs: np.ndarray) -> dict[int, int]:
  values, counts = np.unique(seqs, return_counts=True)
  return {int(v): int(c) for v, c in zip(values, counts)}


WORKERS = {"jax": jax_worker, "torch": torch_worker, "epoch": epoch_worker}


# ----------------------------------------------------------------------------------------------
# The parent: drives the workers and reports.


def all_shapes() -> dict[str, common.Shape]:
  return {**SHAPES, **MPNET_SHAPES, **QUICK_SHAPES}


def worker_env(args, kind: str) -> dict[str, str]:
  env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
  if kind in ("jax", "epoch"):
    env.setdefault("JAX_PLATFORMS", "cpu")
    if args.xla_flags:
      env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + args.xla_flags).strip()
  return env


def start_worker(args, kind: str, shape: str = "") -> common.Worker:
  argv = [sys.executable, "-m", "benchmarks.throughput", "--worker", kind, "--shape", shape,
          "--seed", str(args.seed), "--warmup", str(args.warmup),
          "--torch_threads", str(args.torch_threads), "--torch_attn", args.torch_attn,
          "--data_dir", args.data_dir, "--epoch_batches", str(args.epoch_batches),
          "--epoch_reps", str(args.epoch_reps)] + (["--quick"] if args.quick else [])
  return common.Worker(argv, env=worker_env(args, kind), cwd=REPO)


def bench_shape(args, name: str) -> dict:
  """(a) and (b) for one shape: alternating timed reps, then each worker's peak RSS."""
  shape = all_shapes()[name]
  ready, finish, times = {}, {}, {"jax": [], "torch": []}
  with start_worker(args, "jax", name) as wj:
    ready["jax"] = wj.recv()
    with start_worker(args, "torch", name) as wt:
      ready["torch"] = wt.recv()
      workers = {"jax": wj, "torch": wt}
      for r in range(args.reps):
        for fw, w in workers.items():
          times[fw].append(w.request(cmd="time", steps=args.steps_per_rep)["seconds"]
                           / args.steps_per_rep)
        print(f"[{name}] rep {r + 1}/{args.reps}: jax {times['jax'][-1]:.3f} s/step, "
              f"torch {times['torch'][-1]:.3f} s/step", file=sys.stderr)
      for fw, w in workers.items():
        finish[fw] = w.request(cmd="finish")
  if finish["jax"].get("recompiled"):
    raise RuntimeError(f"[{name}] our train step recompiled during timing.")
  out = {"shape": name, **dataclasses.asdict(shape)}
  for fw in ("jax", "torch"):
    step = common.summarize(times[fw])
    out[fw] = {**ready[fw], **finish[fw], "step_s": step,
               "examples_per_s": shape.batch / step["median"]}
    out[fw].pop("ready")
  out["ratio_ours_over_torch"] = out["jax"]["examples_per_s"] / out["torch"]["examples_per_s"]
  return out


def bench_epoch(args) -> dict:
  with start_worker(args, "epoch") as w:
    return w.recv()


def report(results: dict) -> str:
  """The Markdown tables of a results dict."""
  rows = []
  for r in results["train_step"]:
    j, t = r["jax"], r["torch"]
    rows.append([r["shape"], r["batch"], r["seq_len"], j["step_s"]["median"],
                 t["step_s"]["median"], j["examples_per_s"], t["examples_per_s"],
                 r["ratio_ours_over_torch"], round(j["peak_rss_mib"]), round(t["peak_rss_mib"]),
                 j["first_step_s"]])
  s = results["settings"]
  text = [f"## Train step (CE, AdamW, dropout on): median of {s['reps']} alternating reps",
          "", common.markdown_table(
              ["shape", "B", "L", "ours s/step", "torch s/step", "ours ex/s", "torch ex/s",
               "ours/torch", "ours peak MiB", "torch peak MiB", "ours compile+1st step s"],
              rows)]
  e = results.get("mr_epoch")
  if e:
    text += ["", f"## MR epoch sample: {e['sample_batches']} of {e['epoch_batches']} batches "
             f"of {e['plan']} (stratified by bucket, seed {s['seed']}), {e['model']}, "
             f"B{e['batch_size']}; median of {e['reps']} alternating reps", "",
             common.markdown_table(
                 ["mode", "sample s", "sample ex/s", "real-token share", "est. epoch s",
                  "est. epoch ex/s"],
                 [[m, e[m]["sample_s"]["median"], e[m]["sample_examples_per_s"],
                   e[m]["real_token_fraction"], e[m]["est_epoch_s"],
                   e[m]["est_epoch_examples_per_s"]] for m in ("bucketed", "padded")]),
             "", f"Bucketed/padded examples/s: {e['ratio_bucketed_over_padded']:.3g} on the "
             f"sample, {e['est_epoch_ratio_bucketed_over_padded']:.3g} estimated for the epoch "
             f"(epoch buckets {e['epoch_bucket_counts']}, sample {e['sample_bucket_counts']})."]
  if results["notes"]:
    text += [""] + [f"NOTE: {n}" for n in results["notes"]]
  return "\n".join(text)


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--shapes", default=",".join(SHAPES),
                 help=f"Comma list of train-step shapes; known: {', '.join(all_shapes())}.")
  p.add_argument("--reps", type=int, default=5, help="Timed repetitions per framework.")
  p.add_argument("--steps_per_rep", type=int, default=1, help="Train steps in one repetition.")
  p.add_argument("--warmup", type=int, default=2, help="Untimed steps after the first one.")
  p.add_argument("--epoch_batches", type=int, default=24,
                 help="MR epoch sample size in batches; 0 skips the MR epoch part.")
  p.add_argument("--epoch_reps", type=int, default=3,
                 help="Alternating bucketed/padded passes over the MR sample.")
  p.add_argument("--quick", action="store_true",
                 help="Smoke test: tiny model, 2 reps, 4-batch MR sample.")
  p.add_argument("--torch_threads", type=int, default=2, help="torch.set_num_threads.")
  p.add_argument("--torch_attn", default="",
                 help="HF attn_implementation ('eager', 'sdpa'); '' = the HF default.")
  p.add_argument("--cpus", default="",
                 help="Comma list of CPU ids to pin every worker to (e.g. 0,1); '' = all.")
  p.add_argument("--xla_flags", default="",
                 help="Extra XLA_FLAGS for the JAX workers, appended to $XLA_FLAGS; pass "
                 "as --xla_flags='--xla_flag=value ...' (with '=').")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--data_dir",
                 default=os.path.normpath(os.path.join(REPO, "..", "shared", "data")),
                 help="Folder holding mr/ (TextGCN layout).")
  p.add_argument("--out", default="",
                 help="JSON results path; default benchmarks/results/throughput[_quick].json.")
  p.add_argument("--worker", default="", help=argparse.SUPPRESS)
  p.add_argument("--shape", default="", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.quick:
    args.reps, args.epoch_batches, args.epoch_reps = 2, min(args.epoch_batches, 4), 1
    if args.shapes == p.get_default("shapes"):
      args.shapes = ",".join(QUICK_SHAPES)
  args.out = args.out or os.path.join(REPO, "benchmarks", "results",
                                      "throughput_quick.json" if args.quick else
                                      "throughput.json")
  return args


def main():
  args = parse_args()
  if args.worker:
    WORKERS[args.worker](args, common.Channel())
    return
  if args.cpus:
    os.sched_setaffinity(0, [int(c) for c in args.cpus.split(",")])  # workers inherit it
  names = [s for s in args.shapes.split(",") if s]
  unknown = [s for s in names if s not in all_shapes()]
  if unknown:
    raise SystemExit(f"Unknown shapes {unknown}; known: {sorted(all_shapes())}.")
  machine = common.machine_info(REPO)
  notes = []
  # Other processes' CPU share just before the run (the load average would still carry a job
  # that ended a minute ago).
  machine["cpu_busy_start"] = common.cpu_busy()
  if machine["cpu_busy_start"] > 0.25:
    notes.append(f"The machine was busy at the start (other processes used "
                 f"{machine['cpu_busy_start']:.0%} of its CPU time); timings are unreliable.")
    print("NOTE: " + notes[-1], file=sys.stderr)
  if machine["cpus_usable"] != args.torch_threads:
    notes.append(f"torch uses {args.torch_threads} threads but {machine['cpus_usable']} CPUs "
                 "are usable (XLA uses all of them); pass --cpus to pin both to the same set.")
    print("NOTE: " + notes[-1], file=sys.stderr)
  results = {
      "command": common.command_line(), "machine": machine,
      "xla_flags": worker_env(args, "jax").get("XLA_FLAGS", ""),
      "settings": {k: v for k, v in vars(args).items() if k not in ("worker", "shape")},
      "notes": notes, "train_step": [], "mr_epoch": None}
  for name in names:
    results["train_step"].append(bench_shape(args, name))
  if args.epoch_batches > 0:
    results["mr_epoch"] = bench_epoch(args)
  machine["load_average_end"] = os.getloadavg()
  common.write_json(args.out, results)
  print(report(results))
  print(f"\nCommand: {results['command']}\nMachine: {common.cpu_kind()}, "
        f"{machine['cpus_usable']}/{machine['cpu_count']} CPUs usable, jax "
        f"{machine['versions']['jax']}, torch {machine['versions']['torch']}, XLA_FLAGS="
        f"{results['xla_flags']!r}\nWrote {args.out}")


if __name__ == "__main__":
  main()
