r"""What a train step costs beside its FLOPs: host time per call, op counts, and the A/Bs.

  python -m benchmarks.fixed_cost                      # MiniLM-L6 and BERT-base shapes, B8 L32
  python -m benchmarks.fixed_cost --shapes minilm_l6 --batch 32 --seq 128 --profile

The CE train step of `benchmarks/gpu_step.py` (random init, AdamW, dropout on, the jitted
`shard_map` step the trainer runs) at each encoder shape, on whatever backend JAX starts (CPU
here; a GPU runs it unchanged). For each shape it measures, in one process:

- **host ms/call**: from calling the step to its call returning, before
  `block_until_ready`. JAX dispatches asynchronously (XLA:CPU too, unless
  `host_heap.managed()` turned that off), so this is the host's own work per step: Python,
  pytree flattening, argument checks, donation and the executable's launch. **step ms** is
  the call through `block_until_ready`.
- the same for A/B variants, timed in alternating repetitions: dropout off (every rate 0: no
  mask is hashed), no collectives (`without_collectives`: the one-device step without its
  `pmean`s, which XLA:CPU runs as an all-reduce that copies every gradient), donation off,
  and a **null step** with the step's exact signature (the
  whole state and batch in, a new state and a metrics dict out) that computes nothing but
  `step + 1`: its host time is the floor that the pytree and the dispatch alone cost.
- the train loop's own work per step beside the step (`acl_jax/train/loop.py`):
  `step.shard_batch` of a host batch, and `DeviceSums.add`, the on-device train log (one
  small jitted update, no transfer). The loop fetches to the host only every `log_every`
  steps.
- the compiled step's ops (`op_counts`): top-level instructions by opcode (each fusion,
  dot, copy or collective is one launch on a GPU, one thunk on XLA:CPU), `while` loops,
  custom calls by target (a host callback would show here), and the StableHLO op count
  before XLA's passes. Fusion on a GPU differs from XLA:CPU's, so the counts are an order
  of magnitude, not a GPU kernel count.
- with `--profile`, a `jax.profiler` trace of 3 steps summed by kind of op
  (`benchmarks/profile_step.py`): the shares of dropout, the embedding gradient, the
  collectives and the rest.

It writes JSON (`benchmarks/results/fixed_cost_<cpu kind or device>.json`) and prints Markdown.
"""
import argparse
import collections
import contextlib
import dataclasses
import functools
import gc
import os
import re
import statistics
import time
from unittest import mock

from benchmarks import common, gpu_step

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Instructions that launch nothing: they name, view or bundle buffers.
FREE_OPS = ("parameter", "get-tuple-element", "bitcast", "constant", "tuple")


def op_counts(hlo_text: str) -> dict:
  """Counts of a compiled module's ops (XLA's optimized HLO text).

  Returns:
    {"launched": top-level instructions of the entry computation that do work (not a
     parameter, tuple element, bitcast, constant or tuple), "by_opcode": those by opcode,
     "while": `while` loops anywhere, "custom_calls": custom-call targets anywhere with their
     counts, "collectives": all-reduce/all-gather/reduce-scatter/all-to-all/
     collective-permute anywhere}.
  """
  comps = re.split(r"\n(?=\S)", hlo_text)
  entry = next((c for c in comps if c.startswith("ENTRY")), "")
  pat = r"^\s*(?:ROOT )?%[\w.\-]+ = .*? ([a-z][a-z\-]*)\("
  ops = collections.Counter(m.group(1) for m in re.finditer(pat, entry, re.M))
  launched = {k: v for k, v in ops.items() if k not in FREE_OPS}
  every = collections.Counter(m.group(1) for m in re.finditer(pat, hlo_text, re.M))
  targets = collections.Counter(re.findall(r'custom_call_target="([^"]+)"', hlo_text))
  coll = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
          "all-reduce-start", "all-gather-start", "collective-permute-start")
  return {"launched": sum(launched.values()),
          "by_opcode": dict(collections.Counter(launched).most_common()),
          "while": every["while"], "custom_calls": dict(targets),
          "collectives": sum(every[c] for c in coll)}


