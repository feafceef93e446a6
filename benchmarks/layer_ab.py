r"""A/B of the transformer layer's non-matmul work in the CE train step (MiniLM-L6), one process.

  python benchmarks/layer_ab.py --seq 64 --reps 7

Each variant rewrites one piece of `acl_jax.models.bert` for its own jitted step (same params,
batch and dropout keys), so every change is measured alone against the model as it is:
  model: the layer as `acl_jax.models.bert` has it;
  split_qkv: the fused QKV kernel applied as three [h, h] dots, each giving its heads directly,
    so the backward adds three dx instead of joining dq, dk and dv into one [b, s, 3h] array;
  scale_q: the softmax scale 1/sqrt(head_dim) applied to q ([b, s, h]) instead of the scores
    ([b, heads, s, s]);
  gelu_erf: exact GELU as 0.5 x (1 + erf(x / sqrt 2)) instead of jax.nn.gelu's erfc form;
  threefry_loop: dropout bits from `jax.extend.random.threefry2x32_p` for every array
    (`threefry.UNROLLED_ABOVE` raised past any size), which XLA:CPU runs as a rolled loop over
    the whole array, instead of the model's written-out rounds (same bits).
After compiling, timed repetitions alternate between the variants; prints medians, the ratio
to `model` and each step's loss (the variants compute the same function, so the losses agree
to float32 round-off), and writes them to benchmarks/results/layer_ab_L<seq>.json.
"""
import argparse
import contextlib
import functools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _variant_attention():
  import flax.linen as nn  # pylint: disable=import-outside-toplevel
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from acl_jax.models import bert  # pylint: disable=import-outside-toplevel

  class SplitQKV(nn.Module):
    """The fused "qkv" Dense's params ([h, 3h] kernel, [3h] bias), applied as three dots."""
    heads: int

    @nn.compact
    def __call__(self, x):
      h = x.shape[-1]
      kernel = self.param("kernel", bert._INIT, (h, 3 * h), jnp.float32)
      bias = self.param("bias", nn.initializers.zeros, (3 * h,), jnp.float32)
      k3 = kernel.astype(x.dtype).reshape(h, 3, self.heads, h // self.heads)
      b3 = bias.astype(x.dtype).reshape(3, self.heads, h // self.heads)
      return [jnp.einsum("bsh,hnd->bsnd", x, k3[:, i]) + b3[i] for i in range(3)]

  class VariantAttention(bert.SelfAttention):
    """`bert.SelfAttention` with the QKV projection as three dots (`split_qkv`) or the
    softmax scale applied to q (`scale_q`); everything else as the model has it."""
    split_qkv: bool = False
    scale_q: bool = False

    @nn.compact
    def __call__(self, x, bias, train, drop=None):
      cfg = self.cfg
      b, s, h = x.shape
      heads, head_dim = cfg.num_heads, h // cfg.num_heads
      if self.split_qkv:
        q, k, v = SplitQKV(heads, name="qkv")(x)
      else:
        qkv = bert._dense(cfg, 3 * h, "qkv")(x).reshape(b, s, 3, heads, head_dim)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
      scale = head_dim ** -0.5
      if self.scale_q:
        q = q * scale
      scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)
      probs = jax.nn.softmax((scores if self.scale_q else scores * scale) + bias, axis=-1)
      probs = bert.Dropout(cfg.attention_dropout)(
          probs, bert._counters(drop, bert.attention_counters, heads,
                                cfg.max_position_embeddings), deterministic=not train)
      ctx = jnp.einsum("bhqk,bkhd->bqhd", probs.astype(v.dtype), v).reshape(b, s, h)
      out = bert.Dropout(cfg.hidden_dropout)(
          bert._dense(cfg, h, "out")(ctx), bert._counters(drop, bert.token_counters, h),
          deterministic=not train)
      return bert._layer_norm(cfg)(x + out)

  return VariantAttention


@contextlib.contextmanager
def _patched(name: str):
  """The bert module with variant `name` in place (traced inside this context)."""
  import jax  # pylint: disable=import-outside-toplevel
  from acl_jax import threefry  # pylint: disable=import-outside-toplevel
  from acl_jax.models import bert  # pylint: disable=import-outside-toplevel
  attention, gelu, unrolled_above = (bert.SelfAttention, bert.ACTIVATIONS["gelu"],
                                     threefry.UNROLLED_ABOVE)
  if name in ("split_qkv", "scale_q"):
    bert.SelfAttention = functools.partial(_variant_attention(), **{name: True})
  elif name == "gelu_erf":
    bert.ACTIVATIONS["gelu"] = lambda x: 0.5 * x * (1.0 + jax.lax.erf(x * 2 ** -0.5))
  elif name == "threefry_loop":  # every array hashes with the primitive
    threefry.UNROLLED_ABOVE = float("inf")
  try:
    yield
  finally:
    bert.SelfAttention, bert.ACTIVATIONS["gelu"] = attention, gelu
    threefry.UNROLLED_ABOVE = unrolled_above


VARIANTS = ("model", "threefry_loop", "split_qkv", "scale_q", "gelu_erf")


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--seq", type=int, default=64)
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--reps", type=int, default=7)
  p.add_argument("--variants", default=",".join(VARIANTS))
  p.add_argument("--out", default=None)
  a = p.parse_args()
  import jax
  import numpy as np
  from benchmarks import common
  info = common.machine_info(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  info["cpu_busy_start"] = common.cpu_busy()  # other processes' CPU share before the run
  runs = {}
  for name in a.variants.split(","):
    if name not in VARIANTS:
      raise SystemExit(f"Unknown variant {name!r}; choose from {', '.join(VARIANTS)}.")
    with _patched(name):
      fn, state, batch = common.minilm_ce_step(a.batch, a.seq)
      t0 = time.perf_counter()
      state, m = fn(state, batch)  # compiles with the variant in place
      jax.block_until_ready(state)
    runs[name] = {"fn": fn, "state": state, "batch": batch, "times": [],
                  "compile_s": time.perf_counter() - t0, "first_loss": float(m["loss"])}
  for _ in range(a.reps):
    for r in runs.values():
      t0 = time.perf_counter()
      r["state"], _ = r["fn"](r["state"], r["batch"])
      jax.block_until_ready(r["state"])
      r["times"].append(time.perf_counter() - t0)
  base = float(np.median(runs[next(iter(runs))]["times"]))
  print(f"MiniLM-L6 CE step B{a.batch} L{a.seq}, {a.reps} alternating reps, "
        f"{info['cpu_model']}, other processes' CPU share at start {info['cpu_busy_start']:.0%}")
  print("| variant | median s/step | / first | first-step loss |\n|---|---|---|---|")
  out = {}
  for name, r in runs.items():
    med = float(np.median(r["times"]))
    out[name] = {"median_s": med, "times_s": r["times"], "compile_s": r["compile_s"],
                 "first_loss": r["first_loss"]}
    print(f"| {name} | {med:.3f} | {med / base:.3f} | {r['first_loss']:.6f} |")
  path = a.out or os.path.join("benchmarks", "results", f"layer_ab_L{a.seq}.json")
  common.write_json(path, {"command": common.command_line(), "machine": info, "runs": out})
  print(f"wrote {path}")


if __name__ == "__main__":
  main()
