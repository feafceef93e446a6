r"""A/B of the CE train step's dropout (MiniLM-L6, B32), one process.

  python benchmarks/dropout_ab.py --seq 128 --reps 5

Variants:
  drop: checkpoint dropout 0.1, masks keyed by (example id, position) (`models.bert.Dropout`);
  positional: the same rate, masks drawn by `jax.random.bits` over each array's shape, so a
    mask depends on the row an example sits in (what keyed dropout replaces; its cost baseline);
  nodrop: all dropout 0;
  noattdrop: attention-probability dropout 0.
Timed in alternating repetitions after compiling; prints medians and the ratios to
`positional`.
"""
import contextlib
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _positional_call(self, x, counters, deterministic):
  """Dropout on 16 random bits per element drawn over x's shape (row-positional keys)."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  del counters
  if deterministic or self.rate == 0.0:
    return x
  threshold = int(round(self.rate * 65536))
  bits = jax.random.bits(self.make_rng("dropout"), x.shape, jnp.uint16)
  scale = 65536.0 / (65536 - threshold)
  return jnp.where(bits >= threshold, x * jnp.asarray(scale, x.dtype), jnp.zeros((), x.dtype))


@contextlib.contextmanager
def _positional_dropout():
  from acl_jax.models import bert  # pylint: disable=import-outside-toplevel
  keyed = bert.Dropout.__call__
  bert.Dropout.__call__ = _positional_call
  try:
    yield
  finally:
    bert.Dropout.__call__ = keyed


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--seq", type=int, default=128)
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--reps", type=int, default=3)
  a = p.parse_args()
  import jax
  from benchmarks import common
  runs = {}
  for name, kw in {"drop": {}, "positional": {},
                   "nodrop": dict(hidden_dropout=0.0, attention_dropout=0.0),
                   "noattdrop": dict(attention_dropout=0.0)}.items():
    with _positional_dropout() if name == "positional" else contextlib.nullcontext():
      fn, state, batch = common.minilm_ce_step(a.batch, a.seq, **kw)
      state, _ = fn(state, batch)  # traced and compiled here, under the patch
      jax.block_until_ready(state)
    runs[name] = [fn, state, []]
  for _ in range(a.reps):
    for r in runs.values():
      t = time.perf_counter()
      r[1], _ = r[0](r[1], batch)
      jax.block_until_ready(r[1])
      r[2].append(time.perf_counter() - t)
  med = {k: float(np.median(r[2])) for k, r in runs.items()}
  print(f"{common.cpu_model()}, B{a.batch} L{a.seq}, {a.reps} reps, median s/step:",
        {k: round(v, 3) for k, v in med.items()})
  print("ratio to positional:", {k: round(v / med["positional"], 3) for k, v in med.items()})


if __name__ == "__main__":
  main()
