"""Multi-exit training strategies: loss weighting and optimizer-side freezing (SPEC §3)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from acl_jax import losses
from acl_jax.models import label_embeddings
from acl_jax.train import objectives, optim, setup as setup_lib, step as step_lib, strategies
from configs import common
from tests import numerics
from tests.acl_utils import capture_grads, tiny_setup

TOTAL = 6


@pytest.fixture(scope="module")
def setup():
  return tiny_setup(num_batches=1, dropout=0.0, exits="all")


def _cfg(strategy, **me):
  c = common.base_config()
  c.multi_exit.strategy = strategy
  c.multi_exit.update(me)
  if strategy == "acl_cl":
    c.loss.update(common.METHODS["acl_embed"])
  return c


_RUNS = {}


def _run(setup, strategy, steps, **me):
  """Runs `steps` steps of a strategy; returns the params before each step and metrics.

  Cached: two tests read the same 2ST run (each distinct run costs a compile)."""
  key = (id(setup), strategy, steps, tuple(sorted(me.items())))
  if key not in _RUNS:
    _RUNS[key] = _run_uncached(setup, strategy, steps, **me)
  return _RUNS[key]


def _run_uncached(setup, strategy, steps, **me):
  model, params, (batch,) = setup
  c = _cfg(strategy, **me)
  c.optim.update(lr=1e-2, warmup_ratio=0.0)
  mesh = step_lib.make_mesh(jax.devices()[:1])
  tr = setup_lib.make_trainer(c, model, params, mesh, num_labels=3, total_steps=TOTAL,
                              donate=False)
  state, fn, multi = tr.state, tr.train_step, tr.multi_exit
  history, ms = [jax.device_get(state.params)], []
  for _ in range(steps):
    state, m = fn(state, step_lib.shard_batch(batch, mesh))
    history.append(jax.device_get(state.params))
    ms.append(jax.device_get(m))
  return history, ms, multi


def _same(a, b):
  return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_alt_even_steps_touch_only_the_last_head(setup):
  h, _, _ = _run(setup, "alt", 4)
  for s in range(4):
    lower_same = all(_same(h[s][f"exit_{m}"], h[s + 1][f"exit_{m}"]) for m in (1, 2))
    assert lower_same == (s % 2 == 0), f"step {s}"
    assert not _same(h[s]["exit_3"], h[s + 1]["exit_3"])
    assert not _same(h[s]["encoder"], h[s + 1]["encoder"])


def test_2st_stage2_freezes_backbone_bit_identically(setup):
  h, _, multi = _run(setup, "2st", TOTAL)
  s1 = multi.stage1_steps
  assert s1 == TOTAL // 2
  for s in range(TOTAL):
    frozen_main = _same(h[s]["encoder"], h[s + 1]["encoder"]) and _same(h[s]["exit_3"],
                                                                      h[s + 1]["exit_3"])
    frozen_lower = all(_same(h[s][f"exit_{m}"], h[s + 1][f"exit_{m}"]) for m in (1, 2))
    assert frozen_main == (s >= s1) and frozen_lower == (s < s1), f"step {s}"


def test_2st_stage2_clips_on_the_lower_heads_alone(setup):
  """The frozen backbone's gradient is zeroed before clipping (its norm would shrink the
  lower heads' step); the logged grad_norm is the clipped-over gradient."""
  model, _, (batch,) = setup
  h, ms, multi = _run(setup, "2st", TOTAL)
  s = multi.stage1_steps  # the first stage-2 step
  obj = objectives.build_objective(_cfg("2st").loss, num_labels=3, last_exit=3, multi_exit=multi)

  def stage2_loss(p):
    def one(b):
      logits, aux = model.apply({"params": p}, b["input_ids"], b["attention_mask"],
                                b.get("token_type_ids"), train=False)
      return obj.terms(p, logits, aux, b, jax.random.PRNGKey(0), s)[0].main
    return jax.vmap(one, axis_name=step_lib.AXIS)(jax.tree.map(lambda x: x[None], batch))[0]

  g = jax.jit(jax.grad(stage2_loss))(h[s])  # one compile, not one per op
  lower = float(optax.global_norm({k: g[k] for k in ("exit_1", "exit_2")}))
  assert float(optax.global_norm(g)) > 1.01 * lower  # the backbone gradient is not zero
  np.testing.assert_allclose(float(ms[s]["grad_norm"]), lower, rtol=1e-4)


