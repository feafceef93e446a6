"""ACL-Grad inside the data-parallel step: branches, angle partitions, traces, 2 devices."""
import jax
import numpy as np
import pytest

from tests import helpers, numerics
from tests import acl_utils
from tests.acl_utils import loss_cfg, step_grads, step_lib, tiny_setup
from acl_jax.train import objectives, setup as setup_lib


@pytest.fixture(scope="module")
def setup():
  return tiny_setup(num_batches=2, dropout=0.1)


@pytest.mark.parametrize("name,angle_params", [
    ("acl", "all"), pytest.param("acl", "encoder", marks=pytest.mark.slow),
    pytest.param("acl", "top", marks=pytest.mark.slow),
    ("scl", "all"), pytest.param("scl", "top", marks=pytest.mark.slow)])
def test_gate_branches_match_ungated_gradients(setup, name, angle_params):
  """Threshold 180: always on == the ungated objective (ACL: CE + lam*ACL; SCL: (1-lam) CE +
  lam*SCL); threshold ~0: always off == CE alone, g = g_CE (SPEC §2.4), also for SCL's convex
  form, whose dropped step is not (1-lam) g_CE.

  Compared: the gradient each step hands to its optimizer (after the gate), not the params
  after AdamW, whose first step lr * g / (|g| + eps) turns the round-off of an element with
  |g| near eps into a change of order lr. The gated step sums per-term gradients where the
  ungated one differentiates the sum: the two differ by summation-order round-off, bounded by
  `numerics.assert_trees_close_f32` over the batch's tokens (8 eps sqrt(96) ~ 9e-6 of each
  leaf's largest element). Seen at most 4.6 eps of it; dropping lam * ACL changes the
  gradient by order one. Passes with XLA_FLAGS unset,
  --xla_cpu_experimental_ynn_fusion_type= (YNN off: XLA's own dots and reductions) and
  --xla_cpu_experimental_ynn_fusion_type=+eltwise,+reduce (YNN for those too).
  """
  model, params, batches = setup
  mesh = step_lib.make_mesh(jax.devices()[:1])
  b = batches[0]
  n = b["input_ids"].size
  summed, _ = step_grads(model, params, b, mesh, name=name)
  # CE alone: the gate's dropped branch in both forms (SCL's convex form keeps 1 * CE, not
  # (1 - lam) * CE); one program for both parametrizations.
  ce_only, _ = step_grads(model, params, b, mesh, name="ce")
  assert numerics.trees_differ_f32(summed, ce_only, n)  # the two branches are told apart
  on, m_on = step_grads(model, params, b, mesh, gate=True, name=name, gate_threshold=180.0,
                        angle_params=angle_params)
  off, m_off = step_grads(model, params, b, mesh, gate=True, name=name, gate_threshold=1e-4,
                          angle_params=angle_params)
  assert m_on["gate/gate"] == 1.0 and m_off["gate/gate"] == 0.0
  assert m_on["gate/zero_grad"] == 0.0 == m_off["gate/zero_grad"]
  numerics.assert_trees_close_f32(on, summed, n)
  numerics.assert_trees_close_f32(off, ce_only, n)
  assert 0.0 <= m_on["gate/angle"] <= 180.0 and m_on["gate/norm_acl"] > 0


def test_gate_logs_the_unweighted_ce_gradient_norm(setup):
  """|g_CE| as SPEC §2.4 logs it: SCL+Grad's (1 - lam) weight on CE (lam 0.9, the preset's)
  is divided out, so it equals ACL's |g_CE| on the same batch and dropout (CE is the same loss
  in both). The steps are test_gate_branches_match_ungated_gradients's always-on ones (the
  norm is logged whichever branch is taken), so no new compile."""
  model, params, batches = setup
  mesh = step_lib.make_mesh(jax.devices()[:1])
  steps = {name: step_grads(model, params, batches[0], mesh, gate=True, name=name,
                            gate_threshold=180.0, angle_params="all")[1]
           for name in ("acl", "scl")}
  m_acl, m_scl = steps["acl"], steps["scl"]
  assert objectives.build_objective(
      acl_utils.loss_cfg("scl", gate=True), num_labels=3, last_exit=3).aux_weight == 0.9
  assert m_acl["gate/norm_ce"] > 0
  np.testing.assert_allclose(m_scl["gate/norm_ce"], m_acl["gate/norm_ce"], rtol=1e-4)


