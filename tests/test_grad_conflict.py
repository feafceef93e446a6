"""scripts/grad_conflict.py: its parameter partitions, and its probe against the train step's
gate on one packed batch with padding slots."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from acl_jax import losses
from acl_jax.models.bert import Classifier
from acl_jax.train import setup as setup_lib, step as step_lib
from scripts import grad_conflict
from tests import acl_utils, numerics
from tests.test_packing import _batches, _cfg, _cols, _diverse_params

PARAMS = {"encoder": {"layer_0": {"ffn": {"kernel": 1, "bias": 1}}},
          "exit_3": {"classifier": {"kernel": 1, "bias": 1}},
          "exit_6": {"pooler": {"kernel": 1}, "classifier": {"kernel": 1, "bias": 1}}}


def test_classifier_mask_selects_the_last_exits_kernel_only():
  mask = grad_conflict.classifier_mask(PARAMS, 6)
  kept = [jax.tree_util.keystr(p) for p, keep in jax.tree.leaves_with_path(mask) if keep]
  assert kept == ["['exit_6']['classifier']['kernel']"]


def test_angle_over_a_partition_sees_only_its_leaves():
  g_ce = {"encoder": {"layer_0": {"ffn": {"kernel": jnp.array([1.0, 0.0]),
                                          "bias": jnp.array([0.0, 0.0])}}},
          "exit_3": {"classifier": {"kernel": jnp.zeros(2), "bias": jnp.zeros(2)}},
          "exit_6": {"pooler": {"kernel": jnp.zeros(2)},
                     "classifier": {"kernel": jnp.array([1.0, 0.0]), "bias": jnp.zeros(2)}}}
  # Opposed on the encoder kernel, aligned on the classifier kernel.
  g_acl = jax.tree.map(lambda x: x, g_ce)
  g_acl["encoder"]["layer_0"]["ffn"]["kernel"] = jnp.array([-1.0, 0.0])
  g_acl["exit_6"]["classifier"]["kernel"] = jnp.array([3.0, 0.0])
  head = grad_conflict.classifier_mask(PARAMS, 6)
  np.testing.assert_allclose(float(losses.angle(g_ce, g_acl, head)), 0.0, atol=1e-3)
  enc = jax.tree.map(lambda m: not m, head)
  np.testing.assert_allclose(float(losses.angle(g_ce, g_acl, enc)), 180.0, atol=1e-3)
  # All: cos = (-1 + 3) / (sqrt(2) sqrt(10)).
  want = np.degrees(np.arccos(2 / np.sqrt(20)))
  np.testing.assert_allclose(float(losses.angle(g_ce, g_acl)), want, rtol=1e-5)
  share = float(losses.sq_norm(g_acl, head) / losses.sq_norm(g_acl))
  np.testing.assert_allclose(share, 9 / 10, rtol=1e-6)


N = 16


@pytest.fixture(scope="module")
def packed_setup():
  """A tiny model with dropout on, and one packed batch of N slots, the last 3 padding
  (example_mask 0): only the step's masks keep them out of CE and the contrastive terms."""
  cfg = _cfg(hidden_dropout=0.1, attention_dropout=0.1, exits="last")
  cols = _cols(N, pair=True, seed=4)
  indices = np.random.default_rng(5).permutation(N)
  indices[-3:] = -1
  _, packed = _batches(cols, indices, 1)
  assert packed["example_mask"].sum() == N - 3
  return Classifier(cfg), _diverse_params(cfg), packed


def _angle_tol_deg(n_tokens: int, n_params: int, degrees: float) -> float:
  """How far two float32 evaluations of one gate angle may lie apart, in degrees.

  The probe and the step take the same gradients (`step.loss_grad`) in two XLA programs,
  which may sum them in other orders: each gradient then moves by round-off of relative size
  r_g = reassociation_rtol(n_tokens) (each weight's gradient sums one term per token), which
  turns its direction by at most r_g radians, the angle by 2 r_g. The cosine sums n_params
  products: its round-off r_p = reassociation_rtol(n_params) moves the angle by r_p / sin.
  """
  r_g = numerics.reassociation_rtol(n_tokens)
  r_p = numerics.reassociation_rtol(n_params)
  return float(np.degrees(2 * r_g + r_p / np.sin(np.radians(degrees))))


# The ACL-Grad gate on the step's state and batch (threshold 180: always on, so the angle is
# measured and the update is the ungated one), against the probe's angle over the same
# partition: ACL and SCL+Grad over all parameters; ACL's other partitions with --runslow.
@pytest.mark.parametrize("method,angle_params,key", [
    ("acl", "all", "acl"), ("scl", "all", "scl"),
    pytest.param("acl", "top", "acl_top", marks=pytest.mark.slow),
    pytest.param("acl", "encoder", "acl_encoder", marks=pytest.mark.slow),
    pytest.param("scl", "top", "scl_top", marks=pytest.mark.slow)])
def test_probe_measures_the_angle_the_gate_sees(packed_setup, method, angle_params, key):
  model, params, batch = packed_setup
  mesh = step_lib.make_mesh(jax.devices()[:1])
  c = acl_utils.config(method, gate=True, gate_threshold=180.0, angle_params=angle_params)
  tr = setup_lib.make_trainer(c, model, params, mesh, num_labels=3, total_steps=10,
                              tx=acl_utils.capture_grads(), donate=False)
  probe = grad_conflict.make_probe(model, mesh, grad_conflict.probe_objectives(
      c, model, num_labels=3, total_steps=10))
  # A later step: the step's keys fold in state.step.
  state = tr.state.replace(step=tr.state.step + 5)
  b = step_lib.shard_batch(batch, mesh)
  got = {k: float(v) for k, v in jax.device_get(probe(state, b)).items()}
  _, m = tr.train_step(state, b)
  want = float(m["gate/angle"])
  assert m["gate/gate"] == 1.0 and m["gate/zero_grad"] == 0.0
  n_params = sum(x.size for x in jax.tree.leaves(params))
  tol = _angle_tol_deg(batch["input_ids"].size, n_params, want)
  assert abs(got[key] - want) <= tol, (got[key], want, tol)

  # The bound tells the step's objective from the ones it is easily confused with: the
  # padding slots counted in the losses, or another dropout key.
  unmasked = dict(batch, example_mask=np.ones_like(batch["example_mask"]))
  other = {"padding counted": probe(state, step_lib.shard_batch(unmasked, mesh))[key],
           "other dropout": probe(state.replace(rng=jax.random.PRNGKey(123)), b)[key]}
  for what, angle in other.items():
    assert abs(float(angle) - want) > tol, (what, float(angle), want, tol)
