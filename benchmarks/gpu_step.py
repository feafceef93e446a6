r"""Train-step throughput and model FLOP utilisation on an accelerator (GPU or TPU).

  bash benchmarks/gpu.sh                      # the prepared run: under 8 minutes
  python -m benchmarks.gpu_step --smoke       # tiny shapes on any backend, CPU included

Times the jitted data-parallel train step of acl-jax (forward, backward, global-norm clip,
AdamW, dropout on) for two objectives, CE and ACL-Grad (CE + ACL-Embed, gated, the angle over
all parameters), at two encoder shapes with random-init weights (no checkpoint is read):

  bert_base: 12 layers, hidden 768, 12 heads, FFN 3072, vocab 30522
  minilm_l6: 6 layers, hidden 384, 12 heads, FFN 1536, vocab 30522 (MiniLM-L6's shape)

each at B32 L128 (every row full length), in float32 and in bfloat16 compute
(`model.dtype=bfloat16`: params, optimizer state, softmax, LayerNorm statistics and losses
stay float32).

Model FLOPs of one training example (L tokens), forward pass:
  2 * N * L + 4 * layers * L^2 * hidden
where N = 4 hidden^2 + 2 hidden * ffn per layer counts the parameters of the encoder's
matmuls (QKV, attention output, FFN). Embedding lookups do no matmul and the exit head runs on
one token, so both are left out. The second term is attention's QK^T and PV. Training counts
3 forward passes: one forward plus a backward of twice its cost. That is the usual
6 * N * tokens plus attention. MFU = model FLOPs per second / the chip's peak. ACL-Grad does the
same useful work but takes a second backward pass, for the ACL gradient the gate compares with
CE's. So its step costs 5 forward passes, and "hw util" counts all 5.

The peak is the dense tensor-core rate of the compute dtype (table PEAKS, by
`jax.devices()[0].device_kind`). For float32 this is the TF32 rate: XLA's default matmul
precision runs float32 dots on TF32 tensor cores on Ampere and later GPUs, and on bf16 passes on
TPUs. The non-tensor float32 rate (H100/H200: 67 TFLOP/s) is printed beside it, for reference.

Only stable JAX APIs are used (jax.devices, jax.block_until_ready, jax.tree), and every
acl-jax call sits in `build_step`, so this runs on the JAX of a preinstalled accelerator image
(0.10 or 0.11) with flax and optax. It needs no ml_collections, data, tokenizer or weights.
"""
import argparse
import dataclasses
import gc
import os
import platform
import time

import numpy as np

from acl_jax import cpuinfo  # light: no jax

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

NUM_LABELS = 2


@dataclasses.dataclass(frozen=True)
class Shape:
  name: str
  layers: int
  hidden: int
  heads: int
  ffn: int
  batch: int
  seq: int
  vocab: int = 30522

  def matmul_params(self) -> int:
    return self.layers * (4 * self.hidden ** 2 + 2 * self.hidden * self.ffn)

  def forward_flops_per_example(self) -> float:
    return (2.0 * self.matmul_params() * self.seq
            + 4.0 * self.layers * self.seq ** 2 * self.hidden)


SHAPES = {
    "bert_base": Shape("bert_base", 12, 768, 12, 3072, 32, 128),
    "minilm_l6": Shape("minilm_l6", 6, 384, 12, 1536, 32, 128),
}
SMOKE_SHAPES = {"tiny": Shape("tiny", 1, 64, 4, 128, 8, 32, vocab=1000)}
# Forward-pass equivalents of one step: CE = forward + backward (2x); ACL-Grad over all params
# = forward + two backward passes (CE's and the ACL loss's gradient, for the gate's angle).
PASSES = {"ce": 3, "acl_grad": 5}