def stablehlo_ops(lowered_text: str) -> int:
  """StableHLO ops of a lowered (not yet optimized) module."""
  return len(re.findall(r"= stablehlo\.|^\s*stablehlo\.", lowered_text, re.M))


def null_step(donate: bool = True):
  """A jitted step of the train step's signature that does no model work: the state comes
  back with `step + 1` (every other buffer passed through, donated) and a metrics dict of a
  scalar. Its host time is what the call costs with nothing to compute."""
  import jax  # pylint: disable=import-outside-toplevel

  def step(state, batch):
    return state.replace(step=state.step + 1), {"loss": batch["labels"].sum() * 0.0}
  return jax.jit(step, donate_argnums=(0,) if donate else ())


@contextlib.contextmanager
def without_collectives():
  """While open, `step.make_train_step` builds its step without collectives: `lax.pmean`
  returns its operand and `shard_map` runs unchecked (`check_vma=False`, so the gradients'
  device-varying type need not become invariant, which only the pmean does). On one device
  the mean over the data axis is the value itself, so the step computes the same; this is
  what a one-device special case of the step would save (tests/test_gpu_step.py checks that
  its first step's state is the same bit for bit)."""
  import jax  # pylint: disable=import-outside-toplevel
  from acl_jax.train import step as step_lib  # pylint: disable=import-outside-toplevel
  with mock.patch.object(step_lib.jax, "shard_map",
                         functools.partial(jax.shard_map, check_vma=False)), \
      mock.patch.object(step_lib.lax, "pmean", lambda x, axis_name: x):
    yield


def time_calls(fn, state, batch, steps: int):
  """Runs `steps` calls of `fn(state, batch) -> (state, metrics)`, each waited for before the
  next. Returns (state, host seconds per call, seconds per step through block_until_ready)."""
  import jax  # pylint: disable=import-outside-toplevel
  host, total = [], []
  for _ in range(steps):
    t0 = time.perf_counter()
    state, metrics = fn(state, batch)
    t1 = time.perf_counter()
    jax.block_until_ready((state, metrics))
    t2 = time.perf_counter()
    host.append(t1 - t0)
    total.append(t2 - t0)
  return state, host, total


def time_loop_extras(shape, state_metrics, reps: int) -> dict:
  """Host and total ms of the loop's per-step work beside the step: `shard_batch` of a host
  batch and `DeviceSums.add` of the step's metrics (medians over `reps` calls)."""
  import jax  # pylint: disable=import-outside-toplevel
  from acl_jax.train import step as step_lib  # pylint: disable=import-outside-toplevel
  from acl_jax.train.train_log import DeviceSums  # pylint: disable=import-outside-toplevel
  mesh = step_lib.make_mesh()
  host_batch = gpu_step.synthetic_batch(shape, 1)
  sums = DeviceSums()
  sums.add(state_metrics, 1)  # compiles the update
  jax.block_until_ready(sums.acc)
  out = {"shard_batch": ([], []), "train_log_add": ([], [])}
  for i in range(reps):
    t0 = time.perf_counter()
    b = step_lib.shard_batch(host_batch, mesh)
    t1 = time.perf_counter()
    jax.block_until_ready(b)
    t2 = time.perf_counter()
    sums.add(state_metrics, i + 2)
    t3 = time.perf_counter()
    jax.block_until_ready(sums.acc)
    t4 = time.perf_counter()
    out["shard_batch"][0].append(t1 - t0)
    out["shard_batch"][1].append(t2 - t0)
    out["train_log_add"][0].append(t3 - t2)
    out["train_log_add"][1].append(t4 - t2)
  return {k: {"host_ms": 1e3 * statistics.median(h), "total_ms": 1e3 * statistics.median(t)}
          for k, (h, t) in out.items()}


VARIANTS = ("step", "no dropout", "no collectives", "no donation", "null step")


