"""Mixed precision: `model.dtype=bfloat16` computes in bfloat16, everything else stays float32.

Params, optimizer state, attention softmax, LayerNorm statistics and every loss are float32.
A loss fed bfloat16 features upcasts them first, so it equals the float32 loss of the same
(upcast) values up to float32 round-off; a loss that normalised or formed logits in bfloat16
would be off by about bfloat16's eps (2**-7), some 10^4 times that bound.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from acl_jax import losses
from acl_jax.models import Classifier, init_params
from acl_jax.models.config import EncoderConfig
from acl_jax.train import objectives, optim, step as step_lib
from acl_jax.train.state import TrainState
from configs import common
from tests import numerics

B, D, K = 12, 16, 3
BF16 = jnp.bfloat16


def _feats(seed, n=B, d=D):
  return jnp.asarray(np.random.default_rng(seed).normal(size=(n, d)), BF16)


LABELS = jnp.asarray(np.arange(B) % K, jnp.int32)
MASK = jnp.asarray(np.arange(B) < B - 2)
KEY = jax.random.PRNGKey(0)

# name -> (loss function of the float arrays, the float arrays in bfloat16). Each returns a
# scalar loss (G-Loss: the loss of its (loss, aux) pair).
CASES = {
    "ce": (lambda x: losses.cross_entropy(x, LABELS), [_feats(0, d=K)]),
    "ce_masked_weighted": (lambda x: losses.cross_entropy(
        x, LABELS, jnp.asarray([1.0, 2.0, 0.5]), MASK), [_feats(1, d=K)]),
    "scl": (lambda f: losses.scl_loss(f, LABELS, tau=0.1), [_feats(2)]),
    "acl_embed": (lambda f, e: losses.acl_embed_loss(f, LABELS, e, tau=0.1),
                  [_feats(3), _feats(4, n=K)]),
    "acl_embed_masked": (lambda f, e: losses.acl_embed_loss(
        f, LABELS, e, tau=0.3, anchors="samples", example_mask=MASK), [_feats(5), _feats(6, n=K)]),
    "acl_cl": (lambda s, se, t, te: losses.acl_cl_loss(s, se, t, te, LABELS, tau=0.1),
               [_feats(7), _feats(8, n=K), _feats(9), _feats(10, n=K)]),
    "gloss": (lambda f: losses.gloss(f, LABELS, KEY, K, sigma=0.5)[0], [_feats(11)]),
    "gloss_official_masked": (lambda f: losses.gloss(
        f, LABELS, KEY, K, sigma=0.5, form="official", example_mask=MASK.astype(jnp.float32))[0],
        [_feats(12)]),
    "triplet": (lambda f: losses.triplet_loss(f, LABELS, margin=1.0, normalize=True),
                [_feats(13)]),
    "triplet_raw": (lambda f: losses.triplet_loss(f, LABELS, margin=5.0), [_feats(14)]),
    "cosine": (lambda f: losses.cosine_loss(f, LABELS, example_mask=MASK), [_feats(15)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_loss_upcasts_bf16_features(name):
  fn, args = CASES[name]
  args = [a * 4 for a in args]  # norms well away from 1: normalising is not a no-op
  got = jax.jit(fn)(*args)
  want = jax.jit(fn)(*[a.astype(jnp.float32) for a in args])
  assert got.dtype == jnp.float32, f"{name} returned {got.dtype} on bfloat16 features"
  assert want.dtype == jnp.float32
  # The same float32 computation on the same values, up to summation order (reductions over
  # at most the B x B graph / the feature width).
  numerics.assert_trees_close_f32(np.asarray(got), np.asarray(want), n=B * D)
  # Its gradient too: the cotangent is float32 up to the features, where it is rounded once
  # to bfloat16 (at most half an ulp, 2**-8 relative), plus the float32 round-off above.
  g16 = jax.grad(fn)(*args)
  g32 = jax.grad(fn)(*[a.astype(jnp.float32) for a in args])
  assert g16.dtype == BF16
  g32 = np.asarray(g32)
  np.testing.assert_allclose(np.asarray(g16, np.float32), g32, rtol=2.0 ** -8,
                             atol=numerics.reassociation_rtol(B * D) * np.abs(g32).max())


def _tiny_cfg(dtype):
  return EncoderConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4,
                       intermediate_size=64, max_position_embeddings=32, hidden_dropout=0.0,
                       attention_dropout=0.0, num_labels=2, dtype=dtype)


def _walk(jaxpr):
  """Every equation of a closed jaxpr, nested calls (pjit, custom_jvp, ...) included."""
  for eqn in jaxpr.eqns:
    yield eqn
    for p in eqn.params.values():
      for sub in (p if isinstance(p, (tuple, list)) else [p]):
        inner = getattr(sub, "jaxpr", None)
        if inner is not None:
          yield from _walk(inner if hasattr(inner, "eqns") else inner.jaxpr)


def test_bf16_model_keeps_softmax_layernorm_and_params_float32():
  cfg = _tiny_cfg("bfloat16")
  params = init_params(cfg, jax.random.PRNGKey(0))
  assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}
  ids = jnp.asarray(np.random.default_rng(0).integers(1, 64, (4, 16)), jnp.int32)
  mask = jnp.ones_like(ids).at[1, 9:].set(0)
  fwd = lambda p: Classifier(cfg).apply({"params": p}, ids, mask)
  jaxpr = jax.make_jaxpr(fwd)(params)
  dots, stats, wide_out = [], [], 0
  for eqn in _walk(jaxpr.jaxpr):
    prim = eqn.primitive.name
    if prim == "dot_general":
      dots.append(eqn.invars[0].aval.dtype)
      wide_out += eqn.outvars[0].aval.dtype == jnp.float32
    # The softmax (max, exp, sum) and LayerNorm statistics (sums, rsqrt) are the only
    # reductions and transcendental ops of the forward.
    if prim in ("reduce_max", "reduce_sum", "exp", "rsqrt", "log"):
      stats.append((prim, eqn.invars[0].aval.dtype))
  assert dots and all(d == BF16 for d in dots), f"matmuls not all in bfloat16: {set(dots)}"
  # Each layer's attention scores, and every dense layer's product (`LowPrecisionDense`:
  # rounded to bfloat16 once its bias is added), leave their bf16 dot in float32; only the
  # attention's probs @ v returns bfloat16.
  assert len(dots) - wide_out == cfg.num_layers, (len(dots), wide_out)
  assert {p for p, _ in stats} >= {"reduce_max", "reduce_sum", "exp", "rsqrt"}
  bad = [(p, d) for p, d in stats if d != jnp.float32]
  assert not bad, f"softmax / LayerNorm ops in a narrow dtype: {bad}"
  logits, aux = jax.jit(fwd)(params)  # one compile, not one per op
  assert logits.dtype == jnp.float32
  assert aux["cls"].dtype == BF16  # the hidden states are bfloat16: the compute dtype applies


def _train(dtype, method, steps):
  """Per-step losses of `steps` AdamW steps on one fixed batch, and the final state."""
  cfg = _tiny_cfg(dtype)
  model = Classifier(cfg)
  params = init_params(cfg, jax.random.PRNGKey(0))
  loss_cfg = common.base_config().loss
  loss_cfg.update(common.METHODS[method])
  obj = objectives.build_objective(loss_cfg, num_labels=2, last_exit=cfg.num_layers)
  tx = optim.make_optimizer(lr=3e-3, total_steps=steps, warmup_ratio=0.0)
  mesh = step_lib.make_mesh(jax.devices()[:1])
  state = step_lib.replicate(TrainState.create(params, tx, 0), mesh)
  rng = np.random.default_rng(1)
  labels = np.arange(16) % 2
  # Learnable: the label decides which half of the vocabulary the tokens come from.
  ids = rng.integers(2, 32, (16, 12)) + 30 * labels[:, None]
  batch = {"input_ids": ids.astype(np.int32), "attention_mask": np.ones((16, 12), np.int32),
           "token_type_ids": np.zeros((16, 12), np.int32), "labels": labels.astype(np.int32)}
  batch = step_lib.shard_batch(batch, mesh)
  train_step = step_lib.make_train_step(model, obj, tx, mesh)
  out = []
  for _ in range(steps):
    state, metrics = train_step(state, batch)
    out.append(float(metrics["loss"]))
  return np.array(out), state


def test_bf16_training_tracks_float32():
  """Gated ACL (CE + ACL-Embed, ACL-Grad over all params): every loss path of one exit."""
  steps = 8
  l32, _ = _train("float32", "acl", steps)
  l16, state16 = _train("bfloat16", "acl", steps)
  assert l16[-1] < l16[0] - 0.05, f"bfloat16 loss did not fall: {l16}"
  # The bound for mixed precision: bfloat16 rounding (2**-9 relative per op) on a
  # loss near log 2, amplified through a few layers and steps, stays below 1e-2.
  np.testing.assert_allclose(l16, l32, atol=1e-2, rtol=0)
  leaves = jax.tree.leaves((state16.params, state16.opt_state))
  float_dtypes = {x.dtype for x in leaves if jnp.issubdtype(x.dtype, jnp.floating)}
  assert float_dtypes == {jnp.dtype(jnp.float32)}, float_dtypes


def test_low_precision_dense_is_nn_dense_accumulated_in_float32():
  """`LowPrecisionDense` (the encoder's dense layers in bfloat16) has nn.Dense's params and
  initial values, its outputs within one bfloat16 rounding of nn.Dense(dtype=bfloat16)'s,
  and float32 gradients at least as close to the float32 arithmetic of the same bfloat16
  inputs as nn.Dense's: its products and bias sum accumulate in float32 and round once."""
  import flax.linen as nn  # pylint: disable=import-outside-toplevel
  from acl_jax.models import bert, dense  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(4, 64, 96)), jnp.float32)
  g = jnp.asarray(rng.normal(size=(4, 64, 80)), jnp.float32)
  ours = dense.LowPrecisionDense(80, BF16, bert._INIT)
  ref = nn.Dense(80, dtype=BF16, param_dtype=jnp.float32, kernel_init=bert._INIT)
  params = ours.init(jax.random.PRNGKey(3), x)
  assert jax.tree.all(jax.tree.map(lambda a, b: a.dtype == b.dtype and bool(jnp.all(a == b)),
                                   params, ref.init(jax.random.PRNGKey(3), x)))
  params = jax.tree.map(lambda a: a + 0.05, params)  # a bias that is not zero
  y, y_ref = ours.apply(params, x), ref.apply(params, x)
  assert y.dtype == y_ref.dtype == BF16
  # one rounding apart: within 2 bfloat16 ulps (2^-7 relative) of each other
  np.testing.assert_allclose(np.asarray(y, np.float32), np.asarray(y_ref, np.float32),
                             rtol=2 * 2.0**-7, atol=1e-2)

  def grads(module):
    return jax.grad(lambda p, x: jnp.sum(module.apply(p, x).astype(jnp.float32) * g),
                    argnums=(0, 1))(params, x)
  # float32 arithmetic on the same bfloat16 values: the exact answer up to float32 round-off
  xb = x.astype(BF16).astype(jnp.float32)
  kb = params["params"]["kernel"].astype(BF16).astype(jnp.float32)
  gb = g.reshape(-1, 80).astype(BF16).astype(jnp.float32)
  exact = {"kernel": xb.reshape(-1, 96).T @ gb, "bias": gb.sum(0)}
  (ours_p, ours_x), (ref_p, ref_x) = grads(ours), grads(ref)
  for name, want in exact.items():
    err = float(jnp.max(jnp.abs(ours_p["params"][name] - want)))
    err_ref = float(jnp.max(jnp.abs(ref_p["params"][name] - want)))
    assert ours_p["params"][name].dtype == jnp.float32
    assert err <= err_ref and err <= 1e-4 * float(jnp.max(jnp.abs(want))), (name, err, err_ref)
  np.testing.assert_allclose(np.asarray(ours_x), np.asarray(ref_x), rtol=2 * 2.0**-7,
                             atol=1e-2 * float(jnp.max(jnp.abs(ref_x))))
  # float32 compute keeps nn.Dense itself (and its values bit for bit)
  cfg = _tiny_cfg("float32")
  assert type(bert._dense(cfg, 8, "d")) is nn.Dense
  assert type(bert._dense(_tiny_cfg("bfloat16"), 8, "d")) is dense.LowPrecisionDense