# Dense peak TFLOP/s per chip: (bf16 tensor, float32 as XLA runs it by default (TF32 tensor on
# NVIDIA Ampere+), float32 non-tensor), from the vendors' data sheets (SXM parts for NVIDIA).
# Matched as substrings of device_kind, first match wins.
PEAKS = (
    ("H200", (989.4, 494.7, 66.9)),
    ("H100 PCIe", (756.0, 378.0, 51.2)),
    ("H100", (989.4, 494.7, 66.9)),
    ("A100", (312.0, 156.0, 19.5)),
    ("L4", (121.0, 60.0, 30.3)),
    ("TPU v6", (918.0, 918.0, None)),
    ("TPU v5p", (459.0, 459.0, None)),
    ("TPU v5 lite", (197.0, 197.0, None)),
    ("TPU v5e", (197.0, 197.0, None)),
    ("TPU v4", (275.0, 275.0, None)),
)


def peak_for(device_kind: str, dtype: str):
  """(peak TFLOP/s, what it is, float32 non-tensor TFLOP/s) for the chip, or Nones."""
  for key, (bf16, f32_default, f32_plain) in PEAKS:
    if key.lower() in device_kind.lower():
      if dtype == "bfloat16":
        return bf16, f"{key} bf16 dense", f32_plain
      return f32_default, f"{key} fp32 (TF32/default precision) dense", f32_plain
  return None, "unknown chip: no peak", None


class _Fields(dict):
  """A dict read by attribute, standing in for the config's `loss` block (the trainer's
  objective builder reads fields by attribute and `.get`)."""
  __getattr__ = dict.__getitem__


# The `loss` block of configs/common.py's base config (SPEC defaults), without ml_collections.
LOSS_DEFAULTS = dict(name="ce", class_weights="", lam=-1.0, combine="", tau=0.3, anchors="all",
                     gate=False, gate_threshold=90.0, gate_mode="drop", angle_params="all",
                     gamma_keep=-1.0, gamma_hide=-1.0, sigma=0.667, sigma_mode="fixed",
                     gloss_form="clean", gloss_global=False, contrastive_global=False,
                     margin=5.0)
OBJECTIVES = {
    "ce": {},
    # The "acl" preset: CE + 0.5 ACL-Embed (tau 0.3), gated by ACL-Grad's angle.
    "acl_grad": dict(name="acl_embed", lam=0.5, tau=0.3, gate=True, angle_params="all"),
}


def build_step(shape: Shape, objective: str, dtype: str, seed: int = 0, dropout: bool = True,
               donate: bool = True):
  """Random-init model, objective, AdamW and the jitted train step, as the trainer builds
  them. Returns (train_step, state, batch, n_params). Every acl-jax call is here.

  `dropout=False` sets every dropout rate to 0 (no mask is hashed) and `donate=False` keeps
  the input state's buffers: `benchmarks/fixed_cost.py` times both against the step as it is.
  """
  # pylint: disable=import-outside-toplevel
  import jax
  from acl_jax.models import Classifier, init_params
  from acl_jax.models.config import EncoderConfig
  from acl_jax.train import objectives, optim, step as step_lib
  from acl_jax.train.state import TrainState

  cfg = EncoderConfig(vocab_size=shape.vocab, hidden_size=shape.hidden, num_layers=shape.layers,
                      num_heads=shape.heads, intermediate_size=shape.ffn,
                      max_position_embeddings=max(512, shape.seq), num_labels=NUM_LABELS,
                      dtype=dtype, **({} if dropout else dict(hidden_dropout=0.0,
                                                             attention_dropout=0.0)))
  model = Classifier(cfg)
  params = init_params(cfg, jax.random.PRNGKey(seed))
  loss_cfg = _Fields({**LOSS_DEFAULTS, **OBJECTIVES[objective]})
  obj = objectives.build_objective(loss_cfg, num_labels=NUM_LABELS, last_exit=cfg.num_layers)
  tx = optim.make_optimizer(lr=2e-5, total_steps=100_000)
  mesh = step_lib.make_mesh()
  state = step_lib.replicate(TrainState.create(params, tx, seed), mesh)
  batch = step_lib.shard_batch(synthetic_batch(shape, seed), mesh)
  n_params = int(sum(x.size for x in jax.tree.leaves(params)))
  return step_lib.make_train_step(model, obj, tx, mesh, donate=donate), state, batch, n_params


