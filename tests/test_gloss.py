"""G-Loss label propagation and loss, plus the class-weighted CE it is combined with."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from sklearn.utils.class_weight import compute_class_weight

from acl_jax.losses import (
    balanced_class_weights, check_labels, cross_entropy, gloss, propagate, resolve_gamma,
    sigma_sqrt_heuristic)
from acl_jax.losses.graph import (
    DEFAULT_W_FLOOR, check_gamma_keep, split_order, transition_matrix, unreachable_share)
from tests import numerics

SIGMA = 0.667


def ref_transition(x, sigma, w_floor=DEFAULT_W_FLOOR):
  """Loop-free but independent NumPy float64 version of the SPEC §2.6 graph."""
  x = np.asarray(x, np.float64)
  x = x / np.linalg.norm(x, axis=1, keepdims=True)
  n = len(x)
  sq = np.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=-1)
  log_w = -sq / (2 * sigma**2)
  off = ~np.eye(n, dtype=bool)
  w = np.where(off, np.exp(log_w - log_w[off].max()) + w_floor, 0.0)
  d = w.sum(axis=1)
  a = w / np.sqrt(np.outer(d, d))
  t = a / a.sum(axis=0, keepdims=True)
  return t / t.sum(axis=1, keepdims=True)


def ref_propagate(x, y_l, sigma):
  t = ref_transition(x, sigma)
  m = len(y_l)
  return scipy.linalg.solve(np.eye(len(t) - m) - t[m:, m:], t[m:, :m] @ y_l)


def _data(seed, n=12, hidden=6, k=3):
  rng = np.random.default_rng(seed)
  return rng.normal(size=(n, hidden)).astype(np.float32), rng.integers(0, k, n).astype(np.int32)


propagate_jit = jax.jit(propagate)


def test_propagate_matches_scipy_and_rows_sum_to_one():
  x, y = _data(0)
  y_l = np.eye(3)[y[:7]]
  got = np.asarray(propagate_jit(x, y_l, SIGMA))
  np.testing.assert_allclose(got, ref_propagate(x, y_l, SIGMA), rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-5)
  assert got.min() >= 0


def test_closed_form_equals_iterative_propagation():
  x, y = _data(1)
  m = 6
  y_l = np.eye(3)[y[:m]]
  t = ref_transition(x, SIGMA)
  f = np.full((len(x), 3), 1.0 / 3)
  f[:m] = y_l
  for _ in range(20000):
    new = t @ f
    new[:m] = y_l  # labelled rows stay clamped
    if np.abs(new - f).max() < 1e-13:
      break
    f = new
  else:
    pytest.fail("iterative propagation did not converge")
  np.testing.assert_allclose(np.asarray(propagate_jit(x, y_l, SIGMA)), f[m:], rtol=1e-4, atol=1e-6)


def test_propagate_gradient_matches_finite_differences():
  with jax.enable_x64(True):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(8, 4))
    y_l = np.eye(3)[rng.integers(0, 3, 5)]
    r = rng.normal(size=(3, 3))
    f = jax.jit(lambda x: jnp.sum(propagate(x, jnp.asarray(y_l), SIGMA) * r))
    grad = np.asarray(jax.jit(jax.grad(f))(jnp.asarray(x)))
    h = 1e-6
    fd = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
      step = np.zeros_like(x)
      step[idx] = h
      fd[idx] = (float(f(x + step)) - float(f(x - step))) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-8)


def _gloss_ref(x, y, key, k, sigma, gamma_keep, form, class_weights=None):
  """NumPy G-Loss on the split the same key gives (the split itself is part of the API)."""
  n = len(x)
  perm = np.asarray(split_order(key, jnp.arange(n)))
  n_l = int(np.floor(gamma_keep * n + 0.5))
  x, y = x[perm], y[perm]
  f_u = ref_propagate(x, np.eye(k)[y[:n_l]], sigma)
  y_u = y[n_l:]
  w = np.ones(k) if class_weights is None else np.asarray(class_weights, np.float64)
  if form == "clean":
    nll = -np.log(np.clip(f_u[np.arange(len(y_u)), y_u], 1e-8, 1.0))
    return np.sum(w[y_u] * nll) / np.sum(w[y_u])
  logsumexp = np.log(np.sum(np.exp(f_u), axis=1))
  nll = logsumexp - f_u[np.arange(len(y_u)), y_u]
  return np.sum(w[y_u] * nll) / np.sum(w[y_u]) / len(y_u)


@pytest.mark.parametrize("form,weighted",
                         [("clean", False), ("official", True), ("official", False)])
def test_gloss_matches_numpy(form, weighted):
  x, y = _data(3, n=14, k=4)
  key = jax.random.key(7)
  weights = balanced_class_weights(y, 4) if weighted else None
  fn = jax.jit(lambda x, y, key, w: gloss(x, y, key, 4, SIGMA, 0.7, form, w))
  loss, aux = fn(x, y, key, weights)
  want = _gloss_ref(x, y, key, 4, SIGMA, 0.7, form, weights)
  np.testing.assert_allclose(float(loss), want, rtol=1e-4)
  assert 0.0 <= float(aux["lp_acc"]) <= 1.0


def test_split_follows_the_examples_not_their_rows():
  """The kept/hidden split is a function of (key, example ids): the same examples in another
  row order, or gathered from several devices, give the same loss (SPEC §2.6's permutation,
  drawn by a hash per example)."""
  x, y = _data(3, n=14, k=4)
  ids = np.arange(500, 514)
  rows = np.random.default_rng(1).permutation(14)
  key = jax.random.key(7)
  fn = jax.jit(lambda x, y, ids: gloss(x, y, key, 4, SIGMA, 0.7, example_ids=ids)[0])
  # Only the float sums' order differs: a few eps of the loss.
  np.testing.assert_allclose(float(fn(x[rows], y[rows], ids[rows])), float(fn(x, y, ids)),
                             rtol=1e-5)
  order = np.asarray(split_order(key, jnp.asarray(ids)))
  assert sorted(order.tolist()) == list(range(14))  # a permutation
  assert set(ids[order[:10]]) == set(ids[rows][np.asarray(split_order(key, ids[rows]))[:10]])
  assert not np.array_equal(order, np.asarray(split_order(jax.random.key(8), ids)))


@pytest.mark.parametrize("seed", [4, 5])  # accuracies 1/2 and 1/4: not their complements
def test_lp_acc_is_the_argmax_accuracy(seed):
  x, y = _data(seed, n=10)
  key = jax.random.key(0)
  _, aux = jax.jit(lambda x, y: gloss(x, y, key, 3, SIGMA, 0.6))(x, y)
  perm = np.asarray(split_order(key, jnp.arange(10)))
  xp, yp = x[perm], y[perm]
  f_u = ref_propagate(xp, np.eye(3)[yp[:6]], SIGMA)
  np.testing.assert_allclose(float(aux["lp_acc"]), np.mean(f_u.argmax(1) == yp[6:]), rtol=1e-6)


def test_lp_unreachable_counts_hidden_items_whose_class_no_kept_item_has():
  """Padded or not, the measured share is the hidden items whose class is absent from the
  kept labels, and propagation gives those items exactly zero mass on their class."""
  x, _ = _data(6, n=10)
  y = jnp.asarray([0, 0, 0, 0, 0, 1, 2, 2, 1, 2], jnp.int32)
  key = jax.random.key(21)  # keeps no 2: 3 of the 4 hidden items are unreachable
  perm = np.asarray(split_order(key, jnp.arange(10)))
  yp, xp = np.asarray(y)[perm], x[perm]
  kept, hidden = set(yp[:6].tolist()), yp[6:]
  want = np.mean([c not in kept for c in hidden])
  assert 0 < want < 1, "the split should leave a class out"
  fn = jax.jit(lambda x, y, m: gloss(x, y, key, 3, SIGMA, 0.6, example_mask=m)[1])
  for mask in (None, jnp.ones(10)):
    np.testing.assert_allclose(float(fn(x, y, mask)["lp_unreachable"]), want, rtol=1e-6)
  # Padding rows (the masked path) are neither kept nor hidden: two padded rows labelled
  # with a class no kept row has leave the share of the real hidden rows as it was.
  key2 = jax.random.key(5)
  mask = np.asarray([1.0] * 10 + [0.0, 0.0], np.float32)
  order = np.asarray(split_order(key2, jnp.arange(12)))
  real = [i for i in order if mask[i] > 0]  # the masked path keeps round(0.6 * 10) = 6 real
  kept2, hidden2 = {int(y[i]) for i in real[:6]}, [int(y[i]) for i in real[6:]]
  absent = next(c for c in range(3) if c not in kept2)
  yy = np.concatenate([np.asarray(y), [absent, absent]]).astype(np.int32)
  xx = np.concatenate([x, x[:2]])
  want2 = np.mean([c not in kept2 for c in hidden2])
  got = jax.jit(lambda x, y, m: gloss(x, y, key2, 3, SIGMA, 0.6, example_mask=m)[1])(
      jnp.asarray(xx), jnp.asarray(yy), jnp.asarray(mask))
  np.testing.assert_allclose(float(got["lp_unreachable"]), want2, rtol=1e-6)
  f_u = ref_propagate(xp, np.eye(3)[yp[:6]], SIGMA)
  out = [u for u, c in enumerate(hidden) if c not in kept]
  assert np.all(f_u[out, hidden[out]] == 0.0)


def test_unreachable_share_is_the_hypergeometric_expectation():
  """Exact against enumerating every batch graph of a small population, and close to a
  simulation of uniform batches on a larger one; the weighted share is each graph's share of
  its hidden weight, within the simulation's error of the enumerated and the exact value."""
  import itertools  # pylint: disable=import-outside-toplevel
  import math  # pylint: disable=import-outside-toplevel
  labels = np.asarray([0, 0, 0, 1, 1, 2, 3])  # 7 examples, graphs of 4 keeping 3
  w = np.asarray([1.0, 2.0, 3.0, 4.0])
  hit, shares = [], []
  for graph in itertools.permutations(range(7), 4):  # ordered: kept first, hidden last
    kept = {labels[i] for i in graph[:3]}
    hit.append(labels[graph[3]] not in kept)
    shares.append(float(hit[-1]))  # one hidden item: its weight is the graph's
  items, weight = unreachable_share(labels, 4, 4, 0.75)
  assert items == pytest.approx(np.mean(hit), rel=1e-12) and weight == items
  _, weight = unreachable_share(labels, 4, 4, 0.75, w)
  assert weight == pytest.approx(np.mean(shares), abs=0.02)
  rng = np.random.default_rng(0)
  big = rng.choice(20, size=3000, p=np.arange(1, 21) / 210.0)
  items, _ = unreachable_share(big, 20, 32, 0.7)
  runs = [(lambda g: np.mean([c not in set(big[g[:22]]) for c in big[g[22:]]]))(
      rng.choice(len(big), 32, replace=False)) for _ in range(4000)]
  sem = np.std(runs) / np.sqrt(len(runs))
  assert abs(np.mean(runs) - items) < 4 * sem, (np.mean(runs), items, sem)
  # Weight on the rarest class alone: a graph's share is 1 when it hides class 0 and keeps
  # none, so the expectation is P(none kept | some hidden), from the hypergeometric law.
  only = np.zeros(20)
  only[0] = 1.0
  _, weight = unreachable_share(big, 20, 32, 0.7, only)
  n, n0, g, k = len(big), int(np.sum(big == 0)), 32, 22
  c = lambda a, b: math.exp(math.lgamma(a + 1) - math.lgamma(b + 1) - math.lgamma(a - b + 1))
  none_kept = c(n - n0, k) / c(n, k)
  some_hidden_given = 1 - c(n - k - n0, g - k) / c(n - k, g - k)
  some_hidden = 1 - c(n - n0, g - k) / c(n, g - k)
  exact = none_kept * some_hidden_given / some_hidden
  graphs = 20000 * some_hidden
  assert abs(weight - exact) < 4 * math.sqrt(exact * (1 - exact) / graphs), (weight, exact)


