"""Dropout keyed by what an element belongs to: (key, example id, position, layer, site)."""
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from acl_jax.models.bert import (Classifier, Dropout, DropoutIndex, attention_counters,
                                 init_params, token_counters)
from acl_jax.models.config import EncoderConfig

CFG = EncoderConfig(vocab_size=100, hidden_size=32, num_layers=2, num_heads=4,
                    intermediate_size=64, max_position_embeddings=64, num_labels=3, exits="all",
                    hidden_dropout=0.1, attention_dropout=0.1)
KEY = jax.random.key(5)


def _drop(x, counters, rate=0.1, key=KEY):
  return Dropout(rate).apply({}, x, counters, False, rngs={"dropout": key})


@functools.partial(jax.jit, static_argnames="train")
def _forward(params, ids, mask, eids, key, train):
  """The model's logits, jitted: op by op, the forward costs hundreds of tiny compiles. Eval
  mode gets no dropout key (it must need none)."""
  return Classifier(CFG).apply({"params": params}, ids, mask, train=train,
                               rngs={"dropout": key} if train else None, example_ids=eids)[0]


def _model_setup():
  params = init_params(CFG, jax.random.key(0))
  ids = jax.random.randint(jax.random.key(1), (6, 10), 1, 100)
  return params, ids, jnp.ones_like(ids), jnp.arange(100, 106)


def test_an_examples_masks_do_not_depend_on_its_row_batch_or_padding():
  params, ids, mask, eids = _model_setup()
  fwd = lambda i, m, e, key=KEY: _forward(params, i, m, e, key, True)
  ref = np.asarray(fwd(ids, mask, eids))
  rows = jnp.array([3, 0, 5, 1, 4, 2])
  pad = lambda a: jnp.concatenate([a, jnp.zeros((a.shape[0], 6), a.dtype)], 1)
  # Only the float reductions change with the batch's shape: a few eps of the logits.
  np.testing.assert_allclose(np.asarray(fwd(ids[rows], mask[rows], eids[rows])), ref[:, rows],
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(fwd(ids[:2], mask[:2], eids[:2])), ref[:, :2],
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(fwd(pad(ids), pad(mask), eids)), ref, rtol=1e-5,
                             atol=1e-6)
  # ...but it does depend on the example id and the key.
  assert not np.allclose(np.asarray(fwd(ids, mask, eids + 1)), ref, atol=1e-3)
  assert not np.allclose(np.asarray(fwd(ids, mask, eids, jax.random.key(6))), ref, atol=1e-3)


def test_a_packed_row_draws_the_unpacked_masks():
  """Two examples packed in one row (positions restarting) get the masks they get alone."""
  width, heads, stride = 8, 2, 64
  lens, ex = (5, 3), (40, 7)
  x = jnp.ones((2, 5, width))
  rows = DropoutIndex.rows(jnp.array(ex), 2, 5)
  packed = DropoutIndex(jnp.array([[40] * 5 + [7] * 3]).astype(jnp.uint32),
                        jnp.array([list(range(5)) + list(range(3))]).astype(jnp.uint32))
  alone = np.asarray(_drop(x, token_counters(rows, width)))
  together = np.asarray(_drop(jnp.ones((1, 8, width)), token_counters(packed, width)))
  np.testing.assert_array_equal(together[0, :5], alone[0])
  np.testing.assert_array_equal(together[0, 5:], alone[1, :3])
  # Attention probabilities: the packed row's diagonal blocks are each example's own.
  probs = jnp.ones((2, heads, 5, 5))
  alone = np.asarray(_drop(probs, attention_counters(rows, heads, stride)))
  together = np.asarray(_drop(jnp.ones((1, heads, 8, 8)),
                              attention_counters(packed, heads, stride)))
  np.testing.assert_array_equal(together[0, :, :5, :5], alone[0])
  np.testing.assert_array_equal(together[0, :, 5:, 5:], alone[1, :, :3, :3])