@pytest.mark.parametrize("kind,want", [("uniform", [1 / 3] * 3), ("linear", [1 / 6, 2 / 6, 3 / 6])])
def test_jt_weights(setup, kind, want):
  _, ms, multi = _run(setup, "jt", 1, weights=kind)
  np.testing.assert_allclose(multi.weights, want, rtol=1e-6)
  m = ms[0]
  ce = [m[f"ce/exit_{i}"] for i in (1, 2, 3)]
  np.testing.assert_allclose(m["loss"], np.dot(want, ce), rtol=1e-5)


def test_kd_and_acl_cl_losses_match_their_formulas(setup):
  model, params, (batch,) = setup
  y = jnp.asarray(batch["labels"])
  w = np.full(3, 1 / 3)

  @jax.jit  # the formulas in one compile, not one per op
  def reference(params, ids, mask, y):
    logits, aux = model.apply({"params": params}, ids, mask)
    ce = [losses.cross_entropy(lg, y) for lg in logits]
    # KD on lower exits, CE on the last: "add" (default, SPEC's JT plus KL) is
    # CE_m + a T^2 KL(p_M^T || p_m^T); "convex" is (1-a) CE_m + a T^2 KL.
    pt = jax.nn.softmax(logits[-1] / 2.0)
    kl = [4.0 * jnp.mean(jnp.sum(pt * (jnp.log(pt) - jax.nn.log_softmax(lg / 2.0)), -1))
          for lg in logits[:2]]
    f = aux["feats"]
    cl = [losses.acl_cl_loss(f[i], label_embeddings(params, i + 1), f[2],
                             label_embeddings(params, 3), y, 0.3) for i in range(2)]
    acl = losses.acl_embed_loss(f[2], y, label_embeddings(params, 3), 0.3)
    return ce, kl, cl, acl

  ce, kl, cl, acl = jax.tree.map(float, reference(params, batch["input_ids"],
                                                  batch["attention_mask"], y))
  for form, ce_share in (("add", 1.0), ("convex", 0.7)):
    _, ms, _ = _run(setup, "kd", 1, kd_temperature=2.0, kd_alpha=0.3, kd_form=form)
    want = sum(w[i] * (ce_share * ce[i] + 0.3 * kl[i]) for i in range(2)) + w[2] * ce[2]
    np.testing.assert_allclose(ms[0]["loss/main"], want, rtol=1e-4, err_msg=form)
  # ACL-CL: lower exits CE + lambda_cl * L_CL against the top exit; last exit CE + lam ACL.
  # The ungated step the gate tests below compare against (the metrics are the loss before
  # the update, whatever the optimizer), at lambda_cl's default.
  assert _cfg("acl_cl").multi_exit.lambda_cl == 0.5
  _, m = _acl_cl_step(setup, gate=False)
  want = sum(w[i] * (ce[i] + 0.5 * cl[i]) for i in range(2)) + w[2] * ce[2]
  np.testing.assert_allclose(m["loss/main"], want, rtol=1e-4)
  np.testing.assert_allclose(m["loss/aux"], w[2] * acl, rtol=1e-4)
  np.testing.assert_allclose(m["loss"], want + 0.5 * w[2] * acl, rtol=1e-4)