def _edge_batches():
  x, y = _data(5)
  dup = np.concatenate([x[:4]] * 3)  # every embedding three times
  clusters = np.concatenate([np.tile(x[:1], (6, 1)), np.tile(x[1:2], (6, 1))])
  return {
      "sigma_0.01": (x, y, 0.01),
      "sigma_100": (x, y, 100.0),
      "duplicates_sigma_0.01": (dup, y, 0.01),
      "two_point_clusters_sigma_0.01": (clusters, y, 0.01),
      "single_class": (x, np.zeros_like(y), SIGMA),
      "zero_features": (np.zeros_like(x), y, SIGMA),
  }


@pytest.mark.parametrize("form", ["clean", "official"])
def test_gloss_is_finite_in_edge_cases(form):
  # sigma is traced, so every edge case of one gamma shares a compile.
  def make(gamma):
    fn = lambda x, y, sigma: gloss(x, y, jax.random.key(1), 3, sigma, gamma, form)
    return jax.jit(jax.value_and_grad(fn, has_aux=True))

  step = make(0.5)
  for name, (x, y, sigma) in _edge_batches().items():
    (loss, _), grad = step(x, y, sigma)
    assert np.isfinite(float(loss)), name
    assert np.all(np.isfinite(np.asarray(grad))), name
  x, y, _ = _edge_batches()["sigma_0.01"]
  for gamma in (1 / 12, 11 / 12):  # one labelled node, then one hidden node
    step = make(gamma)
    for sigma in (0.01, SIGMA, 100.0):
      (loss, _), grad = step(x, y, sigma)
      assert np.isfinite(float(loss)) and np.all(np.isfinite(np.asarray(grad))), (gamma, sigma)


