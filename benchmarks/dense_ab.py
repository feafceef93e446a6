r"""The dense layers' product form A/B: the model's 2-D dot against `nn.Dense`'s own N-d one.

  python -m benchmarks.dense_ab --seq 64 --reps 9 --out benchmarks/results/dense_ab_<cpu>.json

Every dense layer of `acl_jax.models.bert` multiplies its [batch, seq, d] input as one
[rows, d] x [d, f] product (`bert.rows_dot_general`). The "nd" variant traces the same model
with `nn.Dense`'s default, one `lax.dot_general` on the 3-D input, whose transpose makes
XLA:CPU copy each layer's cotangent into a transposed array before the kernel-gradient dot.

Both variants are the jitted `shard_map` CE step of `acl_jax.train` on MiniLM-L6 (real
weights, B32, dropout on, one synthetic batch; `benchmarks.profile_step.ce_step`), in
one process. Each is compiled, then timed repetitions of `--steps` steps alternate between
them, so drift on the machine reaches both alike. It prints and records each variant's median
s/step, the ratio to "nd", the layout copies in its compiled step, and its first step's loss
and gradient norm (equal up to float32 summation order: the products are the same).
"""
import argparse
import contextlib
import os
import re
import time
from unittest import mock

from benchmarks import common, variants


def variant_context(name: str):
  """The context a variant's model is traced in: "rows" is the model as it is; "nd" gives
  every dense layer `nn.Dense`'s own N-d `lax.dot_general` (what `bert._dense` passes as
  `dot_general` is looked up when the model is traced)."""
  import jax  # pylint: disable=import-outside-toplevel
  from acl_jax.models import bert  # pylint: disable=import-outside-toplevel
  if name == "rows":
    return contextlib.nullcontext()
  return mock.patch.object(bert, "rows_dot_general", jax.lax.dot_general)


def layout_copies(hlo_text: str) -> int:
  """Copy and transpose ops of a compiled module's entry computation (not of the fusions
  inside it): XLA:CPU's layout copies, one thunk each."""
  entry = hlo_text[hlo_text.index("\nENTRY"):]
  return len(re.findall(r"^\s*(?:ROOT )?%(?:copy|transpose)[\w.\-]* = ", entry, re.M))


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--seq", type=int, default=64)
  p.add_argument("--reps", type=int, default=9)
  p.add_argument("--steps", type=int, default=3, help="steps per timed repetition")
  p.add_argument("--out", default=None, help="JSON path (default benchmarks/results/"
                 "dense_ab_L<seq>.json)")
  a = p.parse_args()
  import jax  # pylint: disable=import-outside-toplevel
  from acl_jax import cpuinfo  # pylint: disable=import-outside-toplevel
  from benchmarks import profile_step  # pylint: disable=import-outside-toplevel

  out = {**variants.header(), "shape": {"batch": a.batch, "seq": a.seq}, "variants": {}}
  runs = {}
  for name in ("nd", "rows"):
    with variant_context(name):
      fn, state, batch = profile_step.ce_step("minilm", a.batch, a.seq)
      t0 = time.perf_counter()
      state, metrics = fn(state, batch)  # traces and compiles inside the context
      jax.block_until_ready(state)
      compile_s = time.perf_counter() - t0
      hlo = fn.lower(state, batch).compile().as_text()
    runs[name] = {"fn": fn, "state": state, "batch": batch, "times": []}
    out["variants"][name] = {
        "compile_s": compile_s, "layout_copies": layout_copies(hlo),
        "first_loss": float(metrics["loss"]), "first_grad_norm": float(metrics["grad_norm"])}
  for _ in range(a.reps):
    for r in runs.values():
      t0 = time.perf_counter()
      for _ in range(a.steps):
        r["state"], _ = r["fn"](r["state"], r["batch"])
      jax.block_until_ready(r["state"])
      r["times"].append((time.perf_counter() - t0) / a.steps)
  base = None
  rows = []
  for name, r in runs.items():
    v = out["variants"][name]
    v.update(common.summarize(r["times"]))
    base = base or v["median"]
    rows.append([name, v["median"], v["median"] / base, v["layout_copies"], v["first_loss"],
                 v["first_grad_norm"]])
  print(f"MiniLM-L6 B{a.batch} L{a.seq} CE step, {a.reps} alternating repetitions of "
        f"{a.steps} steps; {cpuinfo.describe()}")
  print(common.markdown_table(
      ["variant", "s/step (median)", "/ nd", "layout copies", "first loss", "first grad norm"],
      rows))
  path = a.out or os.path.join(variants.REPO, "benchmarks", "results",
                               f"dense_ab_L{a.seq}.json")
  common.write_json(path, out)
  print(f"wrote {path}")


if __name__ == "__main__":
  main()