def test_gated_step_traces_once(setup):
  model, params, batches = setup
  mesh = step_lib.make_mesh(jax.devices()[:1])
  c = acl_utils.config("acl", gate=True)
  c.optim.lr = 1e-3
  tr = setup_lib.make_trainer(c, model, params, mesh, num_labels=3, total_steps=10)
  state, fn = tr.state, tr.train_step
  with helpers.count_traces() as traces:
    for b in batches * 2:
      state, m = fn(state, step_lib.shard_batch(b, mesh))
  assert int(state.step) == 4 and np.isfinite(float(m["loss"]))
  assert traces[fn.__name__] == 1, traces  # compiled once, for all four steps


def test_gate_is_global_on_two_devices(tmp_path):
  out = str(tmp_path / "g.npz")
  p = helpers.run_py(["-m", "tests.workers", "gate_consistency", out],
                     XLA_FLAGS="--xla_force_host_platform_device_count=2")
  assert p.returncode == 0, p.stderr[-3000:]
  d = np.load(out)
  assert d["local"][0] != d["local"][1]  # the halves alone would branch differently
  assert float(d["gate"]) in (0.0, 1.0)  # one branch on both replicas (pmean of 0/1 flags)
  assert bool(d["same"])  # and bit-identical params on both devices


@pytest.mark.parametrize("bad,match", [
    (dict(tau=0.0), "tau"), (dict(lam=-0.1), "lam"), (dict(gate_threshold=0.0), "threshold"),
    (dict(gate_threshold=181.0), "threshold"), (dict(anchors="labels"), "anchors"),
    (dict(gate_mode="mix"), "mode"), (dict(angle_params="heads"), "angle_params")])
def test_bad_acl_config(bad, match):
  with pytest.raises(ValueError, match=match):
    objectives.build_objective(loss_cfg("acl", gate=True, **bad), num_labels=3, last_exit=3)


def test_acl_needs_a_linear_head():
  from acl_jax.models import label_embeddings
  with pytest.raises(ValueError, match="No linear classifier"):
    label_embeddings({"encoder": {}}, 3)


def test_unset_lambda_takes_the_spec_default():
  from configs import common
  for name, lam in (("scl", 0.9), ("acl_embed", 0.5), ("gloss", 0.8)):
    c = common.base_config().loss
    c.name = name  # no preset: --config.loss.name=... alone
    obj = objectives.build_objective(c, num_labels=3, last_exit=3)
    assert obj.aux_weight == pytest.approx(lam), name
  c = common.base_config().loss
  c.name = "triplet"
  with pytest.raises(ValueError, match="no default lambda"):
    objectives.build_objective(c, num_labels=3, last_exit=3)


def test_combine_override_switches_the_lambda_form():
  from configs import common
  c = common.base_config().loss
  c.update(common.METHODS["scl"])
  weights = lambda o: (o.main_weight, o.aux_weight)
  assert weights(objectives.build_objective(c, num_labels=3, last_exit=3)) == pytest.approx(
      (0.1, 0.9))  # SPEC: (1-lam) CE + lam SCL
  c.combine, c.lam = "additive", 0.5  # ACL's form: CE + lam SCL
  assert weights(objectives.build_objective(c, num_labels=3, last_exit=3)) == pytest.approx(
      (1.0, 0.5))
  c.lam = 2.0  # no [0, 1] bound in the additive form
  assert objectives.build_objective(c, num_labels=3, last_exit=3).aux_weight == 2.0
  c.combine = "sum"
  with pytest.raises(ValueError, match=r"Unknown loss.combine 'sum'; known: \['convex', 'additive'\]"):
    objectives.build_objective(c, num_labels=3, last_exit=3)
  ce = common.base_config().loss
  ce.combine = "additive"
  with pytest.raises(ValueError, match="no auxiliary term"):
    objectives.build_objective(ce, num_labels=3, last_exit=3)