def test_propagate_rows_are_distributions_in_edge_cases():
  for name, (x, y, sigma) in _edge_batches().items():
    f_u = np.asarray(propagate_jit(x, np.eye(3)[y[:6]], sigma))
    assert np.all(np.isfinite(f_u)), name
    np.testing.assert_allclose(f_u.sum(axis=1), 1.0, rtol=1e-5, err_msg=name)
    assert f_u.min() > -1e-5, name


def test_gloss_traces_once_across_keys():
  @jax.jit
  @chex.assert_max_traces(n=1)
  def step(x, y, key):
    return gloss(x, y, key, 3, SIGMA, 0.7)[0]

  x, y = _data(6)
  for seed in range(3):
    step(x, y, jax.random.key(seed))


@pytest.mark.parametrize("kwargs,match", [
    ({"sigma": 0.0}, "sigma .* must be > 0"),
    ({"sigma": -1.0}, "sigma .* must be > 0"),
    ({"gamma_keep": 0.0}, r"gamma_keep .* must lie in \(0, 1\)"),
    ({"gamma_keep": 1.0}, r"gamma_keep .* must lie in \(0, 1\)"),
    ({"gamma_keep": 0.04}, "keeps 0 labelled and 10 hidden"),
    ({"gamma_keep": 0.96}, "keeps 10 labelled and 0 hidden"),
    ({"form": "torch"}, r"Unknown G-Loss form 'torch'; known: \['clean', 'official'\]"),
    ({"num_classes": 0}, "num_classes must be >= 1"),
])
def test_gloss_bad_arguments_raise(kwargs, match):
  x, y = _data(0, n=10)
  args = {"num_classes": 3, "sigma": SIGMA, "gamma_keep": 0.7, **kwargs}
  with pytest.raises(ValueError, match=match):
    gloss(x, y, jax.random.key(0), **args)