def test_rate_scale_and_independence_across_sites():
  n = 64 * 128
  x = jnp.ones((64, 128, 1))
  index = DropoutIndex.rows(None, 64, 128)
  y = np.asarray(_drop(x, token_counters(index, 1)))
  dropped = np.mean(y == 0)
  # Binomial(n, 0.1): std sqrt(0.09 / n) = 3.3e-3; 5 std.
  assert abs(dropped - 0.1) < 5 * np.sqrt(0.09 / n), dropped
  np.testing.assert_allclose(y[y > 0], 1 / 0.9, rtol=1e-6)  # inverted dropout: E[y] = x
  other = np.asarray(_drop(x, token_counters(index, 1), key=jax.random.key(6)))
  both = np.mean((y == 0) & (other == 0))
  assert abs(both - 0.01) < 5 * np.sqrt(0.0099 / n), both  # independent keys
  # Two sites (modules at two paths, as two layers' dropouts are) draw masks of their own
  # from the same step key and counters.
  class TwoSites(nn.Module):
    @nn.compact
    def __call__(self, x, counters):
      return (Dropout(0.1, name="a")(x, counters, False), Dropout(0.1, name="b")(x, counters, False))
  a, b = TwoSites().apply({}, x, token_counters(index, 1), rngs={"dropout": KEY})
  both = np.mean((np.asarray(a) == 0) & (np.asarray(b) == 0))
  assert abs(both - 0.01) < 5 * np.sqrt(0.0099 / n), both


def test_eval_mode_is_deterministic_and_train_mode_drops():
  params, ids, mask, eids = _model_setup()
  eval_a = _forward(params, ids, mask, None, None, False)
  eval_b = _forward(params, ids, mask, eids + 3, None, False)
  np.testing.assert_array_equal(np.asarray(eval_a), np.asarray(eval_b))
  train = _forward(params, ids, mask, eids, KEY, True)
  assert not np.allclose(np.asarray(train), np.asarray(eval_a), atol=1e-3)


def test_written_out_threefry_gives_the_primitives_bits():
  """Arrays of more than UNROLLED_ABOVE elements hash with the written-out rounds, the others
  with jax's primitive; both must give jax's threefry2x32 bits, so no mask depends on the
  size."""
  from jax.extend.random import threefry2x32_p
  from acl_jax import threefry
  rng = np.random.default_rng(0)
  draw = lambda *shape: jnp.asarray(rng.integers(0, 2**32, shape, dtype=np.uint64), jnp.uint32)
  for shape in [(threefry.UNROLLED_ABOVE + 1,), (7, 3), (4, 3, 160, 160)]:
    k, x0, x1 = draw(2), draw(*shape), draw(*shape)
    want = jax.jit(lambda k, a, b: threefry2x32_p.bind(k[0], k[1], a, b)[0])(k, x0, x1)
    got = jax.jit(lambda k, a, b: threefry.threefry2x32(k[0], k[1], a, b))(k, x0, x1)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_a_train_step_is_the_same_with_either_hash(monkeypatch):
  """The written-out rounds inside the jitted shard_map train step (device-varying counters,
  replicated key words, a backward through the mask) give the primitive's step, which the
  tiny models of the other tests use (their arrays are at most UNROLLED_ABOVE elements).

  The masks are the same bits, so only XLA's fusion of the float ops around them can differ:
  the gradients agree to the float32 summation bound of `numerics` over the batch's tokens
  (seen: bit-identical on an Intel Xeon), where one moved mask would move them by order one,
  and so does the loss (a moved mask: about 1e-3 relative).
  """
  from acl_jax import threefry
  from tests import numerics
  from tests.acl_utils import capture_grads, config, setup_lib, step_lib, tiny_setup
  model, params, batches = tiny_setup(num_batches=1, dropout=0.1)
  mesh = step_lib.make_mesh(jax.devices()[:1])
  out = {}
  for name, size in (("loop", threefry.UNROLLED_ABOVE), ("unrolled", 0)):
    monkeypatch.setattr(threefry, "UNROLLED_ABOVE", size)
    tr = setup_lib.make_trainer(config("ce"), model, params, mesh, num_labels=3,
                                total_steps=10, tx=capture_grads(), donate=False)
    state, m = tr.train_step(tr.state, step_lib.shard_batch(batches[0], mesh))
    out[name] = jax.device_get((state.opt_state, m["loss"]))
  n = batches[0]["input_ids"].size
  np.testing.assert_allclose(out["unrolled"][1], out["loop"][1],
                             rtol=numerics.reassociation_rtol(n))
  numerics.assert_trees_close_f32(out["unrolled"][0], out["loop"][0], n)
