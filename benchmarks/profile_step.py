r"""Where the CE train step spends its time: a jax.profiler trace, summed by kind of op.

  python -m benchmarks.profile_step --seq 64 --steps 3 --top 25

Compiles the jitted `shard_map` CE step of `acl_jax.train` (MiniLM-L6 or, with `--model mpnet`,
all-mpnet-base-v2: real weights, B32, dropout on), traces `--steps` steps with `jax.profiler`, and joins each XLA op of the trace to
its `op_name` in the compiled HLO. It prints the summed time per kind of op (matmuls, dropout
RNG, layout copies, GELU, LayerNorm, softmax, embedding gradient, MPNet's relative position
bias, collectives, optimizer, other) and the `--top` single ops, per step. It writes the same as JSON to `benchmarks/results/`.

Read the shares, not the sums: XLA:CPU may run independent thunks at the same time (plain
Eigen dots run asynchronously and show only their dispatch), so per-op durations can overlap
and their total need not equal the wall time, which is printed too.
"""
import argparse
import collections
import glob
import gzip
import json
import os
import re
import tempfile
import time

from benchmarks import common

# (kind, test on the op's name in the trace, its HLO op_name and its result type), first match.
KINDS = (
    ("matmul", lambda name, op, ty: name.startswith("dot") or (
        name.startswith(("ynn_fusion", "custom-call")) and "dot_general" in op)),
    ("embedding grad", lambda name, op, ty: "word_embeddings" in op and "transpose(" in op),
    # MPNet: the shared [buckets, heads] table's lookup into every score and its gradient.
    ("relative bias", lambda name, op, ty: "relative_attention_bias" in op),
    ("dropout RNG", lambda name, op, ty: "Dropout" in op and ty.startswith("u32")),
    ("dropout apply", lambda name, op, ty: "Dropout" in op),
    ("GELU", lambda name, op, ty: "erf" in op or "/mlp/mul" in op),
    ("layout copy", lambda name, op, ty: name.startswith(("copy", "transpose")) or
     "squeeze" in op or "/transpose" in op or "pad" in name),
    ("LayerNorm", lambda name, op, ty: "LayerNorm" in op),
    ("softmax", lambda name, op, ty: "attention" in op and any(
        s in op for s in ("reduce_max", "exp", "softmax", "div", "reduce_sum"))),
    # shard_map's psum/pmean; on one device XLA:CPU keeps them, as copies of their operands.
    ("collective", lambda name, op, ty: name.startswith(
        ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute"))
     or re.search(r"/(psum|pmean|all_gather)[\w]*$", op) is not None),
    ("optimizer", lambda name, op, ty: "jvp(" not in op and "transpose(" not in op),
)


def hlo_op_names(hlo_text: str) -> dict[str, tuple[str, str]]:
  """Instruction name -> (op_name metadata, result type) for every instruction of the HLO."""
  out = {}
  for m in re.finditer(r"^\s*(?:ROOT )?%([\w.\-]+) = (\S+) (.*)$", hlo_text, re.M):
    op = re.search(r'op_name="([^"]*)"', m.group(3))
    out[m.group(1)] = (op.group(1) if op else "", m.group(2))
  return out


def kind_of(name: str, op: str, ty: str) -> str:
  for kind, test in KINDS:
    if test(name, op, ty):
      return kind
  return "other"


def summarize(trace_file: str, names: dict, steps: int, top: int) -> dict:
  with gzip.open(trace_file) as f:
    every = json.load(f)["traceEvents"]
  # On an accelerator the host's threads also log events named by HLO instructions (the
  # launches); only the device's own (its processes are named "/device:GPU:0" and the like)
  # are op time. XLA:CPU runs its ops on host threads: all of them count there.
  devices = {e["pid"] for e in every if e.get("ph") == "M" and e.get("name") == "process_name"
             and re.match(r"/device:(GPU|TPU)", e.get("args", {}).get("name", ""))}
  events = [e for e in every if e.get("ph") == "X" and (not devices or e.get("pid") in devices)]
  kinds, ops = collections.Counter(), collections.Counter()
  for e in events:
    # XLA:CPU names an op's event by its HLO instruction; a GPU kernel's event (a cuBLAS
    # kernel, say) carries the instruction in its "hlo_op" argument.
    name = e["name"] if e["name"] in names else e.get("args", {}).get("hlo_op", "")
    if name not in names:
      continue
    op, ty = names[name]
    ms = e["dur"] / 1e3 / steps
    kinds[kind_of(name, op, ty)] += ms
    short = re.sub(r"layer_\d+", "layer_N", op.replace("jit(per_device)/", ""))
    base = re.sub(r"[.]\d+$", "", name)
    ops[f"{base} {ty} {short[-90:]}"] += ms
  return {"kinds_ms": dict(kinds.most_common()), "top_ops_ms": dict(ops.most_common(top)),
          "ops_per_step": sum(1 for e in events if e["name"] in names or e.get(
              "args", {}).get("hlo_op", "") in names) / steps}


def trace_step(fn, state, batch, steps: int, top: int, hlo_text: str | None = None,
               keep_state: bool = False) -> tuple[dict, float]:
  """Runs the jitted `fn(state, batch) -> (state, metrics)` once, then traces `steps` steps:
  (`summarize`'s per-kind and top-op times per step, wall seconds per traced step). The
  state is donated: the caller's `state` is spent; with `keep_state` the new one is returned
  as the dict's "state". `hlo_text`: the compiled step's HLO, when the caller has it (else
  the step is compiled once more to read it)."""
  import jax  # pylint: disable=import-outside-toplevel
  names = hlo_op_names(hlo_text or fn.lower(state, batch).compile().as_text())
  state, _ = fn(state, batch)
  jax.block_until_ready(state)
  with tempfile.TemporaryDirectory() as tmp:
    jax.profiler.start_trace(tmp)
    start = time.perf_counter()
    for _ in range(steps):
      state, _ = fn(state, batch)
      jax.block_until_ready(state)
    wall = (time.perf_counter() - start) / steps
    jax.profiler.stop_trace()
    trace = glob.glob(os.path.join(tmp, "**", "*.trace.json.gz"), recursive=True)
    if not trace:
      raise SystemExit("jax.profiler wrote no *.trace.json.gz; is the profiler plugin intact?")
    res = summarize(trace[0], names, steps, top)
    if keep_state:
      res["state"] = state
    return res, wall


def ce_step(model_name: str, batch: int, seq: int):
  """The jitted CE train step of a pretrained benchmark model (`common.model_spec`: "minilm"
  or "mpnet"; 2 labels, AdamW) on one synthetic batch: (step_fn, state, sharded_batch)."""
  from acl_jax.models import load_pretrained  # pylint: disable=import-outside-toplevel
  from acl_jax.train import setup as setup_lib, step as step_lib  # pylint: disable=import-outside-toplevel
  from configs.common import base_config  # pylint: disable=import-outside-toplevel
  spec, folder = common.model_spec(model_name)
  if folder is None:
    raise SystemExit(f"--model {model_name}: a random-init model; profile a pretrained one "
                     "(minilm, mpnet).")
  mesh = step_lib.make_mesh()
  data = step_lib.shard_batch(common.synthetic_batch(
      common.Shape(model_name, batch, seq), spec["vocab_size"], 0), mesh)
  model, params, _ = load_pretrained(folder, 2, with_tokenizer=False)
  tr = setup_lib.make_trainer(base_config(), model, params, mesh, num_labels=2,
                              total_steps=1000)
  return tr.train_step, tr.state, data


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--model", default="minilm", choices=("minilm", "mpnet"),
                 help="mpnet: all-mpnet-base-v2 (python -m acl_jax.weights all-mpnet-base-v2)")
  p.add_argument("--seq", type=int, default=64)
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--steps", type=int, default=3)
  p.add_argument("--top", type=int, default=25)
  p.add_argument("--out", default=None, help="JSON path (default benchmarks/results/"
                 "profile_step_L<seq>.json, profile_step_mpnet_L<seq>.json for MPNet)")
  a = p.parse_args()
  info = common.machine_info(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  fn, state, batch = ce_step(a.model, a.batch, a.seq)
  res, wall = trace_step(fn, state, batch, a.steps, a.top)
  total = sum(res["kinds_ms"].values())
  label = {"minilm": "MiniLM-L6", "mpnet": "MPNet-base"}[a.model]
  print(f"{label} B{a.batch} L{a.seq}: wall {wall * 1e3:.0f} ms/step (traced), "
        f"summed op time {total:.0f} ms/step; load average at start {info['load_average_start']}")
  print("| kind | ms/step | share |\n|---|---|---|")
  for k, v in res["kinds_ms"].items():
    print(f"| {k} | {v:.1f} | {100 * v / total:.1f}% |")
  print(f"\nTop {a.top} ops (instruction, result type, op_name), ms/step:")
  for k, v in res["top_ops_ms"].items():
    print(f"{v:8.1f}  {k}")
  out = a.out or os.path.join("benchmarks", "results", "profile_step_"
                              f"{'' if a.model == 'minilm' else a.model + '_'}L{a.seq}.json")
  os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
  with open(out, "w") as f:
    json.dump({"command": common.command_line(), "machine": info, "wall_s_per_step": wall,
               **res}, f, indent=1)
  print(f"wrote {out}")


if __name__ == "__main__":
  main()
