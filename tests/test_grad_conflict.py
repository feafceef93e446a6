"""scripts/grad_conflict.py's parameter partitions (no model, no data)."""
import jax
import jax.numpy as jnp
import numpy as np

from scripts import grad_conflict

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
  np.testing.assert_allclose(float(grad_conflict._angle(g_ce, g_acl, head)), 0.0, atol=1e-3)
  enc = jax.tree.map(lambda m: not m, head)
  np.testing.assert_allclose(float(grad_conflict._angle(g_ce, g_acl, enc)), 180.0, atol=1e-3)
  # All: cos = (-1 + 3) / (sqrt(2) sqrt(10)).
  want = np.degrees(np.arccos(2 / np.sqrt(20)))
  np.testing.assert_allclose(float(grad_conflict._angle(g_ce, g_acl)), want, rtol=1e-5)
  share = float(grad_conflict._sq(g_acl, head) / grad_conflict._sq(g_acl, None))
  np.testing.assert_allclose(share, 9 / 10, rtol=1e-6)