def measure_shape(shape, dtype: str, reps: int, steps: int, profile: int,
                  counts_only: bool = False, which: tuple[str, ...] = VARIANTS) -> dict:
  """Every measurement of one shape (module docstring); the variants alternate over `reps`
  repetitions of `steps` steps each, after one warm-up call each. `counts_only`: compile
  the step with and without dropout and count their ops; nothing runs."""
  res = {"shape": dataclasses.asdict(shape), "dtype": dtype}
  variants = {}
  kinds = (("step", {}), ("no dropout", {"dropout": False}), ("no collectives", {}),
           ("no donation", {"donate": False}))
  for name, kw in kinds:
    if name not in which or (counts_only and name == "no donation"):
      continue
    with without_collectives() if name == "no collectives" else contextlib.nullcontext():
      fn, state, batch, n_params = gpu_step.build_step(shape, "ce", dtype, **kw)
      t0 = time.perf_counter()
      lowered = fn.lower(state, batch)
      lower_s = time.perf_counter() - t0
      compiled = lowered.compile()
      compile_s = time.perf_counter() - t0 - lower_s
      if not counts_only:  # traced here, under the patch; later calls reuse the executable
        state, _, _ = time_calls(fn, state, batch, 1)
    counts = op_counts(compiled.as_text())
    counts["stablehlo"] = stablehlo_ops(lowered.as_text())
    variants[name] = {"fn": fn, "state": state, "batch": batch, "lower_s": lower_s,
                      "compile_s": compile_s, "ops": counts}
    res["n_params"] = n_params
  if counts_only:
    res["variants"] = {name: {k: v[k] for k in ("lower_s", "compile_s", "ops")}
                       for name, v in variants.items()}
    return res
  base = variants["step"]
  if "null step" in which:
    variants["null step"] = null = {"fn": null_step(), "state": gpu_step.build_step(
        shape, "ce", dtype)[1], "batch": base["batch"], "ops": None}
    null["state"], _, _ = time_calls(null["fn"], null["state"], base["batch"], 1)
  for v in variants.values():
    v["host"], v["total"] = [], []
  for _ in range(reps):
    for v in variants.values():
      v["state"], host, total = time_calls(v["fn"], v["state"], v["batch"], steps)
      v["host"] += host
      v["total"] += total
  _, metrics = base["fn"](base["state"], base["batch"])
  base["state"] = None  # donated to the call above
  res["loop_extras"] = time_loop_extras(shape, metrics, max(5, reps * steps))
  res["variants"] = {}
  for name, v in variants.items():
    res["variants"][name] = {
        "host_ms": 1e3 * statistics.median(v["host"]),
        "step_ms": 1e3 * statistics.median(v["total"]),
        "host_ms_all": [1e3 * x for x in v["host"]], "step_ms_all": [1e3 * x for x in v["total"]],
        **{k: v[k] for k in ("lower_s", "compile_s", "ops") if k in v}}
  variants.clear()  # each holds a state: free them before the profile builds its own
  gc.collect()
  if profile:
    from benchmarks import profile_step  # pylint: disable=import-outside-toplevel
    fn, state, batch, _ = gpu_step.build_step(shape, "ce", dtype)
    prof, wall = profile_step.trace_step(fn, state, batch, 3, profile)
    res["profile"] = {"traced_step_ms": 1e3 * wall, **prof}
  return res