def test_gamma_rounding():
  assert check_gamma_keep(0.7, 10) == 7
  assert check_gamma_keep(0.25, 10) == 3  # 2.5 rounds half up
  assert check_gamma_keep(0.05, 10) == 1
  # 0.7 * 45 = 31.5 in decimal, 31.4999... in binary floating point: halves still round up.
  assert check_gamma_keep(0.7, 45) == 32 and check_gamma_keep(0.35, 90) == 32


def test_gloss_masked_split_rounds_like_the_unmasked_one():
  """45 real rows of 48 at gamma_keep 0.7 keep round(31.5) = 32 labels, as an unpadded batch
  of 45 does (the masked count once came from a float32 product, the unmasked from float64)."""
  x, y = _data(11, n=48, k=3)
  mask = np.ones(48, np.float32)
  mask[[3, 17, 40]] = 0.0
  key = jax.random.key(5)
  loss, _ = jax.jit(lambda x, y, m: gloss(x, y, key, 3, SIGMA, 0.7, "clean",
                                          example_mask=m))(x, y, mask)
  perm = np.asarray(split_order(key, jnp.arange(48)))
  order = [i for i in perm if mask[i] > 0]
  want = _gloss_ref_order(x, y, order, check_gamma_keep(0.7, 45), 3, SIGMA, "clean")
  np.testing.assert_allclose(float(loss), want, rtol=1e-4)