def test_kd_and_train_acc_skip_padding_examples(setup):
  """Padding rows (example_mask 0) change neither KD nor train_acc: both are means over the
  real examples, like CE."""
  model, params, (batch,) = setup
  c = _cfg("kd")
  multi = strategies.multi_exit_from_config(c.multi_exit, (1, 2, 3), TOTAL)
  obj = objectives.build_objective(c.loss, num_labels=3, last_exit=3, multi_exit=multi)

  @jax.jit  # one compile per batch shape, not one per op
  def terms(b):
    def one(b):
      logits, aux = model.apply({"params": params}, b["input_ids"], b["attention_mask"],
                                b["token_type_ids"])
      return obj.terms(params, logits, aux, b, jax.random.PRNGKey(0), 1)
    return jax.vmap(one, axis_name=step_lib.AXIS)(jax.tree.map(lambda x: x[None], b))

  half = {k: v[:4] for k, v in batch.items()}
  padded = dict(batch, example_mask=np.r_[np.ones(4), np.zeros(4)].astype(np.float32))
  (t_half, m_half), (t_pad, m_pad) = terms(half), terms(padded)
  # The two batch sizes give logits that differ in the last bit (another matmul blocking).
  # KD is T^2 KL, a difference of two cross-entropies of size T^2 log K: its round-off is that
  # size times eps, not relative to the small KL (here ~600 times smaller).
  tol = numerics.reassociation_rtol(half["input_ids"].size)
  kd_scale = multi.kd_temperature**2 * np.log(3)
  for k in ("kd/exit_1", "kd/exit_2"):
    np.testing.assert_allclose(m_pad[k], m_half[k], rtol=tol, atol=tol * kd_scale, err_msg=k)
  np.testing.assert_array_equal(m_pad["train_acc"], m_half["train_acc"])
  np.testing.assert_allclose(t_pad.main, t_half.main, rtol=tol)


def test_gloss_objective_ignores_padding_rows(setup):
  """The G-Loss objective passes example_mask on (per device and gathered): what the padding
  rows hold changes neither the loss nor its gradient."""
  model, params, (batch,) = setup
  c = common.base_config()
  c.loss.update(common.METHODS["gloss"])
  obj = objectives.build_objective(c.loss, num_labels=3, last_exit=3)
  mask = np.r_[np.ones(5), np.zeros(3)].astype(np.float32)

  @jax.jit  # once for both batches (same shapes), instead of op-by-op twice
  def loss_and_grad(b):
    def one(b):
      def loss(p):
        logits, aux = model.apply({"params": p}, b["input_ids"], b["attention_mask"],
                                  b["token_type_ids"])
        return obj.terms(p, logits, aux, b, jax.random.PRNGKey(0), 1)[0].aux
      return jax.value_and_grad(loss)(params)
    return jax.vmap(one, axis_name=step_lib.AXIS)(jax.tree.map(lambda x: x[None], b))

  padded = dict(batch, example_mask=mask)
  other = dict(padded, input_ids=np.where(mask[:, None] > 0, batch["input_ids"],
                                          np.roll(batch["input_ids"], 1, axis=1)),
               labels=np.where(mask > 0, batch["labels"], (batch["labels"] + 1) % 3))
  (l1, g1), (l2, g2) = loss_and_grad(padded), loss_and_grad(other)
  np.testing.assert_allclose(l1, l2, rtol=1e-5)
  for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)


def test_multi_exit_bad_config():
  c = _cfg("pabee")
  with pytest.raises(ValueError, match="Unknown multi_exit.strategy 'pabee'"):
    strategies.multi_exit_from_config(c.multi_exit, (1, 2, 3), 10)
  with pytest.raises(ValueError, match="model.exits='all'"):
    strategies.multi_exit_from_config(_cfg("jt").multi_exit, (1,), 10)
  with pytest.raises(ValueError, match="weights"):
    strategies.multi_exit_from_config(_cfg("jt", weights="square").multi_exit, (1, 2, 3), 10)
  with pytest.raises(ValueError, match="gate_ce"):
    strategies.multi_exit_from_config(_cfg("acl_cl", gate_ce="first").multi_exit, (1, 2, 3),
                                      10)
  c = _cfg("jt")
  c.loss.update(common.METHODS["scl"])
  with pytest.raises(ValueError, match="only ACL-CL"):
    objectives.build_objective(
        c.loss, num_labels=3, last_exit=3,
        multi_exit=strategies.multi_exit_from_config(c.multi_exit, (1, 2, 3), 10))
  c = _cfg("acl_cl")
  c.loss.combine = "convex"  # the final exit's ACL term is additive in multi-exit training
  with pytest.raises(ValueError, match="leave loss.combine"):
    objectives.build_objective(
        c.loss, num_labels=3, last_exit=3,
        multi_exit=strategies.multi_exit_from_config(c.multi_exit, (1, 2, 3), 10))


