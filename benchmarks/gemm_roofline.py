r"""The 2-core fp32 GEMM rate on this machine, XLA:CPU against torch, at the train step's shapes.

  python -m benchmarks.gemm_roofline --rounds 2

Every matmul of one MiniLM-L6 B32 L64 CE step, timed alone at its own shape and operand
layout: for each dense layer (QKV, attention output, FFN in, FFN out) the forward `x @ W`
(NN), the input gradient `g @ W^T` (NT) and the weight gradient `x^T @ g` (TN), and the
attention's two batched products, each counted three times (its forward and two backward
products have the same FLOPs). A 2048^3 square GEMM gives the machine's plain rate.

jax (a jitted `lax.dot_general`, which XLA:CPU runs as a YNNPACK fusion) and torch
(`torch.matmul` on 2 threads, MKL or oneDNN) each run in their own worker process, one at a
time, alternating over `--rounds`; medians. The step's GEMM floor is its FLOPs at each
framework's measured rates. With the step profile of the same CPU kind
(`benchmarks/profile_step`), it also prints the matmul time the trace measured inside the
step and the rate that implies, so the gap between the step and its GEMMs reads in numbers.
"""
import argparse
import json
import os
import statistics
import sys
import time

from benchmarks import common

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENS, HIDDEN, FFN, HEADS, SEQ, LAYERS = 32 * 64, 384, 1536, 12, 64, 6
DENSE = {"qkv": (HIDDEN, 3 * HIDDEN), "attn out": (HIDDEN, HIDDEN), "ffn in": (HIDDEN, FFN),
         "ffn out": (FFN, HIDDEN)}


def gemms() -> list[dict]:
  """Each GEMM of the step: name, (batch, m, k, n), which operand is transposed, and how many
  times per step it runs (per layer x layers)."""
  out = []
  for name, (fin, fout) in DENSE.items():
    out += [dict(name=f"{name} fwd x@W", bmkn=(1, TOKENS, fin, fout), ta=False, tb=False),
            dict(name=f"{name} dx g@W^T", bmkn=(1, TOKENS, fout, fin), ta=False, tb=True),
            dict(name=f"{name} dW x^T@g", bmkn=(1, fin, TOKENS, fout), ta=True, tb=False)]
  for g in out:
    g["per_step"] = LAYERS
  bh, d = TOKENS // SEQ * HEADS, HIDDEN // HEADS
  out += [dict(name="scores q@k^T", bmkn=(bh, SEQ, d, SEQ), ta=False, tb=True,
               per_step=3 * LAYERS),
          dict(name="context p@v", bmkn=(bh, SEQ, SEQ, d), ta=False, tb=False,
               per_step=3 * LAYERS)]
  return out


SQUARE = dict(name="square 2048^3", bmkn=(1, 2048, 2048, 2048), ta=False, tb=False,
              per_step=0)


def flops(g: dict) -> float:
  b, m, k, n = g["bmkn"]
  return 2.0 * b * m * k * n