def test_resolve_gamma():
  assert resolve_gamma(gamma_keep=0.7) == 0.7
  assert resolve_gamma(gamma_hide=0.3) == pytest.approx(0.7)
  with pytest.raises(ValueError, match="exactly one of gamma_keep .* or gamma_hide"):
    resolve_gamma(gamma_keep=0.7, gamma_hide=0.3)
  with pytest.raises(ValueError, match="exactly one"):
    resolve_gamma()
  with pytest.raises(ValueError, match=r"gamma_hide must lie in \(0, 1\)"):
    resolve_gamma(gamma_hide=1.0)


def test_check_labels():
  check_labels(np.array([0, 2, 1]), 3)
  with pytest.raises(ValueError, match="at least 4"):
    check_labels(np.array([0, 3]), 3)
  with pytest.raises(ValueError, match=r"\[0, 3\)"):
    check_labels(np.array([-1, 0]), 3)
  with pytest.raises(ValueError, match="integers"):
    check_labels(np.array([0.0, 1.0]), 3)


def test_sigma_sqrt_heuristic():
  from scipy.spatial.distance import pdist
  rng = np.random.default_rng(8)
  emb = rng.normal(size=(50, 5))
  unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
  want = np.sqrt(np.median(pdist(unit)) / 3)
  assert sigma_sqrt_heuristic(emb) == pytest.approx(want, rel=1e-9)
  # Subsampling is deterministic and close to the full value.
  big = rng.normal(size=(400, 5))
  a, b = sigma_sqrt_heuristic(big, max_rows=150), sigma_sqrt_heuristic(big, max_rows=150)
  assert a == b
  assert a == pytest.approx(sigma_sqrt_heuristic(big), rel=0.05)
  with pytest.raises(ValueError, match="N >= 2"):
    sigma_sqrt_heuristic(emb[:1])


# Cross-entropy (SPEC §2.1): the class weighting follows torch's CrossEntropyLoss(weight).

def _ce_ref(logits, labels, weights, mask):
  logits = np.asarray(logits, np.float64)
  logp = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
  w = weights[labels] * mask
  return np.sum(w * -logp[np.arange(len(labels)), labels]) / np.sum(w)


def test_cross_entropy_matches_numpy():
  rng = np.random.default_rng(9)
  logits = rng.normal(size=(10, 4)).astype(np.float32)
  labels = rng.integers(0, 4, 10)
  weights = rng.uniform(0.5, 2.0, 4).astype(np.float32)
  mask = (rng.uniform(size=10) > 0.3).astype(np.float32)
  ce = jax.jit(cross_entropy)
  np.testing.assert_allclose(float(ce(logits, labels)), _ce_ref(logits, labels, np.ones(4), 1.0),
                             rtol=1e-5)
  np.testing.assert_allclose(float(ce(logits, labels, weights, mask)),
                             _ce_ref(logits, labels, weights, mask), rtol=1e-5)
  assert float(ce(logits, labels, example_mask=np.zeros(10))) == 0.0


def test_cross_entropy_axis_name_gives_the_global_loss():
  rng = np.random.default_rng(10)
  logits = rng.normal(size=(12, 3)).astype(np.float32)
  labels = rng.integers(0, 3, 12)
  weights = np.array([0.5, 1.0, 3.0], np.float32)
  mask = np.ones(12, np.float32)
  mask[[1, 2, 3, 7]] = 0  # uneven padding across the two shards

  def sharded(logits):
    local = jax.vmap(
        lambda lg, lb, m: cross_entropy(lg, lb, weights, m, axis_name="d"),
        axis_name="d")(logits.reshape(2, 6, 3), labels.reshape(2, 6), mask.reshape(2, 6))
    return jnp.mean(local)  # pmean across the two shards

  global_loss = lambda lg: cross_entropy(lg, labels, weights, mask)
  # Two shards' sums against one sum over the 12 rows: float32 reassociation.
  np.testing.assert_allclose(float(jax.jit(sharded)(logits)), float(jax.jit(global_loss)(logits)),
                             rtol=numerics.reassociation_rtol(12))
  numerics.assert_trees_close_f32(np.asarray(jax.jit(jax.grad(sharded))(logits)),
                                  np.asarray(jax.jit(jax.grad(global_loss))(logits)), n=12)