def report(results: list[dict]) -> str:
  """Markdown: per shape and variant, host ms/call, step ms and the compiled step's ops."""
  rows = []
  for r in results:
    s = r["shape"]
    label = f"{s['name']} ({s['layers']}L h{s['hidden']}) B{s['batch']} L{s['seq']}"
    for name, v in r["variants"].items():
      ops = v.get("ops") or {}
      timed = "host_ms" in v
      rows.append([label, name, f"{v['host_ms']:.2f}" if timed else "",
                   f"{v['step_ms']:.1f}" if timed else "",
                   f"{100 * v['host_ms'] / v['step_ms']:.1f}%" if timed else "",
                   ops.get("launched", ""), ops.get("by_opcode", {}).get("fusion", ""),
                   ops.get("by_opcode", {}).get("copy", ""), ops.get("while", ""),
                   ops.get("collectives", ""), sum(ops.get("custom_calls", {}).values())
                   if ops else "", ops.get("stablehlo", "")])
    for name, v in r.get("loop_extras", {}).items():
      rows.append([label, f"loop: {name}", f"{v['host_ms']:.2f}", f"{v['total_ms']:.2f}",
                   "", "", "", "", "", "", "", ""])
  out = common.markdown_table(
      ["shape", "variant", "host ms/call", "step ms", "host share", "launched ops",
       "fusions", "copies", "while", "collectives", "custom calls", "StableHLO ops"], rows)
  for r in results:
    if "profile" in r:
      p = r["profile"]
      total = sum(p["kinds_ms"].values())
      out += (f"\n\n{r['shape']['name']}: traced {p['traced_step_ms']:.1f} ms/step, op time "
              f"{total:.1f} ms/step: " + ", ".join(
                  f"{k} {v:.1f} ({100 * v / total:.1f}%)" for k, v in p["kinds_ms"].items()))
  return out


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--shapes", default="minilm_l6,bert_base",
                  help=f"comma list of {sorted(gpu_step.SHAPES)}, "
                  f"{sorted(gpu_step.SMOKE_SHAPES)}")
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--seq", type=int, default=32)
  ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
  ap.add_argument("--reps", type=int, default=3, help="alternating repetitions")
  ap.add_argument("--steps", type=int, default=3, help="steps per variant and repetition")
  ap.add_argument("--profile", type=int, default=0, metavar="TOP",
                  help="also trace 3 steps of the step as it is and sum op time by kind")
  ap.add_argument("--variants", default=",".join(VARIANTS),
                  help="comma list of the variants to time (\"step\" always runs); each "
                  "holds a train state: BERT-base's take 1.3 GB each in float32")
  ap.add_argument("--counts_only", action="store_true",
                  help="only compile the step (with and without dropout) and count its ops: "
                  "for the accelerator's shapes, too slow to run here")
  ap.add_argument("--out", default="")
  args = ap.parse_args(argv)
  import jax  # pylint: disable=import-outside-toplevel
  shapes = {**gpu_step.SHAPES, **gpu_step.SMOKE_SHAPES}
  names = [s for s in args.shapes.split(",") if s]
  if any(s not in shapes for s in names):
    ap.error(f"unknown shape in {names}; known: {sorted(shapes)}")
  info = common.machine_info(REPO)
  dev = jax.devices()[0]
  where = common.cpu_kind() if dev.platform == "cpu" else dev.device_kind
  print(f"# {where}, {dev.platform} x{jax.device_count()}, jax {jax.__version__}; load "
        f"average at start {info['load_average_start']}", flush=True)
  results = []
  for n in names:
    shape = dataclasses.replace(shapes[n], batch=args.batch, seq=args.seq)
    which = ("step", *(v.strip() for v in args.variants.split(",") if v.strip()))
    results.append(measure_shape(shape, args.dtype, args.reps, args.steps, args.profile,
                                 args.counts_only, which))
    print(f"{n}: done", flush=True)
  print(report(results))
  out = args.out
  if not out:
    from acl_jax import cpuinfo  # pylint: disable=import-outside-toplevel
    tag = (cpuinfo.kind() if dev.platform == "cpu"
           else "".join(c if c.isalnum() else "_" for c in dev.device_kind).lower())
    out = os.path.join(REPO, "benchmarks", "results", f"fixed_cost_{tag}.json")
  common.write_json(out, {"command": common.command_line(), "machine": info,
                          "backend": {"platform": dev.platform, "device": dev.device_kind,
                                      "jax": jax.__version__},
                          "settings": vars(args), "results": results})
  print(f"wrote {out}")


if __name__ == "__main__":
  main()
