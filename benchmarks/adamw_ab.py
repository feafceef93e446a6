r"""The train step's AdamW as optax chains it, against the same update written as one pass.

  python -m benchmarks.adamw_ab --reps 15

`optim.make_optimizer` (global-norm clip to 1.0, then optax's AdamW with the BERT schedule and
`optim.decay_mask`) updates MiniLM-L6's parameters (random init, a fixed random gradient) in
one jitted, donated call; "one pass" computes the same update (the clip factor from the
global norm, then per leaf the new moments and parameter in one elementwise expression) with
the same schedule and decay mask. The two alternate over `--reps` repetitions in one process.
It prints the median ms per update, the ratio, the compiled updates' op counts, and the
largest difference between the two runs' parameters after all repetitions (float32
round-off: the two order a few products differently).
"""
import argparse
import os
import statistics
import time

from benchmarks import common

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
B1, B2, EPS, WD, CLIP = 0.9, 0.999, 1e-6, 0.01, 1.0


def one_pass(schedule, mask):
  """(init, update) of the one-pass AdamW: state (mu, nu, count); update(params, state, grads)
  -> (params, state)."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import optax  # pylint: disable=import-outside-toplevel

  def init(params):
    zeros = lambda: jax.tree.map(jnp.zeros_like, params)
    return zeros(), zeros(), jnp.zeros((), jnp.int32)

  def update(params, state, grads):
    mu, nu, count = state
    norm = optax.global_norm(grads)
    scale = jnp.where(norm < CLIP, 1.0, CLIP / norm)
    lr = schedule(count)  # optax's schedule reads the count before its increment
    t = count + 1
    c1, c2 = 1 - B1 ** t.astype(jnp.float32), 1 - B2 ** t.astype(jnp.float32)

    def leaf(p, m, v, g, decay):
      g = g * scale
      m = B1 * m + (1 - B1) * g
      v = B2 * v + (1 - B2) * g * g
      u = (m / c1) / (jnp.sqrt(v / c2) + EPS)
      if decay:
        u = u + WD * p
      return p - lr * u, m, v

    out = jax.tree.map(leaf, params, mu, nu, grads, mask)
    pick = lambda i: jax.tree.map(lambda x: x[i], out, is_leaf=lambda x: isinstance(x, tuple))
    return pick(0), (pick(1), pick(2), t)
  return init, update


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--reps", type=int, default=15)
  ap.add_argument("--out", default="")
  args = ap.parse_args(argv)
  # pylint: disable=import-outside-toplevel
  import jax
  import numpy as np
  import optax
  from acl_jax import cpuinfo
  from acl_jax.models import init_params
  from acl_jax.models.config import EncoderConfig
  from acl_jax.train import optim
  from benchmarks import fixed_cost
  info = common.machine_info(REPO)
  print(f"# {common.cpu_kind()}; load average at start {info['load_average_start']}",
        flush=True)
  cfg = EncoderConfig(hidden_size=384, num_layers=6, num_heads=12, intermediate_size=1536,
                      num_labels=2)
  params = init_params(cfg, jax.random.PRNGKey(0))
  rng = np.random.default_rng(0)
  grads = jax.tree.map(lambda p: (1e-3 * rng.standard_normal(p.shape)).astype(np.float32),
                       params)
  total = 100_000
  tx = optim.make_optimizer(lr=2e-5, total_steps=total)
  schedule = optim.lr_groups(lr=2e-5, total_steps=total, warmup_ratio=0.1, strategy="",
                             stage1_steps=0, head_lr_mult=1.0)["encoder"].schedule
  init, update = one_pass(schedule, optim.decay_mask(params))

  def optax_update(p, s, g):
    u, s = tx.update(g, s, p)
    return optax.apply_updates(p, u), s

  copy = lambda t: jax.tree.map(np.array, t)
  runs = {"optax": [jax.jit(optax_update, donate_argnums=(0, 1)), copy(params)],
          "one pass": [jax.jit(update, donate_argnums=(0, 1)), copy(params)]}
  runs["optax"].append(tx.init(runs["optax"][1]))
  runs["one pass"].append(init(runs["one pass"][1]))
  counts, times = {}, {k: [] for k in runs}
  for name, (fn, p, s) in runs.items():
    counts[name] = fixed_cost.op_counts(fn.lower(p, s, grads).compile().as_text())
    runs[name][1:] = fn(p, s, grads)  # warm-up
  for _ in range(args.reps):
    for name, r in runs.items():
      t0 = time.perf_counter()
      r[1:] = r[0](r[1], r[2], grads)
      jax.block_until_ready(r[1])
      times[name].append(time.perf_counter() - t0)
  med = {k: 1e3 * statistics.median(v) for k, v in times.items()}
  diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(
      jax.tree.leaves(runs["optax"][1]), jax.tree.leaves(runs["one pass"][1])))
  rows = [[k, f"{med[k]:.1f}", f"{1e3 * min(times[k]):.1f}", f"{1e3 * max(times[k]):.1f}",
           counts[k]["launched"]] for k in runs]
  print(common.markdown_table(["AdamW", "ms/update (median)", "min", "max", "launched ops"],
                              rows))
  print(f"one pass / optax: {med['one pass'] / med['optax']:.3f}x; largest parameter "
        f"difference after {args.reps + 1} updates: {diff:.3g}")
  out = args.out or os.path.join(REPO, "benchmarks", "results",
                                 f"adamw_ab_{cpuinfo.kind()}.json")
  common.write_json(out, {"command": common.command_line(), "machine": info,
                          "reps": args.reps, "ms": {k: [1e3 * x for x in v]
                                                    for k, v in times.items()},
                          "median_ms": med, "ops": counts, "max_param_diff": diff})
  print(f"wrote {out}")


if __name__ == "__main__":
  main()