def test_presets_set_all_exits():
  from configs import glue
  c = glue.get_config("sst2,acl_cl")
  assert c.model.exits == "all" and c.multi_exit.strategy == "acl_cl" and c.loss.gate
  assert glue.get_config("mrpc,2st").multi_exit.strategy == "2st"


def test_head_lr_mult_scales_head_updates_only():
  params = {"encoder": {"b": {"bias": jnp.zeros(3)}}, "exit_1": {"bias": jnp.zeros(2)},
            "exit_2": {"bias": jnp.zeros(2)}}
  grads = jax.tree.map(jnp.ones_like, params)
  for strategy in ("", "jt"):
    tx = optim.make_optimizer(lr=1e-3, total_steps=10, warmup_ratio=0.0, clip_norm=0.0,
                              head_lr_mult=10.0, strategy=strategy, exit_layers=(1, 2))
    up, _ = tx.update(grads, tx.init(params), params)
    enc = float(up["encoder"]["b"]["bias"][0])
    assert enc == pytest.approx(-1e-3, rel=1e-3)
    for k in ("exit_1", "exit_2"):
      assert float(up[k]["bias"][0]) == pytest.approx(10 * enc, rel=1e-5)
  with pytest.raises(ValueError, match="head_lr_mult"):
    optim.make_optimizer(lr=1e-3, total_steps=10, head_lr_mult=0.0)


@pytest.mark.parametrize("strategy", ["2st", "alt"])
def test_frozen_group_keeps_its_adam_state(strategy):
  """A group's AdamW only counts its own updates: 2ST's lower exits start stage 2 as a fresh
  AdamW on the stage-2 schedule (DeeBERT); ALT's lower exits see only the odd steps'
  gradients, at the global schedule's learning rate (PyTorch Adam skips gradient-less
  parameters, as in BERxiT). Stepping a frozen group's Adam would double its first stage-2
  step here and decay its moments on ALT's even steps."""
  total, s1 = 10, 6
  params = {"encoder": {"kernel": jnp.zeros((2, 2))}, "exit_1": {"kernel": jnp.zeros(3)},
            "exit_2": {"kernel": jnp.zeros(3)}}
  rng = np.random.default_rng(0)
  grads = [jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), jnp.float32), params)
           for _ in range(total)]
  kw = dict(lr=1e-2, total_steps=total, warmup_ratio=0.2, clip_norm=0.0, weight_decay=0.0)
  tx = optim.make_optimizer(strategy=strategy, stage1_steps=s1, exit_layers=(1, 2), **kw)
  state = tx.init(params)
  ups = []
  for g in grads:
    u, state = tx.update(g, state, params)
    ups.append(jax.device_get(u["exit_1"]["kernel"]))
  if strategy == "2st":
    steps, lr_fn = list(range(s1, total)), optim.lr_schedule(1e-2, total - s1, 1)
  else:
    steps, base = list(range(1, total, 2)), optim.lr_schedule(1e-2, total, 2)
    lr_fn = lambda k: base(2 * k + 1)
  fresh = optax.adamw(lr_fn, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.0)
  fs = fresh.init(params["exit_1"])
  for t in range(total):
    if t not in steps:
      np.testing.assert_array_equal(ups[t], 0.0, err_msg=f"step {t}")
      continue
    want, fs = fresh.update(grads[t]["exit_1"], fs, params["exit_1"])
    # Adam's update is lr * m / sqrt(v), m a running sum of gradients of both signs: its
    # round-off is eps times the update's scale (~lr), growing with the steps summed into m,
    # not relative to an element that came out small.
    numerics.assert_trees_close_f32(ups[t], want["kernel"], n=total)