def operands(g: dict, seed: int = 0):
  """Float32 operands of `g` as stored: a is [k, m] where ta, else [m, k]; b is [n, k] where
  tb, else [k, n]; each with a leading batch axis where b > 1. The product is op(a) @ op(b)."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  bt, m, k, n = g["bmkn"]
  sa, sb = ((k, m) if g["ta"] else (m, k)), ((n, k) if g["tb"] else (k, n))
  if bt > 1:
    sa, sb = (bt,) + sa, (bt,) + sb
  rng = np.random.default_rng(seed)
  return (rng.standard_normal(sa, dtype=np.float32), rng.standard_normal(sb, dtype=np.float32))


def time_call(fn, min_s: float) -> float:
  """Seconds per call: the median of 5 batches, each repeating `fn` for at least `min_s`."""
  fn()
  reps = 1
  while True:
    t = time.perf_counter()
    for _ in range(reps):
      fn()
    if time.perf_counter() - t >= min_s:
      break
    reps *= 2
  batches = []
  for _ in range(5):
    t = time.perf_counter()
    for _ in range(reps):
      fn()
    batches.append((time.perf_counter() - t) / reps)
  return statistics.median(batches)


def jax_product(g: dict, a, b):
  """A call computing op(a) @ op(b) in XLA:CPU: one jitted dot_general, the transposes folded
  into its dimension numbers."""
  import jax  # pylint: disable=import-outside-toplevel
  batched = a.ndim == 3
  ca, cb = (a.ndim - 2 if g["ta"] else a.ndim - 1), (b.ndim - 1 if g["tb"] else b.ndim - 2)
  dims = (((ca,), (cb,)), ((0,), (0,)) if batched else ((), ()))
  f = jax.jit(lambda x, y: jax.lax.dot_general(x, y, dims))
  a, b = jax.device_put(a), jax.device_put(b)
  return lambda: f(a, b).block_until_ready()


def torch_product(g: dict, a, b):
  """The same product in torch: `torch.matmul` on transposed views."""
  import torch  # pylint: disable=import-outside-toplevel
  a, b = torch.from_numpy(a), torch.from_numpy(b)
  a, b = (a.transpose(-1, -2) if g["ta"] else a), (b.transpose(-1, -2) if g["tb"] else b)
  return lambda: torch.matmul(a, b)


def worker(kind: str, min_s: float) -> None:
  if kind == "torch":
    import torch  # pylint: disable=import-outside-toplevel
    torch.set_num_threads(2)
    torch.set_grad_enabled(False)
  make = jax_product if kind == "jax" else torch_product
  fns = {g["name"]: make(g, *operands(g)) for g in gemms() + [SQUARE]}
  chan = common.Channel()
  chan.send(ready=True)
  while chan.recv() is not None:
    chan.send(seconds={name: time_call(fn, min_s) for name, fn in fns.items()})


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--rounds", type=int, default=2)
  p.add_argument("--min_s", type=float, default=0.2,
                 help="Shortest timed batch of repetitions, seconds.")
  p.add_argument("--profile", default=None, help="profile_step JSON of this CPU kind (default: "
                 "benchmarks/results/profile_step_L64_<kind>.json where it exists).")
  p.add_argument("--out", default=None, help="JSON path (default benchmarks/results/"
                 "gemm_roofline_<kind>.json)")
  p.add_argument("--worker", default="", help=argparse.SUPPRESS)
  a = p.parse_args()
  if a.worker:
    return worker(a.worker, a.min_s)
  info = common.machine_info(REPO)
  kind = common.cpuinfo.kind()
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  times = {"jax": [], "torch": []}
  for _ in range(a.rounds):
    for fw in times:
      argv = [sys.executable, "-m", "benchmarks.gemm_roofline", "--worker", fw,
              "--min_s", str(a.min_s)]
      with common.Worker(argv, env=env, cwd=REPO) as w:
        w.recv()
        times[fw].append(w.request(go=True)["seconds"])
  rates = {fw: {g["name"]: flops(g) / statistics.median(r[g["name"]] for r in rs) / 1e9
                for g in gemms() + [SQUARE]} for fw, rs in times.items()}
  step_gflop = sum(flops(g) * g["per_step"] for g in gemms()) / 1e9
  floor_ms = {fw: sum(flops(g) * g["per_step"] / (rates[fw][g["name"]] * 1e9)
                      for g in gemms()) * 1e3 for fw in rates}
  print(f"# {common.cpu_kind()}, 2 threads each; medians over {a.rounds} rounds")
  rows = [(g["name"], "x".join(map(str, g["bmkn"])), f"{flops(g) / 1e6:.0f}", g["per_step"],
           rates["jax"][g["name"]], rates["torch"][g["name"]],
           rates["torch"][g["name"]] / rates["jax"][g["name"]]) for g in gemms() + [SQUARE]]
  print(common.markdown_table(("GEMM", "b x m x k x n", "MFLOP", "per step", "jax GFLOP/s",
                               "torch GFLOP/s", "torch / jax"), rows))
  print(f"\nstep GEMMs: {step_gflop:.1f} GFLOP; floor at the measured rates: jax "
        f"{floor_ms['jax']:.0f} ms, torch {floor_ms['torch']:.0f} ms")
  out = {"command": common.command_line(), "machine": info, "step_gflop": step_gflop,
         "step_gemm_floor_ms": floor_ms, "gflops": rates, "seconds": times}
  prof = a.profile or os.path.join(REPO, "benchmarks", "results", f"profile_step_L64_{kind}.json")
  if os.path.exists(prof):
    with open(prof) as f:
      pr = json.load(f)
    mm = pr["kinds_ms"]["matmul"]
    print(f"in the traced step ({os.path.relpath(prof, REPO)}): matmuls {mm:.0f} ms = "
          f"{step_gflop / mm * 1e3:.0f} GFLOP/s, {mm / floor_ms['jax']:.2f}x jax's floor; "
          f"all ops {sum(pr['kinds_ms'].values()):.0f} ms, "
          f"wall {pr['wall_s_per_step'] * 1e3:.0f} ms")
    out["profile"] = {"path": os.path.relpath(prof, REPO), "matmul_ms": mm,
                      "op_ms": sum(pr["kinds_ms"].values()),
                      "wall_ms": pr["wall_s_per_step"] * 1e3}
  path = a.out or os.path.join(REPO, "benchmarks", "results", f"gemm_roofline_{kind}.json")
  common.write_json(path, out)
  print(f"wrote {os.path.relpath(path, REPO)}")


if __name__ == "__main__":
  main()
