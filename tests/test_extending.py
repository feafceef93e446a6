"""The README's extension examples train through every path: the prototype-contrastive loss
(`acl_jax/losses/prototype.py` plus one `objectives.LOSSES` entry) single exit, ungated and
gated and in multi-exit ACL-CL (data parallel on 1 and 2 fake devices: test_device_invariance's
"proto" and, with --runslow, "proto_cl"); the `margin` exit policy
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
from tests import numerics
from tests.acl_utils import tiny_setup


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