def test_balanced_class_weights_match_sklearn():
  labels = np.array([0, 0, 0, 1, 2, 2, 4])  # class 3 absent
  got = balanced_class_weights(labels, 5)
  present = np.unique(labels)
  want = compute_class_weight("balanced", classes=present, y=labels)
  np.testing.assert_allclose(got[present], want, rtol=1e-6)
  assert got[3] == 1.0
  with pytest.raises(ValueError, match=r"\[0, 4\)"):
    balanced_class_weights(labels, 4)


def _gloss_ref_order(x, y, order, n_l, k, sigma, form, class_weights=None):
  """NumPy G-Loss on the rows `order` (labelled first n_l); class weights for "clean"."""
  x, y = x[order], y[order]
  f_u = ref_propagate(x, np.eye(k)[y[:n_l]], sigma)
  y_u = y[n_l:]
  if form == "clean":
    w = np.ones(k) if class_weights is None else np.asarray(class_weights, np.float64)
    nll = -np.log(np.clip(f_u[np.arange(len(y_u)), y_u], 1e-8, 1.0))
    return np.sum(w[y_u] * nll) / np.sum(w[y_u])
  logsumexp = np.log(np.sum(np.exp(f_u), axis=1))
  return np.mean(logsumexp - f_u[np.arange(len(y_u)), y_u]) / len(y_u)


@pytest.mark.parametrize("form", ["clean", "official"])
def test_gloss_padding_rows_leave_the_graph(form):
  """With example_mask, padding rows change neither the loss nor the gradient of the real
  rows (and get none): the loss is G-Loss on the real rows, split in the key's order with
  round(gamma_keep * B_real) labelled. An all-ones mask gives the unmasked loss."""
  x, y = _data(8, n=14, k=3)
  mask = np.ones(14, np.float32)
  mask[[2, 5, 6, 11]] = 0.0  # 10 real rows
  key = jax.random.key(3)
  step = jax.jit(jax.value_and_grad(
      lambda x, y, m: gloss(x, y, key, 3, SIGMA, 0.7, form, example_mask=m), has_aux=True))
  (loss, aux), grad = step(x, y, mask)
  perm = np.asarray(split_order(key, jnp.arange(14)))
  order = [i for i in perm if mask[i] > 0]
  want = _gloss_ref_order(x, y, order, 7, 3, SIGMA, form)  # round(0.7 * 10) = 7 labelled
  np.testing.assert_allclose(float(loss), want, rtol=1e-4)
  assert 0.0 <= float(aux["lp_acc"]) <= 1.0
  assert np.all(np.asarray(grad)[mask == 0] == 0.0)
  x2, y2 = x.copy(), y.copy()
  x2[mask == 0] = 100.0 * _data(9, n=14)[0][mask == 0]
  y2[mask == 0] = 0
  (loss2, _), grad2 = step(x2, y2, mask)
  # One compiled graph, and the padding enters only multiplied by 0: equal up to the last bit
  # on any machine, so these bounds have room to spare.
  np.testing.assert_allclose(float(loss2), float(loss), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(grad2), np.asarray(grad), rtol=1e-5, atol=1e-9)
  unmasked = jax.jit(jax.value_and_grad(lambda x, y: gloss(x, y, key, 3, SIGMA, 0.7, form),
                                        has_aux=True))
  (full, _), g_full = step(x, y, np.ones(14, np.float32))
  (want, _), g_want = unmasked(x, y)
  # Two graphs for one quantity: float32 reassociation over the 14 graph nodes.
  np.testing.assert_allclose(float(full), float(want), rtol=numerics.reassociation_rtol(14))
  numerics.assert_trees_close_f32(np.asarray(g_full), np.asarray(g_want), n=14)


