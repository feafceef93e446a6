"""Threefry-2x32 of explicit counter words, shared by dropout masks and the G-Loss split.

Both key their randomness by what it belongs to (an example id, a token position), not by
where it runs, so they hash counter words they build themselves instead of drawing from
`jax.random` by shape.
"""
import jax
import jax.numpy as jnp
from jax.extend.random import threefry2x32_p

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))

# Arrays of more than this many elements hash with the written-out rounds, the others with
# the primitive (see `threefry2x32`).
UNROLLED_ABOVE = 1 << 18


def threefry2x32(k0: jax.Array, k1: jax.Array, x0: jax.Array, x1: jax.Array) -> jax.Array:
  """The first output word of Threefry-2x32 (20 rounds) of counters (x0, x1) under key
  (k0, k1), scalar key words: bit for bit `jax.extend.random.threefry2x32_p`'s.

  On CPU the primitive lowers to a rolled loop of five steps, each reading and writing the
  whole state (for attention dropout, [batch, heads, q, k]). Above UNROLLED_ABOVE elements
  the rounds are written out instead, so that XLA fuses the hash with the counters it reads
  and the dropout it feeds into one elementwise pass, which shortens a train step
  (BENCHMARKS.md, "Where the step's time goes"). The written-out form takes longer to
  compile, which only a large array's run time repays (a tiny model's few steps do not), so
  smaller arrays keep the loop. Both give the same bits, so the choice changes no mask.
  """
  if x0.size <= UNROLLED_ABOVE:
    # Adding a zero taken from the counters gives the scalar key words the counters'
    # device-varying type under shard_map, which the primitive's loop needs of all operands.
    zero = x0.reshape(-1)[0] & jnp.uint32(0)
    return threefry2x32_p.bind(k0 + zero, k1 + zero, x0, x1)[0]
  ks = (k0, k1, k0 ^ k1 ^ jnp.uint32(0x1BD11BDA))
  x0, x1 = x0 + ks[0], x1 + ks[1]
  for i in range(5):
    for r in _ROTATIONS[i % 2]:
      x0 = x0 + x1
      x1 = (x1 << jnp.uint32(r)) | (x1 >> jnp.uint32(32 - r))
      x1 = x0 ^ x1
    x0 = x0 + ks[(i + 1) % 3]
    x1 = x1 + ks[(i + 2) % 3] + jnp.uint32(i + 1)
  return x0
