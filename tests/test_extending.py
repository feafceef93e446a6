"""The README's extension examples train through every path: the prototype-contrastive loss
(`acl_jax/losses/prototype.py` plus one `objectives.LOSSES` entry) single exit, ungated and
gated, in multi-exit ACL-CL, and data parallel on 2 fake devices; the `margin` exit policy
(`acl_jax/exits/margin.py` plus one `policies.POLICIES` entry) on the reference and the
layer-skipping fast path."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from acl_jax.exits import policies
from acl_jax.losses.prototype import prototype_loss
from acl_jax.train import setup as setup_lib, step as step_lib
from configs import common
from tests import helpers, numerics
from tests.acl_utils import tiny_setup
from tests.test_device_invariance import RTOL


def _reference(z, y, k, tau):
  z = z / np.linalg.norm(z, axis=1, keepdims=True)
  present = sorted(set(y.tolist()))
  protos = {c: z[y == c].sum(0) / np.linalg.norm(z[y == c].sum(0)) for c in present}
  out = []
  for zi, yi in zip(z, y):
    logits = np.array([zi @ protos[c] / tau for c in present])
    out.append(-(logits[present.index(yi)] - np.log(np.exp(logits).sum())))
  return np.mean(out)


def test_prototype_loss_matches_its_formula_and_skips_padding():
  rng = np.random.default_rng(0)
  z, y = rng.normal(size=(8, 5)).astype(np.float32), np.array([0, 1, 1, 2, 0, 1, 2, 2])
  got = float(prototype_loss(jnp.asarray(z), jnp.asarray(y), 4, 0.3))
  np.testing.assert_allclose(got, _reference(z, y, 4, 0.3), rtol=numerics.reassociation_rtol(40))
  mask = np.r_[np.ones(5), np.zeros(3)].astype(np.float32)
  padded = float(prototype_loss(jnp.asarray(z), jnp.asarray(y), 4, 0.3, jnp.asarray(mask)))
  np.testing.assert_allclose(padded, _reference(z[:5], y[:5], 4, 0.3),
                             rtol=numerics.reassociation_rtol(40))
  one_class = jax.grad(lambda f: prototype_loss(f, jnp.zeros(8, jnp.int32), 4, 0.3))(jnp.asarray(z))
  assert float(prototype_loss(jnp.asarray(z), jnp.zeros(8, jnp.int32), 4, 0.3)) == 0.0
  assert np.all(np.isfinite(one_class))


def _proto_config(strategy="", **loss):
  c = common.base_config()
  if strategy:
    c.model.exits = "all"
    c.multi_exit.strategy = strategy
  c.loss.update(name="proto", lam=0.5, tau=0.3, **loss)
  c.optim.update(lr=1e-2, warmup_ratio=0.0)
  return c


@pytest.mark.parametrize("strategy,gate", [("", False), ("", True), ("acl_cl", True)])
def test_prototype_loss_trains_single_exit_gated_and_multi_exit(strategy, gate):
  model, params, batches = tiny_setup(num_batches=2, dropout=0.1,
                                      exits="all" if strategy else "last")
  mesh = step_lib.make_mesh(jax.devices()[:1])
  tr = setup_lib.make_trainer(_proto_config(strategy, gate=gate, gate_threshold=180.0),
                              model, params, mesh, num_labels=3, total_steps=4, donate=False)
  assert tr.objective.roles[:2] == ("main", "aux")
  state = tr.state
  for b in batches:
    state, m = tr.train_step(state, step_lib.shard_batch(b, mesh))
    m = jax.device_get(m)
    assert np.isfinite(m["loss"]) and m["loss/aux"] > 0
    assert (m["gate/gate"] == 1.0) if gate else ("gate/gate" not in m)
  moved = jax.tree.map(lambda a, b: bool(np.any(a != b)), jax.device_get(state.params), params)
  assert all(jax.tree.leaves(moved["encoder"]))  # every encoder leaf trained


@pytest.mark.parametrize("tag", ["proto", pytest.param("proto_cl", marks=pytest.mark.slow)])
def test_prototype_loss_trains_data_parallel_on_two_devices(tiny_model_dir, tmp_path, tag):
  """Gated and pairing over the gathered batch: 2 devices give 1 device's losses, gate
  decisions and params to the float32 bound of test_device_invariance. The loss in ACL-CL
  (proto_cl) only with --runslow: two more training processes."""
  out = {}
  for n in (1, 2):
    path = str(tmp_path / f"dev{n}.npz")
    p = helpers.run_py(["-m", "tests.workers", "device_invariance", tiny_model_dir, str(n),
                        path, tag], timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    out[n] = dict(np.load(path))
  np.testing.assert_allclose(out[2][f"{tag}/loss"], out[1][f"{tag}/loss"], rtol=RTOL)
  np.testing.assert_array_equal(out[2][f"{tag}/gate/gate"], out[1][f"{tag}/gate/gate"])
  for k, v in out[1].items():
    if k.startswith(f"{tag}/params/"):
      scale = np.max(np.abs(v))
      np.testing.assert_allclose(out[2][k], v, rtol=RTOL, atol=RTOL * scale, err_msg=k)


def test_margin_policy_on_the_reference_and_the_fast_path():
  logits = jnp.asarray([[[2.0, 0.0], [0.2, 0.0]],     # exit 1: margin 0.76, 0.05
                        [[0.0, 3.0], [0.0, 0.3]]])    # exit 2
  layer, pred = policies.select_exit(logits, "margin", 0.5)
  np.testing.assert_array_equal(layer, [1, 2])
  np.testing.assert_array_equal(pred, [0, 1])
  with pytest.raises(ValueError, match=r"margin threshold must be a float in \(0, 1\]"):
    policies.select_exit(logits, "margin", 1.5)
  from acl_jax import exits
  model, params, batches = tiny_setup(num_batches=1, exits="all")
  b = batches[0]
  full, _ = model.apply({"params": params}, b["input_ids"], b["attention_mask"],
                        b["token_type_ids"])
  for t in (0.01, 0.3, 1.0):
    want = policies.select_exit(full, "margin", t)
    got = exits.early_exit_predict(model.cfg, params, b["input_ids"], b["attention_mask"],
                                   b["token_type_ids"], "margin", t)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