def test_gloss_masked_path_matches_the_unmasked_one():
  """The static-shape masked solve (identity rows for non-hidden nodes), run on a batch
  without padding, agrees with the unmasked solve; one real row gives loss 0, not NaN."""
  from acl_jax.losses.graph import _gloss_masked
  x, y = _data(10, n=12, k=3)
  real = jnp.ones(12, bool)
  for form in ("clean", "official"):
    got, aux = jax.jit(lambda x, y: _gloss_masked(x, y, real, 0.7, 3, SIGMA, form, None, 1e-8,
                                                  DEFAULT_W_FLOOR))(x, y)
    want = _gloss_ref_order(x, y, np.arange(12), 8, 3, SIGMA, form)
    np.testing.assert_allclose(float(got), want, rtol=1e-4)
  one = jnp.zeros(12, bool).at[4].set(True)
  loss, grad = jax.jit(jax.value_and_grad(lambda x: _gloss_masked(
      x, y, one, 0.7, 3, SIGMA, "clean", None, 1e-8, DEFAULT_W_FLOOR)[0]))(x)
  assert float(loss) == 0.0 and np.all(np.isfinite(np.asarray(grad)))


def test_sqrt_sigma_is_calibrated_once_and_resumed(tiny_model_dir, tmp_path, monkeypatch):
  """sigma_mode "sqrt": the heuristic's sigma is the family's calibration, kept in the
  checkpoint; a resume builds G-Loss with it (the heuristic does not run again) and ends
  where a straight run does."""
  from acl_jax import losses
  from acl_jax.train import loop
  from tests import helpers
  cfg = lambda: helpers.tiny_config(tiny_model_dir, "runlocal,gloss_sqrt")
  straight = loop.train_and_evaluate(cfg(), str(tmp_path / "straight"))

  wd = str(tmp_path / "resumed")
  with helpers.crash_at_best_save(3) as metas:
    loop.train_and_evaluate(cfg(), wd)
  sigma = metas[-1]["calibration"]["sigma"]
  assert sigma > 0 and isinstance(sigma, float)

  def no_heuristic(*a, **k):
    raise AssertionError("the resume recomputed sigma")
  monkeypatch.setattr(losses, "sigma_sqrt_heuristic", no_heuristic)
  resumed = loop.train_and_evaluate(cfg(), wd)
  assert resumed["train"]["params_sha256"] == straight["train"]["params_sha256"]


@pytest.mark.parametrize("form", ["clean", "official"])
def test_class_weights_summing_below_one_still_normalise(form):
  """The weighted mean divides by the hidden nodes' weight sum even when it is below 1 (one
  hidden node of weight 0.25): equal class weights give the unweighted loss, masked or not."""
  x, y = _data(5, n=8, k=2)
  key = jax.random.key(1)
  fn = jax.jit(lambda x, y, w, m: gloss(x, y, key, 2, SIGMA, 0.875, form, w, example_mask=m))
  quarter = jnp.full((2,), 0.25)
  for mask in (None, jnp.ones(8)):  # 7 labelled, 1 hidden
    np.testing.assert_allclose(float(fn(x, y, quarter, mask)[0]),
                               float(fn(x, y, None, mask)[0]), rtol=1e-6)
  # With padding the masked path solves its own system: 6 real rows, 5 kept, 1 hidden.
  pad = jnp.asarray([1, 1, 1, 0, 1, 1, 1, 0], jnp.float32)
  np.testing.assert_allclose(float(fn(x, y, quarter, pad)[0]), float(fn(x, y, None, pad)[0]),
                             rtol=1e-6)


def test_transition_matrix_at_a_small_sigma_and_in_bfloat16():
  """At sigma 0.1 the raw weights underflow float32 (exp(-100) and below): the shift by the
  strongest edge keeps the graph the float64 one. bfloat16 features are upcast first."""
  x, _ = _data(2)
  got = np.asarray(jax.jit(transition_matrix)(x, 0.1))
  np.testing.assert_allclose(got, ref_transition(x, 0.1), rtol=1e-4, atol=1e-6)
  xb = jnp.asarray(x, jnp.bfloat16)
  tb = jax.jit(transition_matrix)(xb, SIGMA)
  assert tb.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(tb), ref_transition(np.asarray(xb, np.float32), SIGMA),
                             rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("n_real,n_keep", [(2, 1), (3, 2)])
def test_gloss_on_a_few_real_rows_keeps_between_one_and_all_but_one(n_real, n_keep):
  """round(0.7 * B_real) labels are kept, at least 1 and at most B_real - 1: of 2 real rows
  1 (0.7 * 2 rounds to 1), of 3 rows 2."""
  x, y = _data(11, n=10, k=2)
  mask = np.zeros(10, np.float32)
  mask[[1, 4, 8][:n_real]] = 1.0
  key = jax.random.key(5)
  loss, _ = jax.jit(lambda x, y, m: gloss(x, y, key, 2, SIGMA, 0.7, "clean",
                                          example_mask=m))(x, y, mask)
  perm = np.asarray(split_order(key, jnp.arange(10)))
  order = [i for i in perm if mask[i] > 0]
  want = _gloss_ref_order(x, y, order, n_keep, 2, SIGMA, "clean")
  np.testing.assert_allclose(float(loss), want, rtol=1e-4)


