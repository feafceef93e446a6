"""Triplet and cosine baselines against NumPy loops (SPEC §2.7)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from acl_jax.losses import cosine_loss, triplet_loss
from tests import numerics

triplet = jax.jit(triplet_loss, static_argnames=("margin", "normalize"))
cosine = jax.jit(cosine_loss)


def ref_triplet(x, labels, margin):
  n = len(x)
  dist = np.linalg.norm(x[:, None, :] - x[None, :, :], axis=-1)
  losses = []
  for a in range(n):
    for p in range(n):
      for q in range(n):
        if len({a, p, q}) == 3 and labels[a] == labels[p] and labels[a] != labels[q]:
          loss = dist[a, p] - dist[a, q] + margin
          if loss > 0:
            losses.append(loss)
  return float(np.mean(losses)) if losses else 0.0


def ref_cosine(x, labels):
  n = len(x)
  unit = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
  errs = [(unit[i] @ unit[j] - float(labels[i] == labels[j])) ** 2
          for i in range(n) for j in range(n) if i != j]
  return float(np.mean(errs))


def _data(seed, n=9, hidden=5, k=3, scale=1.0):
  rng = np.random.default_rng(seed)
  return (scale * rng.normal(size=(n, hidden))).astype(np.float32), rng.integers(0, k, n)


@pytest.mark.parametrize("margin,normalize", [(5.0, False), (1.0, False), (0.3, True)])
def test_triplet_matches_numpy(margin, normalize):
  # Scale 2 with margin 1 leaves some triplets inactive, which the mean must skip.
  x, y = _data(0, scale=2.0)
  ref_x = x / np.linalg.norm(x, axis=1, keepdims=True) if normalize else x
  got = triplet(x, y, margin=margin, normalize=normalize)
  want = ref_triplet(ref_x.astype(np.float64), y, margin)
  np.testing.assert_allclose(float(got), want, rtol=1e-5)


def test_triplet_no_active_triplets_is_zero_with_zero_grad():
  # Two tight, far-apart clusters: every negative is farther than margin + positive.
  x = np.array([[0.0, 0.0], [0.1, 0.0], [10.0, 0.0], [10.0, 0.1]], np.float32)
  y = np.array([0, 0, 1, 1])
  loss, grad = jax.jit(jax.value_and_grad(lambda f: triplet_loss(f, y, 1.0)))(x)
  assert float(loss) == 0.0 and np.all(np.asarray(grad) == 0)
  single_class = triplet(x, np.zeros(4, int))
  assert float(single_class) == 0.0


def test_triplet_duplicates_have_finite_grads():
  x, y = _data(1, n=4)
  x = np.concatenate([x, x])  # zero distances between copies
  y = np.concatenate([y, y])
  loss, grad = jax.jit(jax.value_and_grad(lambda f: triplet_loss(f, y)))(x)
  assert np.isfinite(float(loss)) and np.all(np.isfinite(np.asarray(grad)))


def test_triplet_bad_margin_raises():
  x, y = _data(0)
  with pytest.raises(ValueError, match="margin must be >= 0"):
    triplet_loss(x, y, margin=-1.0)


def test_cosine_matches_numpy():
  x, y = _data(2, k=2)
  np.testing.assert_allclose(float(cosine(x, y)), ref_cosine(x.astype(np.float64), y), rtol=1e-5)


def test_cosine_zero_vectors_are_finite():
  x, y = _data(3, n=5)
  x[1] = 0.0
  loss, grad = jax.jit(jax.value_and_grad(lambda f: cosine_loss(f, y)))(x)
  assert np.isfinite(float(loss)) and np.all(np.isfinite(np.asarray(grad)))
  np.testing.assert_allclose(float(loss), ref_cosine(x.astype(np.float64), y), rtol=1e-5)


def test_example_mask_equals_subset():
  x, y = _data(4, n=8, scale=2.0)
  mask = np.array([1, 0, 1, 1, 1, 0, 1, 1], bool)
  # The same terms summed in another order: float32 reassociation over n^2 pairs, n^3 triplets.
  np.testing.assert_allclose(float(cosine(x, y, jnp.asarray(mask))),
                             float(cosine(x[mask], y[mask])),
                             rtol=numerics.reassociation_rtol(8**2))
  masked = triplet(x, y, margin=1.0, example_mask=jnp.asarray(mask))
  np.testing.assert_allclose(float(masked), float(triplet(x[mask], y[mask], margin=1.0)),
                             rtol=numerics.reassociation_rtol(8**3))


def test_defaults_one_pair_and_bfloat16_inputs():
  """Triplet's margin defaults to 5 and may be 0; a batch of one pair has its cosine loss;
  bfloat16 features are scored in float32."""
  from acl_jax.losses.contrastive import masked_mean  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(2)
  x = rng.normal(size=(6, 4)).astype(np.float32)
  labels = np.array([0, 0, 1, 1, 2, 0])
  assert float(triplet_loss(jnp.asarray(x), jnp.asarray(labels))) == pytest.approx(
      ref_triplet(x, labels, 5.0), rel=1e-5)
  assert float(triplet_loss(jnp.asarray(x), jnp.asarray(labels), margin=0.0)) == pytest.approx(
      ref_triplet(x, labels, 0.0), rel=1e-5, abs=1e-7)
  pair = x[:2]
  assert float(cosine(jnp.asarray(pair), jnp.asarray([0, 1]))) == pytest.approx(
      ref_cosine(pair, np.array([0, 1])), rel=1e-5)
  bf = jnp.asarray(x, jnp.bfloat16)
  rounded = np.asarray(bf.astype(jnp.float32))
  for fn, ref in ((lambda f: triplet_loss(f, jnp.asarray(labels), margin=1.0),
                   lambda f: ref_triplet(f, labels, 1.0)),
                  (lambda f: cosine_loss(f, jnp.asarray(labels)),
                   lambda f: ref_cosine(f, labels))):
    got = fn(bf)
    assert got.dtype == jnp.float32
    assert float(got) == pytest.approx(ref(rounded.astype(np.float64)), rel=1e-5)
  one = masked_mean(jnp.asarray([[2.0, 3.0], [4.0, 5.0]]), jnp.asarray([[False, True],
                                                                      [False, False]]))
  assert float(one) == 3.0
