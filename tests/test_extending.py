"""The README's extension examples train through every path: a loss family added from one file
and one `objectives.LOSSES` entry, with its own default and state; the centre loss
(`acl_jax/losses/center.py`, state between steps, resumed bit for bit) and the
prototype-contrastive loss (`acl_jax/losses/prototype.py`) single exit, ungated and gated and in
multi-exit ACL-CL (data parallel on 1 and 2 fake devices: test_device_invariance's
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


def _proto_config(strategy="", name="proto", **loss):
  c = common.base_config()
  if strategy:
    c.model.exits = "all"
    c.multi_exit.strategy = strategy
  c.loss.update(name=name, lam=0.5, tau=0.3, **loss)
  c.optim.update(lr=1e-2, warmup_ratio=0.0)
  return c


@pytest.mark.parametrize("name", ["proto", "center"])
@pytest.mark.parametrize("strategy,gate", [("", False), ("", True), ("acl_cl", True)])
def test_example_losses_train_single_exit_gated_and_multi_exit(strategy, gate, name):
  model, params, batches = tiny_setup(num_batches=2, dropout=0.1,
                                      exits="all" if strategy else "last")
  mesh = step_lib.make_mesh(jax.devices()[:1])
  tr = setup_lib.make_trainer(_proto_config(strategy, name, gate=gate, gate_threshold=180.0),
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
  full, _ = jax.jit(model.apply)({"params": params}, b["input_ids"], b["attention_mask"],
                                 b["token_type_ids"])  # one compile, not one per op
  for t in (0.01, 0.3, 1.0):
    want = policies.select_exit(full, "margin", t)
    got = exits.early_exit_predict(model.cfg, params, b["input_ids"], b["attention_mask"],
                                   b["token_type_ids"], "margin", t)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def _saved_state(workdir, step):
  """The TrainState of the workdir's latest checkpoint at `step`, as a dict of numpy arrays."""
  import os
  import orbax.checkpoint as ocp
  with ocp.PyTreeCheckpointer() as c:
    return c.restore(os.path.join(workdir, "ckpt", str(step), "state"))


def test_center_loss_state_resumes_exactly(tiny_model_dir, tmp_path):
  """The centre loss's EMA centres are loss state in the TrainState: a run killed after its
  step-3 checkpoint and resumed ends with the straight run's params, optimizer state and
  centres, bit for bit; gated like ACL."""
  from acl_jax.train import loop
  from tests import helpers
  cfg = lambda: helpers.tiny_config(tiny_model_dir, **{"loss.name": "center", "loss.gate": True})
  straight = loop.train_and_evaluate(cfg(), str(tmp_path / "straight"))
  wd = str(tmp_path / "resumed")
  with helpers.crash_at_best_save(3):
    loop.train_and_evaluate(cfg(), wd)
  resumed = loop.train_and_evaluate(cfg(), wd)
  for k in ("params_sha256", "gate_on_fraction", "zero_grad_steps"):  # run sums resume too
    assert resumed["train"][k] == straight["train"][k]
  a, b = _saved_state(str(tmp_path / "straight"), 6), _saved_state(wd, 6)
  assert a["loss_state"]["seen"].sum() == 6 * 8  # every real example of 6 batches of 8
  assert np.abs(a["loss_state"]["centres"]).sum() > 0
  jax.tree.map(np.testing.assert_array_equal, a, b)


# A loss family as a newcomer writes it: one file (this text) and one LOSSES entry. Its state
# counts the real examples it has seen, over the global batch.
NEW_FAMILY = """
import jax
import jax.numpy as jnp

from acl_jax.losses import weighted_mean


def init_state(cfg, ctx, params):
  return {"seen": jnp.zeros((), jnp.float32)}


def build(cfg, ctx):
  def fn(x):
    seen = jax.lax.psum(jnp.sum(x.mask), ctx.axis_name)
    norm = jnp.sum(jnp.square(x.feats), axis=-1)
    return weighted_mean(norm, x.mask, ctx.axis_name), {}, {"seen": x.state["seen"] + seen}
  return fn
"""


def test_a_family_from_one_file_and_one_entry_trains_with_its_default_and_state(
    tiny_model_dir, tmp_path, monkeypatch):
  import importlib
  from acl_jax.train import loop, objectives
  from tests import helpers
  (tmp_path / "feature_norm.py").write_text(NEW_FAMILY)
  monkeypatch.syspath_prepend(str(tmp_path))
  mod = importlib.import_module("feature_norm")
  monkeypatch.setitem(objectives.LOSSES, "feature_norm", objectives.LossFamily(
      "CE + lambda squared feature norm", "additive", {"lam": 0.25}, mod.build,
      init_state=mod.init_state))
  cfg = helpers.tiny_config(tiny_model_dir, **{"loss.name": "feature_norm", "loss.gate": True})
  obj = objectives.build_objective(cfg.loss, num_labels=2, last_exit=1)
  assert obj.aux_weight == 0.25  # loss.lam unset: the family's default
  wd = str(tmp_path / "run")
  res = loop.train_and_evaluate(cfg, wd)
  assert res["train"]["final_step"] == 6 and "gate_on_fraction" in res["train"]
  assert float(_saved_state(wd, 6)["loss_state"]["seen"]) == 6 * 8
