r"""bfloat16 against float32 GEMMs in XLA:CPU, at a base-size train step's dense shapes.

  python -m benchmarks.bf16_dots --reps 5

For each dense layer of a 12-layer, hidden-768 encoder at B32 L128 (4096 tokens: QKV, attention
output, FFN in, FFN out), the three products of its train step: the forward `x @ W` (NN), the
input gradient `g @ W^T` (NT) and the kernel gradient `x^T @ g` (TN), each a jitted
`lax.dot_general` timed alone, in three forms:

  float32        float32 operands and result (the default step);
  bf16           bfloat16 operands and result, as `nn.Dense(dtype=bfloat16)` asks for it;
  bf16, f32 acc  bfloat16 operands, `preferred_element_type=float32`, the result cast to
                 bfloat16 (what a bf16 step could ask for instead).

For the kernel gradient it also times, in bfloat16 with a float32 result, the same product
with the operands transposed in memory first (held apart by `lax.optimization_barrier`, so
XLA cannot fold the transpose back into the dot): `x^T` copied, then an NN product (`xT NN`),
and both copied, then an NT product (`xT gT NT`).

The forms alternate within each repetition; medians. It prints GFLOP/s per product and form and
the whole step's dense GEMM time in each (every product x 12 layers), and writes them as JSON
with the machine (CPU family, model and ISA).
"""
import argparse
import os
import statistics
import time

from benchmarks import common

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENS, HIDDEN, FFN, LAYERS = 32 * 128, 768, 3072, 12
DENSE = {"qkv": (HIDDEN, 3 * HIDDEN), "attn out": (HIDDEN, HIDDEN), "ffn in": (HIDDEN, FFN),
         "ffn out": (FFN, HIDDEN)}
# (name, lhs shape, rhs shape, contracting dims) of a dense layer with fin -> fout
PRODUCTS = (("fwd x@W (NN)", lambda i, o: ((TOKENS, i), (i, o), ((1,), (0,)))),
            ("dx g@W^T (NT)", lambda i, o: ((TOKENS, o), (i, o), ((1,), (1,)))),
            ("dW x^T@g (TN)", lambda i, o: ((TOKENS, i), (TOKENS, o), ((0,), (0,)))))
FORMS = ("float32", "bf16", "bf16, f32 acc")
TN_FORMS = ("xT NN", "xT gT NT")  # bf16, f32 acc, the kernel gradient's operands copied


def dot_fn(form: str, contract):
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  dims = (contract, ((), ()))
  barrier = jax.lax.optimization_barrier
  if form == "xT NN":
    return jax.jit(lambda x, g: jax.lax.dot_general(
        barrier(x.T), g, (((1,), (0,)), ((), ())),
        preferred_element_type=jnp.float32).astype(jnp.bfloat16))
  if form == "xT gT NT":
    return jax.jit(lambda x, g: jax.lax.dot_general(
        *barrier((x.T, g.T)), (((1,), (1,)), ((), ())),
        preferred_element_type=jnp.float32).astype(jnp.bfloat16))
  if form == "bf16, f32 acc":
    return jax.jit(lambda a, b: jax.lax.dot_general(
        a, b, dims, preferred_element_type=jnp.float32).astype(jnp.bfloat16))
  return jax.jit(lambda a, b: jax.lax.dot_general(a, b, dims))


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--reps", type=int, default=5)
  p.add_argument("--out", default="", help="JSON path (default benchmarks/results/"
                 "bf16_dots_<vendor>_f<family>m<model>.json)")
  a = p.parse_args()
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  info = common.machine_info(REPO)
  rng = np.random.default_rng(0)
  cases = []
  for layer, (fin, fout) in DENSE.items():
    for prod, shapes in PRODUCTS:
      ls, rs, contract = shapes(fin, fout)
      lhs, rhs = rng.standard_normal(ls, np.float32), rng.standard_normal(rs, np.float32)
      forms = FORMS + (TN_FORMS if contract == ((0,), (0,)) else ())
      args = {f: (jnp.asarray(lhs, jnp.float32 if f == "float32" else jnp.bfloat16),
                  jnp.asarray(rhs, jnp.float32 if f == "float32" else jnp.bfloat16))
              for f in forms}
      fns = {f: dot_fn(f, contract) for f in forms}
      for f in forms:
        jax.block_until_ready(fns[f](*args[f]))
      times = {f: [] for f in forms}
      for _ in range(a.reps):
        for f in forms:
          start = time.perf_counter()
          jax.block_until_ready(fns[f](*args[f]))
          times[f].append(time.perf_counter() - start)
      flops = 2.0 * TOKENS * fin * fout
      cases.append({"layer": layer, "product": prod, "gflop": flops / 1e9,
                    "seconds": {f: statistics.median(t) for f, t in times.items()}})
  print(f"{common.cpu_kind()}; B32 L128, hidden {HIDDEN}, FFN {FFN}; median of {a.reps}\n")
  print("| layer | product | " + " | ".join(f"{f} GFLOP/s" for f in FORMS) + " |")
  print("|---|---|" + "---|" * len(FORMS))
  for c in cases:
    print(f"| {c['layer']} | {c['product']} | " + " | ".join(
        f"{c['gflop'] / c['seconds'][f]:.0f}" for f in FORMS) + " |")
  step = {f: LAYERS * sum(c["seconds"][f] for c in cases) for f in FORMS}
  by_product = {prod: {f: LAYERS * sum(c["seconds"][f] for c in cases if c["product"] == prod)
                       for f in FORMS} for prod, _ in PRODUCTS}
  print("\nThe step's dense GEMMs (x 12 layers), s: " + ", ".join(
      f"{f} {s:.2f}" for f, s in step.items()))
  for prod, s in by_product.items():
    print(f"  {prod}: " + ", ".join(f"{f} {v:.2f}" for f, v in s.items()))
  tn = [c for c in cases if TN_FORMS[0] in c["seconds"]]
  tn_s = {f: LAYERS * sum(c["seconds"][f] for c in tn) for f in ("bf16, f32 acc",) + TN_FORMS}
  print("\nThe kernel gradient, bf16 with a float32 result, its operands copied first, GFLOP/s:")
  for c in tn:
    print(f"  {c['layer']}: " + ", ".join(
        f"{f} {c['gflop'] / c['seconds'][f]:.0f}" for f in tn_s))
  print("  x 12 layers, s: " + ", ".join(f"{f} {v:.2f}" for f, v in tn_s.items()))
  cpu = info["cpu"]
  kind = f"{cpu['vendor'].removeprefix('Authentic').removeprefix('Genuine').lower()}_" \
         f"f{cpu['family']}m{cpu['model']}"
  out = a.out or os.path.join(REPO, "benchmarks", "results", f"bf16_dots_{kind}.json")
  common.write_json(out, {"command": common.command_line(), "machine": info,
                          "jax": jax.__version__, "cases": cases, "step_dense_s": step,
                          "step_dense_s_by_product": by_product,
                          "kernel_grad_copied_s": tn_s})
  print(f"wrote {out}")


if __name__ == "__main__":
  main()