def test_weighted_gloss_with_padding_keeps_its_class_weights():
  x, y = _data(12, n=12, k=3)
  mask = np.ones(12, np.float32)
  mask[[0, 7]] = 0.0
  weights = np.array([0.5, 2.0, 1.0], np.float32)
  key = jax.random.key(9)
  loss, _ = jax.jit(lambda x, y, m, w: gloss(x, y, key, 3, SIGMA, 0.7, "clean", w,
                                             example_mask=m))(x, y, mask, weights)
  order = [i for i in np.asarray(split_order(key, jnp.arange(12))) if mask[i] > 0]
  want = _gloss_ref_order(x, y, order, 7, 3, SIGMA, "clean", weights)  # round(0.7 * 10)
  np.testing.assert_allclose(float(loss), want, rtol=1e-4)
  assert abs(want - _gloss_ref_order(x, y, order, 7, 3, SIGMA, "clean")) > 1e-3


def test_floor_share_counts_each_graphs_edges_below_the_floor():
  """Against a NumPy count over consecutive graphs of graph_size rows, the strongest edge
  left out; one row has no edge."""
  from acl_jax.losses.graph import gloss_floor_share  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(1)
  x = rng.normal(size=(12, 4))
  def ref(x, sigma, g, floor=DEFAULT_W_FLOOR):
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    shares = []
    for i in range(0, len(u) - g + 1, g):
      b = u[i:i + g]
      d2 = np.array([[np.sum((p - q) ** 2) for q in b] for p in b])
      w = [-d2[a, c] / (2 * sigma ** 2) for a in range(g) for c in range(g) if a != c]
      w = np.array(w)
      shares.append(np.sum(w - w.max() < np.log(floor)) / (len(w) - 2))
    return float(np.mean(shares))
  for sigma, g in ((0.08, 4), (0.1, 6), (0.12, 12), (0.1, 5)):
    got = gloss_floor_share(x, sigma, g)
    assert got == pytest.approx(ref(x, sigma, g), abs=1e-12)
  assert 0.0 < gloss_floor_share(x, 0.1, 6) < 1.0
  assert gloss_floor_share(x[:1], 0.01, 8) == 0.0


def test_gloss_reach_reads_each_corpus_train_split(tmp_path, capsys):
  """scripts.gloss_reach: the shares of a TextGCN corpus's train split (dev held out), its
  balanced weights included, printed under the study's name for the corpus."""
  import gzip  # pylint: disable=import-outside-toplevel
  from acl_jax import data  # pylint: disable=import-outside-toplevel
  from acl_jax.losses import balanced_class_weights  # pylint: disable=import-outside-toplevel
  from scripts import gloss_reach  # pylint: disable=import-outside-toplevel
  root = tmp_path / "20ng"
  (root / "corpus").mkdir(parents=True)
  labels = [f"c{i % 5}" for i in range(60)] + [f"c{i}" for i in range(5, 8)]  # 3 singletons
  (root / "20ng.txt").write_text("\n".join(
      f"{i}\t20news-bydate-{'test' if i % 7 == 0 else 'train'}\t{c}"
      for i, c in enumerate(labels)))
  with gzip.open(root / "corpus" / "20ng.txt.gz", "wb") as f:
    f.write("\n".join(f"document {i}" for i in range(len(labels))).encode())
  train = np.asarray(data.load_task("20ng", str(tmp_path)).splits["train"]["label"])
  items, weight = unreachable_share(train, 8, 8, 0.75, balanced_class_weights(train, 8))
  assert weight > items > 0
  assert gloss_reach.main(["--data_dir", str(tmp_path), "--tasks", "20ng", "--batch_size", "8",
                           "--gamma_keep", "0.75"]) == 0
  row = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("| 20NG"))
  assert row == f"| 20NG | 8 | {len(train)} | {100 * items:.1f} | {100 * weight:.1f} |"
