"""The small losses against NumPy: cross-entropy with class weights and padding (SPEC §2.1),
its weighted mean, sklearn's balanced class weights, and the centre loss's EMA centres and
distance (`acl_jax/losses/center.py`)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.utils.class_weight import compute_class_weight

from acl_jax.losses import ce, center
from tests import numerics

RNG = np.random.default_rng(7)
LOGITS = RNG.normal(size=(6, 3)).astype(np.float32) * 3
LABELS = np.array([0, 2, 1, 2, 2, 0])
MASK = np.array([1, 1, 0, 1, 1, 0], np.float32)


def ref_ce(logits, labels, weights=None, mask=None):
  z = logits.astype(np.float64)
  logp = z - z.max(1, keepdims=True)
  logp -= np.log(np.exp(logp).sum(1, keepdims=True))
  nll = -logp[np.arange(len(labels)), labels]
  w = np.ones(len(labels)) if weights is None else np.asarray(weights, np.float64)[labels]
  w = w * (1.0 if mask is None else mask)
  return float((w * nll).sum() / w.sum())


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_cross_entropy_is_torch_style_weighted_mean(weighted, masked):
  weights = np.array([0.5, 2.0, 1.25], np.float32) if weighted else None
  mask = MASK if masked else None
  got = float(ce.cross_entropy(jnp.asarray(LOGITS), jnp.asarray(LABELS),
                               None if weights is None else jnp.asarray(weights),
                               None if mask is None else jnp.asarray(mask)))
  np.testing.assert_allclose(got, ref_ce(LOGITS, LABELS, weights, mask),
                             rtol=numerics.reassociation_rtol(18))


def test_cross_entropy_of_bf16_logits_is_float32_and_of_no_examples_is_zero():
  got = ce.cross_entropy(jnp.asarray(LOGITS, jnp.bfloat16), jnp.asarray(LABELS))
  assert got.dtype == jnp.float32
  lo = np.asarray(jnp.asarray(LOGITS, jnp.bfloat16).astype(jnp.float32))
  np.testing.assert_allclose(float(got), ref_ce(lo, LABELS), rtol=numerics.reassociation_rtol(18))
  empty = ce.cross_entropy(jnp.asarray(LOGITS), jnp.asarray(LABELS),
                           example_mask=jnp.zeros(6))
  grad = jax.grad(lambda x: ce.cross_entropy(x, jnp.asarray(LABELS),
                                             example_mask=jnp.zeros(6)))(jnp.asarray(LOGITS))
  assert float(empty) == 0.0 and np.all(np.asarray(grad) == 0.0)


def test_weighted_mean():
  v = jnp.asarray([1.0, 2.0, 4.0, 8.0])
  assert float(ce.weighted_mean(v)) == 3.75
  assert float(ce.weighted_mean(v, jnp.asarray([1.0, 0.0, 3.0, 0.0]))) == 3.25
  assert float(ce.weighted_mean(v, jnp.zeros(4))) == 0.0
  # weights summing below 1 still normalise
  assert float(ce.weighted_mean(v, jnp.asarray([0.25, 0.0, 0.25, 0.0]))) == 2.5


def test_weighted_mean_under_a_named_axis_is_the_global_batchs():
  """Two shards of uneven weight: the pmean of the per-shard values is the global mean."""
  v = jnp.asarray([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]])
  w = jnp.asarray([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
  local = jax.vmap(lambda a, b: ce.weighted_mean(a, b, "d"), axis_name="d")(v, w)
  assert float(jnp.mean(local)) == pytest.approx((1 + 2 + 8) / 3, rel=1e-6)


def test_balanced_class_weights_are_sklearns_and_absent_classes_get_one():
  y = np.array([0, 0, 0, 2, 2, 3])
  got = ce.balanced_class_weights(y, 5)
  want = compute_class_weight("balanced", classes=np.unique(y), y=y)
  np.testing.assert_allclose(got[[0, 2, 3]], want, rtol=1e-6)
  assert got[1] == 1.0 and got[4] == 1.0 and got.dtype == np.float32
  with pytest.raises(ValueError, match="at least one label"):
    ce.balanced_class_weights(np.array([], np.int64), 3)
  with pytest.raises(ValueError, match=r"\[0, 3\)"):
    ce.balanced_class_weights(np.array([0, 3]), 3)
  with pytest.raises(ValueError, match=r"\[0, 3\)"):
    ce.balanced_class_weights(np.array([-1, 2]), 3)


# ---- centre loss --------------------------------------------------------------------------
def _unit(x):
  return x / np.linalg.norm(x, axis=1, keepdims=True)


def ref_update(centres, seen, feats, labels, mask, momentum):
  z, centres, seen = _unit(feats.astype(np.float64)), centres.copy(), seen.copy()
  for k in range(len(seen)):
    rows = (labels == k) & (mask > 0)
    if rows.any():
      mean = z[rows].mean(0)
      centres[k] = momentum * centres[k] + (1 - momentum) * mean if seen[k] > 0 else mean
      seen[k] += rows.sum()
  return centres, seen


def test_centres_start_at_the_first_batch_mean_then_move_by_ema():
  k, d = 4, 5
  state = {"centres": jnp.zeros((k, d)), "seen": jnp.zeros(k)}
  want_c, want_s = np.zeros((k, d)), np.zeros(k)
  for step in range(3):
    feats = RNG.normal(size=(6, d)).astype(np.float32)
    labels = np.array([0, 1, 1, 3, 0, 1]) if step != 1 else np.array([0, 0, 3, 3, 3, 2])
    mask = np.ones(6, np.float32) if step != 2 else MASK
    state = center.update_centres(state, jnp.asarray(feats), jnp.asarray(labels),
                                  jnp.asarray(mask), momentum=0.75)
    want_c, want_s = ref_update(want_c, want_s, feats, labels, mask, 0.75)
    np.testing.assert_allclose(np.asarray(state["centres"]), want_c, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(state["seen"]), want_s)
  assert want_s.tolist() == [6, 4, 1, 5]  # class 2 joined in step 1; masked rows not counted


def test_centres_without_a_mask_count_every_row_and_carry_no_gradient():
  feats = jnp.asarray(RNG.normal(size=(4, 3)).astype(np.float32))
  state = {"centres": jnp.zeros((2, 3)), "seen": jnp.zeros(2)}
  new = center.update_centres(state, feats, jnp.asarray([0, 1, 1, 1]))
  assert np.asarray(new["seen"]).tolist() == [1, 3]
  grad = jax.grad(lambda f: jnp.sum(center.update_centres(
      state, f, jnp.asarray([0, 1, 1, 1]))["centres"]))(feats)
  assert np.all(np.asarray(grad) == 0.0)


def test_center_loss_is_the_mean_squared_distance_to_fixed_centres():
  feats = RNG.normal(size=(6, 4)).astype(np.float32)
  centres = _unit(RNG.normal(size=(3, 4))).astype(np.float32)
  dist = ((_unit(feats.astype(np.float64)) - centres[LABELS]) ** 2).sum(1)
  got = center.center_loss(jnp.asarray(feats), jnp.asarray(LABELS), jnp.asarray(centres),
                           jnp.asarray(MASK))
  np.testing.assert_allclose(float(got), (dist * MASK).sum() / MASK.sum(),
                             rtol=numerics.reassociation_rtol(24))
  np.testing.assert_allclose(float(center.center_loss(jnp.asarray(feats), jnp.asarray(LABELS),
                                                      jnp.asarray(centres))),
                             dist.mean(), rtol=numerics.reassociation_rtol(24))
  g_c = jax.grad(lambda c: center.center_loss(jnp.asarray(feats), jnp.asarray(LABELS), c))(
      jnp.asarray(centres))
  g_f = jax.grad(lambda f: center.center_loss(f, jnp.asarray(LABELS), jnp.asarray(centres),
                                              jnp.asarray(MASK)))(jnp.asarray(feats))
  assert np.all(np.asarray(g_c) == 0.0)  # the centres are targets, not parameters
  assert np.all(np.asarray(g_f)[MASK == 0] == 0.0) and np.abs(np.asarray(g_f)).max() > 1e-3


# ---- ACL-CL's defaults and padding; the sqrt sigma heuristic ------------------------------
def test_acl_cl_stops_the_teacher_gradient_by_default_and_ignores_padding():
  from acl_jax.losses import acl_cl_loss  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(5)
  s, t = rng.normal(size=(2, 6, 4)).astype(np.float32)
  s_emb, t_emb = rng.normal(size=(2, 3, 4)).astype(np.float32)
  labels = np.array([0, 1, 2, 1, 0, 2])
  args = tuple(map(jnp.asarray, (s, s_emb, t, t_emb)))
  grads = jax.grad(lambda *a: acl_cl_loss(*a, jnp.asarray(labels), 0.3), argnums=(2, 3))(*args)
  assert all(np.all(np.asarray(g) == 0.0) for g in grads)
  mask = np.array([1, 1, 1, 1, 0, 0], bool)
  padded = acl_cl_loss(*args, jnp.asarray(labels), 0.3, example_mask=jnp.asarray(mask))
  real = acl_cl_loss(jnp.asarray(s[:4]), args[1], jnp.asarray(t[:4]), args[3],
                     jnp.asarray(labels[:4]), 0.3)
  np.testing.assert_allclose(float(padded), float(real), rtol=numerics.reassociation_rtol(20))
  g = jax.grad(lambda f: acl_cl_loss(f, args[1], args[2], args[3], jnp.asarray(labels), 0.3,
                                     example_mask=jnp.asarray(mask)))(args[0])
  assert np.all(np.asarray(g)[~mask] == 0.0) and np.abs(np.asarray(g)[mask]).max() > 1e-4


def test_sigma_sqrt_heuristic_in_float64_on_close_rows_and_its_subsample():
  from scipy.spatial.distance import pdist  # pylint: disable=import-outside-toplevel
  from acl_jax.losses.graph import sigma_sqrt_heuristic  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(3)
  # rows close together: every distance below 1, computed in float64 from float32 input
  emb = (np.ones((40, 6)) + 0.05 * rng.normal(size=(40, 6))).astype(np.float32)
  unit = emb.astype(np.float64) / np.linalg.norm(emb.astype(np.float64), axis=1, keepdims=True)
  assert pdist(unit).max() < 1.0
  assert sigma_sqrt_heuristic(emb) == pytest.approx(np.sqrt(np.median(pdist(unit)) / 3),
                                                    rel=1e-12)
  assert sigma_sqrt_heuristic(emb[:2]) == pytest.approx(np.sqrt(pdist(unit[:2])[0] / 3),
                                                        rel=1e-12)
  # the subsample: max_rows distinct rows drawn with the seed, in order
  big = rng.normal(size=(300, 6))
  rows = np.sort(np.random.default_rng(7).choice(300, 120, replace=False))
  sub = big[rows] / np.linalg.norm(big[rows], axis=1, keepdims=True)
  assert sigma_sqrt_heuristic(big, max_rows=120, seed=7) == pytest.approx(
      np.sqrt(np.median(pdist(sub)) / 3), rel=1e-12)
  assert sigma_sqrt_heuristic(big, max_rows=300) == sigma_sqrt_heuristic(big)


def test_centres_and_centre_loss_under_a_named_axis_are_the_global_batchs():
  """Two shards: the centres move by the global batch's sums, and the per-shard losses
  average to the global batch's loss."""
  feats = RNG.normal(size=(2, 4, 3)).astype(np.float32)
  labels = np.array([[0, 1, 1, 0], [1, 1, 2, 0]])
  mask = np.array([[1, 1, 0, 1], [1, 0, 0, 1]], np.float32)  # 3 and 2 real rows
  state = {"centres": jnp.zeros((3, 3)), "seen": jnp.zeros(3)}
  shard = jax.vmap(lambda f, y, m: center.update_centres(state, f, y, m, axis_name="d"),
                   axis_name="d")(*map(jnp.asarray, (feats, labels, mask)))
  whole = center.update_centres(state, *map(jnp.asarray, (feats.reshape(8, 3),
                                                           labels.reshape(8), mask.reshape(8))))
  for k in ("centres", "seen"):
    np.testing.assert_allclose(np.asarray(shard[k][0]), np.asarray(whole[k]), atol=1e-6)
    np.testing.assert_allclose(np.asarray(shard[k][1]), np.asarray(whole[k]), atol=1e-6)
  c = whole["centres"]
  per = jax.vmap(lambda f, y, m: center.center_loss(f, y, c, m, axis_name="d"),
                 axis_name="d")(*map(jnp.asarray, (feats, labels, mask)))
  want = center.center_loss(*map(jnp.asarray, (feats.reshape(8, 3), labels.reshape(8))), c,
                            jnp.asarray(mask.reshape(8)))
  assert float(jnp.mean(per)) == pytest.approx(float(want), rel=1e-6)


def test_propagation_needs_labelled_and_hidden_nodes():
  from acl_jax.losses.graph import propagate  # pylint: disable=import-outside-toplevel
  x = jnp.asarray(RNG.normal(size=(4, 3)).astype(np.float32))
  for m in (0, 4):
    with pytest.raises(ValueError):
      propagate(x, jnp.eye(2)[jnp.zeros(m, jnp.int32)], 0.5)
  assert propagate(x, jnp.eye(2)[jnp.asarray([0, 1, 1])], 0.5).shape == (1, 2)
