"""SCL, ACL-Embed and ACL-CL against a plain NumPy loop of the SPEC §2.2 formula."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from acl_jax.losses import acl_cl_loss, acl_embed_loss, masked_supcon, scl_loss
from tests import numerics

TAU = 0.3

# Jitted entry points: one XLA compile per shape is far cheaper on CPU than eager
# op-by-op dispatch, which compiles every primitive separately.
scl = jax.jit(scl_loss, static_argnames="tau")
acl_embed = jax.jit(acl_embed_loss, static_argnames=("tau", "anchors"))
acl_cl = jax.jit(acl_cl_loss, static_argnames=("tau", "teacher_grad"))


def value_and_grad(fn, argnums=0):
  return jax.jit(jax.value_and_grad(fn, argnums=argnums))


def _unit(x):
  x = np.asarray(x, np.float64)
  return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def ref_supcon(z, labels, anchors, tau):
  """Loop form of SPEC §2.2 over items z [n, d] with an explicit anchor list."""
  losses = []
  for i in anchors:
    positives = [j for j in range(len(z)) if j != i and labels[j] == labels[i]]
    if not positives:
      continue
    contrast = [a for a in range(len(z)) if a != i]
    denom = sum(np.exp(z[i] @ z[a] / tau) for a in contrast)
    terms = [np.log(np.exp(z[i] @ z[p] / tau) / denom) for p in positives]
    losses.append(-sum(terms) / len(positives))
  return float(np.mean(losses)) if losses else 0.0


def _batch(seed, batch, hidden, num_classes, present=None):
  rng = np.random.default_rng(seed)
  feats = rng.normal(size=(batch, hidden)).astype(np.float32)
  classes = np.arange(num_classes) if present is None else np.asarray(present)
  labels = rng.choice(classes, size=batch).astype(np.int32)
  label_emb = rng.normal(size=(num_classes, hidden)).astype(np.float32)
  return feats, labels, label_emb


@pytest.mark.parametrize("num_classes", [2, 20])
def test_scl_matches_numpy(num_classes):
  feats, labels, _ = _batch(0, 12, 16, num_classes)
  got = scl(jnp.asarray(feats), jnp.asarray(labels), tau=TAU)
  want = ref_supcon(_unit(feats), labels, range(len(feats)), TAU)
  np.testing.assert_allclose(float(got), want, rtol=1e-5)


@pytest.mark.parametrize("anchors", ["all", "samples"])
@pytest.mark.parametrize("num_classes,present", [(2, [1]), (2, None), (20, [0, 3, 7, 19])])
def test_acl_embed_matches_numpy(anchors, num_classes, present):
  # `present` leaves classes out of the batch: their embeddings are negatives only.
  feats, labels, label_emb = _batch(1, 10, 8, num_classes, present)
  got = acl_embed(jnp.asarray(feats), jnp.asarray(labels), jnp.asarray(label_emb), tau=TAU,
                  anchors=anchors)
  items = np.concatenate([_unit(feats), _unit(label_emb)])
  item_labels = np.concatenate([labels, np.arange(num_classes)])
  anchor_ids = range(len(items)) if anchors == "all" else range(len(feats))
  want = ref_supcon(items, item_labels, anchor_ids, TAU)
  np.testing.assert_allclose(float(got), want, rtol=1e-5)


@pytest.mark.parametrize("num_classes,present", [(2, None), (20, [2, 5, 11])])
def test_acl_cl_matches_numpy(num_classes, present):
  rng = np.random.default_rng(2)
  s_feats, labels, s_emb = _batch(3, 9, 8, num_classes, present)
  t_feats = rng.normal(size=s_feats.shape).astype(np.float32)
  t_emb = rng.normal(size=s_emb.shape).astype(np.float32)
  got = acl_cl(*map(jnp.asarray, (s_feats, s_emb, t_feats, t_emb, labels)), tau=TAU)
  classes = np.arange(num_classes)
  items = np.concatenate([_unit(s_feats), _unit(s_emb), _unit(t_feats), _unit(t_emb)])
  item_labels = np.concatenate([labels, classes, labels, classes])
  num_student = len(s_feats) + num_classes
  want = ref_supcon(items, item_labels, range(num_student), TAU)
  np.testing.assert_allclose(float(got), want, rtol=1e-5)


def test_acl_cl_teacher_stop_gradient():
  rng = np.random.default_rng(4)
  s_feats, labels, s_emb = _batch(5, 8, 6, 3)
  t_feats = rng.normal(size=s_feats.shape).astype(np.float32)
  t_emb = rng.normal(size=s_emb.shape).astype(np.float32)
  args = tuple(map(jnp.asarray, (s_feats, s_emb, t_feats, t_emb)))
  grad_fn = lambda tg: jax.jit(jax.grad(
      lambda *a: acl_cl_loss(*a, jnp.asarray(labels), TAU, teacher_grad=tg),
      argnums=(0, 1, 2, 3)))(*args)
  frozen, live = grad_fn(False), grad_fn(True)
  assert np.all(np.asarray(frozen[2]) == 0) and np.all(np.asarray(frozen[3]) == 0)
  assert np.abs(np.asarray(live[2])).max() > 1e-4 and np.abs(np.asarray(live[3])).max() > 1e-4
  # Switching teacher gradients on must not change the student's own gradients, beyond the
  # round-off of another fusion of sums over the student's and teacher's 8 items and 3 label
  # embeddings each.
  numerics.assert_trees_close_f32(frozen[:2], live[:2], n=2 * (8 + 3))


def _all_finite(tree):
  return all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(tree))


def test_all_labels_unique_gives_zero_loss_and_zero_grad():
  feats, _, _ = _batch(6, 6, 4, 6)
  labels = jnp.arange(6)
  loss, grad = value_and_grad(lambda f: scl_loss(f, labels, TAU))(jnp.asarray(feats))
  assert float(loss) == 0.0
  assert np.all(np.asarray(grad) == 0)


def test_single_class_batch_is_finite():
  feats, _, label_emb = _batch(7, 6, 4, 2)
  labels = jnp.zeros(6, jnp.int32)
  for fn in (lambda f: scl_loss(f, labels, TAU),
             lambda f: acl_embed_loss(f, labels, jnp.asarray(label_emb), TAU)):
    loss, grad = value_and_grad(fn)(jnp.asarray(feats))
    assert np.isfinite(float(loss)) and _all_finite(grad)


def test_zero_feature_vectors_are_finite():
  feats = jnp.zeros((5, 4)).at[0].set(1.0)
  labels = jnp.array([0, 0, 1, 1, 0])
  label_emb = jnp.zeros((2, 4))
  fns = [
      lambda f, l: scl_loss(f, labels, TAU),
      lambda f, l: acl_embed_loss(f, labels, l, TAU),
      lambda f, l: acl_cl_loss(f, l, f, l, labels, TAU, teacher_grad=True),
  ]
  for fn in fns:
    loss, grads = value_and_grad(fn, argnums=(0, 1))(feats, label_emb)
    assert np.isfinite(float(loss)) and _all_finite(grads)


def test_single_example_batch():
  loss, grad = value_and_grad(lambda f: scl_loss(f, jnp.array([0]), TAU))(jnp.ones((1, 3)))
  assert float(loss) == 0.0 and _all_finite(grad)


def test_example_mask_equals_subset():
  feats, labels, label_emb = _batch(8, 10, 6, 3)
  mask = np.array([1, 1, 0, 1, 1, 1, 0, 1, 1, 0], bool)
  full = acl_embed(jnp.asarray(feats), jnp.asarray(labels), jnp.asarray(label_emb), tau=TAU,
                   example_mask=jnp.asarray(mask))
  sub = acl_embed(jnp.asarray(feats[mask]), jnp.asarray(labels[mask]),
                  jnp.asarray(label_emb), tau=TAU)
  # Masked terms are exact zeros; the rest is summed in another order: float32 reassociation
  # over the 10 items and 3 label embeddings.
  rtol = numerics.reassociation_rtol(10 + 3)
  np.testing.assert_allclose(float(full), float(sub), rtol=rtol)
  full_scl = scl(jnp.asarray(feats), jnp.asarray(labels), tau=TAU, example_mask=jnp.asarray(mask))
  sub_scl = scl(jnp.asarray(feats[mask]), jnp.asarray(labels[mask]), tau=TAU)
  np.testing.assert_allclose(float(full_scl), float(sub_scl), rtol=rtol)


def test_masked_supcon_no_anchor_is_zero():
  z = jnp.eye(4)
  loss = jax.jit(masked_supcon, static_argnames="tau")(
      z, jnp.array([0, 0, 1, 1]), jnp.zeros(4, bool), tau=TAU)
  assert float(loss) == 0.0


def test_jit_traces_once():
  @jax.jit
  @chex.assert_max_traces(n=1)
  def step(feats, labels, label_emb):
    return acl_embed_loss(feats, labels, label_emb, TAU) + scl_loss(feats, labels, TAU)

  for seed in range(3):
    feats, labels, label_emb = _batch(seed, 8, 4, 3)
    assert np.isfinite(float(step(feats, labels, label_emb)))


@pytest.mark.parametrize("tau", [0.0, -0.3])
def test_bad_tau_raises(tau):
  feats, labels, label_emb = _batch(0, 4, 3, 2)
  with pytest.raises(ValueError, match="tau .* must be > 0"):
    scl_loss(feats, labels, tau)
  with pytest.raises(ValueError, match="tau"):
    acl_embed_loss(feats, labels, label_emb, tau)
  with pytest.raises(ValueError, match="tau"):
    acl_cl_loss(feats, label_emb, feats, label_emb, labels, tau)


def test_bad_anchors_raises():
  feats, labels, label_emb = _batch(0, 4, 3, 2)
  with pytest.raises(ValueError, match=r"Unknown anchors 'labels'; known: \['all', 'samples'\]"):
    acl_embed_loss(feats, labels, label_emb, TAU, anchors="labels")


def test_registry():
  from acl_jax.train.objectives import LOSSES, get_loss  # pylint: disable=import-outside-toplevel
  assert set(LOSSES) >= {"ce", "scl", "acl_embed", "gloss", "triplet", "cosine"}
  assert (get_loss("scl").defaults["lam"], get_loss("scl").combine) == (0.9, "convex")  # SPEC §2.2
  assert (get_loss("acl_embed").defaults["lam"],
          get_loss("acl_embed").combine) == (0.5, "additive")
  with pytest.raises(ValueError, match="Unknown loss.name 'supcon'; known: .*acl_embed"):
    get_loss("supcon")