_STEPS = {}


def _acl_cl_step(setup, gate_ce="last", **loss):
  """One ACL-CL step from the fixture's params: (the gradient it hands to its optimizer,
  metrics). Cached: several tests compare against the same step, and each distinct one costs
  a compile.

  Gradients, not the params after AdamW: Adam's first step lr * g / (|g| + eps) turns the
  round-off of a gradient element near eps into a change of order lr, and the equalities
  below hold only up to round-off (per-term gradients against the gradient of the sum, a
  gather on one device). They are checked with
  `numerics.assert_trees_close_f32` over the batch's tokens: 8 eps sqrt(96) ~ 9e-6 of each
  leaf's largest element, where at most 6.5 eps was seen. The tests using it pass with
  XLA_FLAGS unset, --xla_cpu_experimental_ynn_fusion_type= (YNN off: XLA's own dots and
  reductions) and --xla_cpu_experimental_ynn_fusion_type=+eltwise,+reduce (YNN for those too).
  """
  key = (id(setup), gate_ce, tuple(sorted(loss.items())))
  if key not in _STEPS:
    _STEPS[key] = _acl_cl_step_uncached(setup, gate_ce, **loss)
  return _STEPS[key]


def _acl_cl_step_uncached(setup, gate_ce, **loss):
  model, params, (batch,) = setup
  mesh = step_lib.make_mesh(jax.devices()[:1])
  c = _cfg("acl_cl", gate_ce=gate_ce)
  c.loss.update(loss)
  tr = setup_lib.make_trainer(c, model, params, mesh, num_labels=3, total_steps=TOTAL,
                              tx=capture_grads(), donate=False)
  state, m = tr.train_step(tr.state, step_lib.shard_batch(batch, mesh))
  return jax.device_get(state.opt_state), jax.device_get(m)


def _tokens(setup):
  return setup[2][0]["input_ids"].size


def _nonzero(tree):
  return any(np.any(x != 0) for x in jax.tree.leaves(tree))


@pytest.mark.parametrize("angle_params", ["all", pytest.param("top", marks=pytest.mark.slow)])
def test_acl_cl_gate_adds_lower_exits_outside_the_gate(setup, angle_params):
  """gate_ce='last' (SPEC §2.5): always open == the ungated sum; always closed == the sum
  without the final exit's ACL term (lam=0): the lower exits' losses go through either way.

  Gradients against a float32 bound, passing under three XLA:CPU kernel sets: see
  `_acl_cl_step`.
  """
  for threshold, ungated in ((180.0, {}), (1e-3, {"lam": 0.0})):
    gated, m = _acl_cl_step(setup, gate=True, gate_threshold=threshold,
                            angle_params=angle_params)
    assert float(m["gate/gate"]) == (1.0 if threshold == 180.0 else 0.0)
    plain, _ = _acl_cl_step(setup, gate=False, **ungated)
    assert _nonzero(gated["encoder"]["layer_0"]), f"threshold {threshold}"
    numerics.assert_trees_close_f32(gated, plain, _tokens(setup))
  # The open and closed references differ (by lam * ACL), so the equalities tell them apart.
  assert numerics.trees_differ_f32(_acl_cl_step(setup, gate=False)[0],
                                   _acl_cl_step(setup, gate=False, lam=0.0)[0], _tokens(setup))