def synthetic_batch(shape: Shape, seed: int):
  """B full-length rows of random token ids (no padding: every token is model work)."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(1000 % shape.vocab, shape.vocab, (shape.batch, shape.seq)).astype(np.int32)
  ids[:, 0] = 101 % shape.vocab  # [CLS]
  return {"input_ids": ids, "attention_mask": np.ones_like(ids),
          "token_type_ids": np.zeros_like(ids),
          "labels": rng.integers(0, NUM_LABELS, shape.batch).astype(np.int32)}


def time_one(shape: Shape, objective: str, dtype: str, min_time: float, max_steps: int,
             profile: int = 0):
  """Compiles, warms up, then times steps until `min_time` seconds (at least 5 steps); with
  `profile`, then traces 3 more steps and sums their op time by kind of op
  (benchmarks/profile_step.py), keeping the `profile` top ops."""
  import jax  # pylint: disable=import-outside-toplevel
  t0 = time.perf_counter()
  train_step, state, batch, n_params = build_step(shape, objective, dtype)
  setup_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  state, metrics = train_step(state, batch)
  jax.block_until_ready((state, metrics))
  first_s = time.perf_counter() - t0
  for _ in range(2):
    state, metrics = train_step(state, batch)
  jax.block_until_ready((state, metrics))
  n, t0 = 0, time.perf_counter()
  while n < max_steps and (n < 5 or time.perf_counter() - t0 < min_time):
    state, metrics = train_step(state, batch)
    n += 1
    if n % 5 == 0:
      jax.block_until_ready(metrics)  # keeps the host from queueing far ahead of the device
  jax.block_until_ready((state, metrics))
  elapsed = time.perf_counter() - t0
  loss = float(metrics["loss"])
  out = {"setup_s": setup_s, "first_step_s": first_s, "steps": n, "step_s": elapsed / n,
         "loss": loss, "n_params": n_params}
  if profile:
    out["profile"], state = fixed_cost_profile(train_step, state, batch, profile)
  del state, batch, train_step
  gc.collect()
  return out


def fixed_cost_profile(train_step, state, batch, top: int):
  """What the step costs beyond its ops, in ms (the cost that does not grow with the model).

  Traces 3 steps (`profile_step.trace_step`: op time by kind of op, the `top` longest ops),
  and adds: `ops_per_step` (the traced op events, one per kernel on a GPU) and `op_ms` (their
  summed time), `idle_ms` = traced wall ms/step - op ms: time the device runs no op of the
  step (on a GPU, with one stream, the gaps between kernels: launches the host has not made
  yet, syncs); `host_ms` (the step's call returning, before `block_until_ready`, median of 5)
  and `sync_step_ms` (the call through `block_until_ready`); `null_host_ms`, a call of the
  step's signature that computes nothing (`fixed_cost.null_step`): what the pytree and
  dispatch alone cost; and the compiled step's `ops` (`fixed_cost.op_counts`).
  Returns (that dict, the state after the steps).
  """
  import statistics  # pylint: disable=import-outside-toplevel
  import jax  # pylint: disable=import-outside-toplevel
  from benchmarks import fixed_cost, profile_step  # pylint: disable=import-outside-toplevel
  hlo = train_step.lower(state, batch).compile().as_text()
  ops = fixed_cost.op_counts(hlo)
  state, host, total = fixed_cost.time_calls(train_step, state, batch, 6)
  null = fixed_cost.null_step(donate=False)
  _, null_host, _ = fixed_cost.time_calls(null, state, batch, 6)
  res, wall = profile_step.trace_step(train_step, state, batch, 3, top, hlo, keep_state=True)
  state = res.pop("state")
  op_ms = sum(res["kinds_ms"].values())
  med = lambda xs: 1e3 * statistics.median(xs[1:])  # the first call of each may compile
  jax.block_until_ready(state)
  return {"traced_step_s": wall, "op_ms": op_ms, "idle_ms": 1e3 * wall - op_ms,
          "host_ms": med(host), "sync_step_ms": med(total), "null_host_ms": med(null_host),
          "ops": ops, **res}, state


def torch_case(shape_name: str, case_kind: str, args, left: float, results: list) -> list:
  """Times HF PyTorch's step (`benchmarks/torch_step.py`, in a child process stopped after
  `left` seconds, or `--torch_compile_s` for torch.compile); appends its result to `results`
  and returns its table row."""
  from benchmarks import torch_step  # pylint: disable=import-outside-toplevel
  mode = case_kind.removeprefix("hf_torch_")
  shape = (SMOKE_SHAPES if args.smoke else SHAPES)[shape_name]
  limit = min(left, args.torch_compile_s) if mode == "compile" else left
  min_time, max_steps = (0.5, 6) if args.smoke else (args.min_time, args.max_steps)
  r = torch_step.run_child(shape_name, args.smoke, mode, "bfloat16", min_time, max_steps, limit)
  case = f"{shape_name}/{case_kind}/bfloat16 autocast"
  r.update(case=case, shape=dataclasses.asdict(shape), objective=case_kind, dtype="bfloat16")
  results.append(r)
  if "error" in r:
    print(f"{case}: not timed: {r['error']}", flush=True)
    return [shape_name, case_kind, "bf16 autocast", "n/a", "", "", "", "", "", ""]
  ex_s = shape.batch / r["step_s"]
  model_tflops = 3 * shape.forward_flops_per_example() * ex_s / 1e12
  peak = peak_for(r.get("device", ""), "bfloat16")[0]
  mfu = model_tflops / peak if peak else None
  r.update(examples_per_s=ex_s, model_tflops_per_s=model_tflops, mfu=mfu)
  pct = "n/a" if mfu is None else f"{100 * mfu:.1f}%"
  print(f"{case}: {1000 * r['step_s']:.1f} ms/step, {ex_s:.0f} ex/s, MFU {pct}, first step "
        f"{r['first_step_s']:.1f} s, loss {r['loss']:.4f} (torch {r['torch']})", flush=True)
  return [shape_name, case_kind, "bf16 autocast", f"{1000 * r['step_s']:.1f}", f"{ex_s:.0f}",
          f"{model_tflops:.3g}", pct, pct, f"{r['first_step_s']:.0f}", r["steps"]]


def print_profile(prof: dict) -> None:
  """The fixed cost's lines of one case: wall, op time, idle, host and op counts."""
  wall = 1000 * prof["traced_step_s"]
  ops = prof["ops"]
  print(f"  fixed cost: traced {wall:.1f} ms/step = {prof['op_ms']:.1f} ms in "
        f"{prof['ops_per_step']:.0f} ops + {prof['idle_ms']:.1f} ms with no op running "
        f"({100 * prof['idle_ms'] / wall:.0f}%); host {prof['host_ms']:.2f} ms/call (null "
        f"step {prof['null_host_ms']:.2f}), {prof['sync_step_ms']:.1f} ms/step waited "
        f"for; compiled: {ops['launched']} launched ops "
        f"({', '.join(f'{k} {v}' for k, v in list(ops['by_opcode'].items())[:5])}), "
        f"{ops['while']} while, {ops['collectives']} collectives, custom calls "
        f"{ops['custom_calls'] or 'none'}", flush=True)
  print("  op time by kind, ms/step: " + ", ".join(
      f"{k} {v:.1f}" for k, v in prof["kinds_ms"].items()), flush=True)
  for op, ms in prof["top_ops_ms"].items():
    print(f"  {ms:8.2f} ms  {op}", flush=True)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--smoke", action="store_true",
                  help="tiny shape, few steps: checks the script on any backend in seconds")
  ap.add_argument("--shapes", default="", help=f"comma list of {sorted(SHAPES)}")
  ap.add_argument("--objectives", default="", help=f"comma list of {sorted(PASSES)} (default: "
                  "all)")
  ap.add_argument("--dtypes", default="", help="comma list of bfloat16, float32 (default: both)")
  ap.add_argument("--min_time", type=float, default=3.0, help="seconds timed per case")
  ap.add_argument("--max_steps", type=int, default=200)
  ap.add_argument("--budget", type=float, default=420.0,
                  help="seconds; cases not started by then are skipped (and listed)")
  ap.add_argument("--profile", type=int, nargs="?", const=15, default=0, metavar="TOP",
                  help="also trace 3 steps of each case, print their op time by kind of op "
                  "and the TOP (default 15) longest ops (benchmarks/profile_step.py), and name "
                  "the cost beyond the ops in ms (fixed_cost_profile). Without --objectives "
                  "or --dtypes it runs only the CE bfloat16 cases")
  ap.add_argument("--torch", default=None, help="comma list of HF PyTorch modes to time at "
                  "the first shape (BERT-base), bfloat16 autocast, after the first CE case of "
                  "each shape: eager, compile (torch.compile, stopped at --torch_compile_s); "
                  "'none' for neither. Default: eager,compile; --smoke: eager")
  ap.add_argument("--torch_compile_s", type=float, default=240.0,
                  help="seconds the torch.compile case may take in all, compile included")
  ap.add_argument("--out", default="", help="JSON results path (default benchmarks/results/"
                  "gpu_<device kind>.json, or $OUT/ when OUT is set)")
  args = ap.parse_args(argv)
  start = time.perf_counter()

  import jax  # pylint: disable=import-outside-toplevel
  shapes = SMOKE_SHAPES if args.smoke else SHAPES
  names = [s for s in args.shapes.split(",") if s] or list(shapes)
  unknown = [s for s in names if s not in shapes]
  if unknown:
    ap.error(f"unknown shapes {unknown}; known: {sorted(shapes)}")
  args.explicit = bool(args.objectives or args.dtypes)
  if args.profile and not args.explicit:
    # The fixed-cost check: the CE bf16 step at each shape, profiled (about 5 minutes).
    args.objectives, args.dtypes, args.explicit = "ce", "bfloat16", True
  objs = [o for o in args.objectives.split(",") if o] or list(PASSES)
  dtypes = [d for d in args.dtypes.split(",") if d] or ["bfloat16", "float32"]
  if args.torch is None:
    args.torch = "eager" if args.smoke else "eager,compile"
  torch_modes = [m for m in args.torch.split(",") if m and m != "none"]
  if any(m not in ("eager", "compile") for m in torch_modes):
    ap.error(f"--torch: eager, compile or none, not {args.torch}")
  bad = [o for o in objs if o not in PASSES] + [d for d in dtypes
                                                 if d not in ("float32", "bfloat16")]
  if bad:
    ap.error(f"unknown objectives/dtypes {bad}; objectives {sorted(PASSES)}, dtypes "
             "float32, bfloat16")
  min_time, max_steps = (0.5, 6) if args.smoke else (args.min_time, args.max_steps)

  dev = jax.devices()[0]
  kind = dev.device_kind
  info = {"device_kind": kind, "platform": dev.platform, "device_count": jax.device_count(),
          "jax": jax.__version__, "python": platform.python_version(),
          "matmul_precision": str(getattr(jax.config, "jax_default_matmul_precision", "?")),
          "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
          # the host CPU's family, model and vector ISA: a CPU backend's numbers are its
          "cpu": cpuinfo.describe()}
  for mod in ("jaxlib", "flax", "optax"):
    try:
      info[mod] = __import__(mod).__version__
    except (ImportError, AttributeError):
      info[mod] = "?"
  print(f"# {kind} x{jax.device_count()} ({dev.platform}), jax {info['jax']}, "
        f"flax {info['flax']}, optax {info['optax']}", flush=True)

  # CE before ACL-Grad and bf16 before fp32, both shapes each time: if compiles run long and
  # the budget skips the last cases, what is lost is the least asked-for.
  cases = [(s, o, d) for o in objs for d in dtypes for s in names]
  if args.smoke and not args.explicit:
    # Each objective and each dtype once: two compiles keep the check under a minute.
    cases = [(names[0], "ce", "bfloat16"), (names[0], "acl_grad", "float32")]
  # HF PyTorch at the first shape, bf16 autocast: eager right after the first objective and
  # dtype at every shape (the comparison on the same GPU in the same run, before the budget
  # can skip it); torch.compile last, in what the budget has left.
  at = min(len(names), len(cases))
  cases[at:at] = [(names[0], "hf_torch_eager", "bfloat16")] if "eager" in torch_modes else []
  if "compile" in torch_modes:
    cases.append((names[0], "hf_torch_compile", "bfloat16"))
  rows, results, skipped = [], [], []
  for shape_name, obj, dtype in cases:
    shape = shapes[shape_name]
    case = f"{shape_name}/{obj}/{dtype}"
    left = args.budget - (time.perf_counter() - start)
    if left <= 0:
      skipped.append(case)
      continue
    if obj.startswith("hf_torch_"):
      rows.append(torch_case(shape_name, obj, args, left, results))
      continue
    try:
      r = time_one(shape, obj, dtype, min_time, max_steps, args.profile)
    except Exception as e:  # pylint: disable=broad-except
      # One case failing (say, out of memory) must not lose the others' numbers.
      print(f"{case}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
      results.append({"case": case, "error": f"{type(e).__name__}: {e}"[:2000]})
      continue
    ex_s = shape.batch / r["step_s"]
    fwd = shape.forward_flops_per_example()
    model_tflops = 3 * fwd * ex_s / 1e12
    hw_tflops = PASSES[obj] * fwd * ex_s / 1e12
    peak, peak_name, f32_plain = peak_for(kind, dtype)
    mfu = model_tflops / peak if peak else None
    hfu = hw_tflops / peak if peak else None
    r.update(case=case, shape=dataclasses.asdict(shape), objective=obj, dtype=dtype,
             examples_per_s=ex_s, model_tflops_per_s=model_tflops,
             step_tflops_per_s=hw_tflops, peak_tflops=peak, peak=peak_name, mfu=mfu,
             hw_util=hfu, fp32_non_tensor_peak_tflops=f32_plain)
    results.append(r)
    pct = lambda x: "n/a" if x is None else f"{100 * x:.1f}%"
    rows.append([shape_name, obj, dtype, f"{1000 * r['step_s']:.1f}", f"{ex_s:.0f}",
                 f"{model_tflops:.3g}", pct(mfu), pct(hfu), f"{r['first_step_s']:.0f}",
                 r["steps"]])
    print(f"{case}: {1000 * r['step_s']:.1f} ms/step, {ex_s:.0f} ex/s, "
          f"{model_tflops:.3g} model TFLOP/s, MFU {pct(mfu)} of {peak_name}, "
          f"compile+first step {r['first_step_s']:.1f} s, loss {r['loss']:.4f}",
          flush=True)
    if "profile" in r:
      print_profile(r["profile"])

  from benchmarks import common  # pylint: disable=import-outside-toplevel
  print()
  print(common.markdown_table(
      ["shape", "objective", "dtype", "ms/step", "examples/s", "model TFLOP/s", "MFU",
       "hw util", "first step s", "steps"], rows))
  peaks = {d: peak_for(kind, d)[1] for d in dtypes}
  sizes = sorted({f"B{shapes[n].batch} L{shapes[n].seq}" for n in names})
  print(f"\n{', '.join(sizes)}. MFU: 6*N*tokens + attention FLOPs per second over the peak "
        f"({'; '.join(f'{d}: {p}' for d, p in peaks.items())}). hw util also counts "
        "ACL-Grad's second backward pass.")
  if skipped:
    print(f"Skipped, over the {args.budget:.0f} s budget: {', '.join(skipped)}")
  out = args.out
  if not out:
    folder = os.environ.get("OUT") or os.path.join(REPO, "benchmarks", "results")
    safe = "".join(c if c.isalnum() else "_" for c in kind).strip("_").lower()
    out = os.path.join(folder, f"gpu_{safe}{'_smoke' if args.smoke else ''}.json")
  common.write_json(out, {"command": common.command_line(), "info": info, "results": results,
                          "skipped": skipped,
                          "wall_s": time.perf_counter() - start})
  print(f"Wrote {out} ({time.perf_counter() - start:.0f} s in all)")


if __name__ == "__main__":
  main()