@pytest.mark.slow
def test_acl_cl_contrastive_global_on_one_device_is_the_local_loss(setup):
  """contrastive_global gathers every exit's features over the data axis: on one device the
  step is the local one (test_device_invariance runs gated ACL-CL with it on 1 and 2 devices
  by default).

  Gradients against a float32 bound, passing under three XLA:CPU kernel sets: see
  `_acl_cl_step`.
  """
  local, m_local = _acl_cl_step(setup, gate=True)
  glob, m_glob = _acl_cl_step(setup, gate=True, contrastive_global=True)
  # The loss: a mean of per-exit terms, each a reduction over at most the batch's tokens.
  np.testing.assert_allclose(m_glob["loss"], m_local["loss"],
                             rtol=numerics.reassociation_rtol(_tokens(setup)))
  numerics.assert_trees_close_f32(glob, local, _tokens(setup))


def test_acl_cl_gate_angle_is_against_the_final_exit_ce(setup):
  """The logged angle is between grad(w_M CE_M) and grad(w_M L_ACL) with gate_ce='last', and
  between the gradient of every exit's loss and grad(L_ACL) with 'all'."""
  model, params, (batch,) = setup
  y = jnp.asarray(batch["labels"])
  w = 1 / 3

  def exits(p):
    logits, aux = model.apply({"params": p}, batch["input_ids"], batch["attention_mask"],
                              batch["token_type_ids"])
    return logits, aux["feats"]

  def ce_last(p):
    return w * losses.cross_entropy(exits(p)[0][2], y)

  def ce_all(p):
    logits, f = exits(p)
    cl = [losses.acl_cl_loss(f[i], label_embeddings(p, i + 1), f[2], label_embeddings(p, 3),
                             y, 0.3) for i in range(2)]
    return sum(w * (losses.cross_entropy(logits[i], y) + 0.5 * cl[i]) for i in range(2)) + ce_last(p)

  def acl(p):
    return w * losses.acl_embed_loss(exits(p)[1][2], y, label_embeddings(p, 3), 0.3)

  g = {name: np.concatenate([np.ravel(x) for x in jax.tree.leaves(jax.jit(jax.grad(h))(params))])
       for name, h in (("last", ce_last), ("all", ce_all), ("acl", acl))}

  def angle(a, b):
    return np.degrees(np.arccos(a @ b / np.linalg.norm(a) / np.linalg.norm(b)))

  want = {k: angle(g[k], g["acl"]) for k in ("last", "all")}
  assert abs(want["last"] - want["all"]) > 1.0  # the switch measures different things
  m = {}
  for gate_ce, a in want.items():  # the angle is logged on either branch: reuse the open steps
    _, m[gate_ce] = _acl_cl_step(setup, gate_ce, gate=True, gate_threshold=180.0,
                                 angle_params="all")
    np.testing.assert_allclose(float(m[gate_ce]["gate/angle"]), a, atol=0.05, err_msg=gate_ce)
  # The logged norms are SPEC's |g_CE| and |g_ACL| of the final exit, without its weight w_M.
  np.testing.assert_allclose(float(m["all"]["gate/norm_acl"]), np.linalg.norm(g["acl"]) / w,
                             rtol=1e-4)
  np.testing.assert_allclose(float(m["last"]["gate/norm_ce"]), np.linalg.norm(g["last"]) / w,
                             rtol=1e-4)


def test_top_gate_always_on_equals_ungated_multi_exit_update(setup):
  """angle_params='top' with every exit trained and gate_ce='all': the top partition only
  narrows the angle, the lower exits' losses still reach the lower layers (gate always on ==
  the ungated sum).

  Gradients against a float32 bound, passing under three XLA:CPU kernel sets: see
  `_acl_cl_step`.
  """
  plain, _ = _acl_cl_step(setup, "all", gate=False)
  gated, m = _acl_cl_step(setup, "all", gate=True, gate_threshold=180.0, angle_params="top")
  assert float(m["gate/gate"]) == 1.0
  assert _nonzero(gated["encoder"]["layer_0"]), "no gradient reached the lower layer"
  numerics.assert_trees_close_f32(gated, plain, _tokens(setup))
