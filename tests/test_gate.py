"""ACL-Grad gate: branch choice, projection, parameter masks and validation."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from acl_jax.losses import angle, angle_gate, encoder_angle_mask, sq_norm
from tests import numerics

LAM = 0.5


def _tree(a, b):
  """Two-leaf gradient tree built from flat vectors a [2] and b [4]."""
  return {"a": jnp.asarray(a, jnp.float32), "b": {"c": jnp.asarray(b, jnp.float32).reshape(2, 2)}}


def _flat(tree):
  return np.concatenate([np.ravel(x) for x in jax.tree.leaves(tree)])


def gate(g_ce, g_acl, lam=LAM, threshold_deg=90.0, mode="drop", params_mask=None):
  """Jitted gate; the mask is a closure constant, as inside a trainer's step."""
  fn = lambda c, a: angle_gate(c, a, lam, threshold_deg, mode, params_mask)
  return jax.jit(fn)(g_ce, g_acl)


G_CE = _tree([1.0, 0.0], [0.0, 0.0, 0.0, 0.0])


@pytest.mark.parametrize("mode", ["drop", "project"])
def test_agreeing_gradients_add_the_acl_term(mode):
  g_acl = _tree([1.0, 1.0], [0.0, 0.0, 0.0, 0.0])  # 45 degrees
  grads, info = gate(G_CE, g_acl, mode=mode)
  np.testing.assert_allclose(_flat(grads), _flat(G_CE) + LAM * _flat(g_acl), rtol=1e-6)
  np.testing.assert_allclose(float(info["angle"]), 45.0, rtol=1e-5)
  assert float(info["gate"]) == 1.0
  np.testing.assert_allclose(float(info["norm_acl"]), np.sqrt(2.0), rtol=1e-6)
  np.testing.assert_allclose(float(info["norm_ce"]), 1.0, rtol=1e-6)


def test_conflicting_gradients_drop_the_acl_term():
  g_acl = _tree([-1.0, 1.0], [0.0, 0.0, 0.0, 0.0])  # 135 degrees
  grads, info = gate(G_CE, g_acl)
  np.testing.assert_array_equal(_flat(grads), _flat(G_CE))
  np.testing.assert_allclose(float(info["angle"]), 135.0, rtol=1e-5)
  assert float(info["gate"]) == 0.0


def test_exactly_orthogonal_counts_as_agreeing():
  g_acl = _tree([0.0, 2.0], [0.0, 0.0, 0.0, 0.0])
  grads, info = gate(G_CE, g_acl)
  np.testing.assert_allclose(float(info["angle"]), 90.0, rtol=1e-6)
  assert float(info["gate"]) == 1.0
  np.testing.assert_allclose(_flat(grads), _flat(G_CE) + LAM * _flat(g_acl), rtol=1e-6)


def test_zero_gradient_is_reported_apart_from_gate_on():
  """SPEC §2.4 reports the fraction of gated steps; a step with a zero gradient on either side
  has no angle to judge (cos = 0, angle 90): it is logged as zero_grad, not as gate on, and
  the update is the agree one (a zero g_acl adds nothing, a zero g_ce lets ACL through)."""
  zero = _tree([0.0, 0.0], [0.0, 0.0, 0.0, 0.0])
  g_acl = _tree([-1.0, 1.0], [0.5, 0.0, 0.0, 0.0])
  grads, info = gate(G_CE, zero)
  assert float(info["gate"]) == 0.0 and float(info["zero_grad"]) == 1.0
  assert float(info["angle"]) == pytest.approx(90.0)
  np.testing.assert_array_equal(_flat(grads), _flat(G_CE))
  grads, info = gate(zero, g_acl)
  assert float(info["gate"]) == 0.0 and float(info["zero_grad"]) == 1.0
  np.testing.assert_allclose(_flat(grads), LAM * _flat(g_acl), rtol=1e-6)
  assert float(info["norm_ce"]) == 0.0
  # Zero over the mask is zero too: the angle sees only the masked leaves.
  g_b_only = _tree([0.0, 0.0], [1.0, 0.0, 0.0, 0.0])
  _, info = gate(G_CE, g_b_only, params_mask={"a": True, "b": {"c": False}})
  assert float(info["zero_grad"]) == 1.0 and float(info["gate"]) == 0.0
  _, info = gate(G_CE, _tree([1.0, 1.0], [0.0, 0.0, 0.0, 0.0]))
  assert float(info["zero_grad"]) == 0.0 and float(info["gate"]) == 1.0


def test_conflict_drops_to_the_unweighted_ce_gradient():
  """SPEC §2.4, CE+SCL+Grad: on agreement the update is SCL's convex form (1-lam) g_CE +
  lam g_SCL (ce_weight = 1 - lam); when the gate drops SCL it is g = g_CE, not (1-lam) g_CE."""
  lam = 0.9
  agree = _tree([1.0, 1.0], [0.0, 0.0, 0.0, 0.0])
  fn = jax.jit(lambda c, a: angle_gate(c, a, lam, ce_weight=1.0 - lam))
  grads, info = fn(G_CE, agree)
  assert float(info["gate"]) == 1.0
  np.testing.assert_allclose(_flat(grads), (1 - lam) * _flat(G_CE) + lam * _flat(agree),
                             rtol=1e-6)
  grads, info = fn(G_CE, _tree([-1.0, 1.0], [0.0, 0.0, 0.0, 0.0]))
  assert float(info["gate"]) == 0.0
  np.testing.assert_array_equal(_flat(grads), _flat(G_CE))


def test_project_judges_and_projects_over_the_mask():
  """mode=project with a parameter partition: the conflict is judged on the masked leaves and
  the projection removes g_acl's component along g_ce on those same leaves; the leaves the
  angle does not see get g_ce + lam * g_acl."""
  g_ce = _tree([1.0, 0.0], [1.0, 2.0, 0.0, 0.0])
  g_acl = _tree([-2.0, 1.0], [3.0, 1.0, 1.0, 0.0])  # on leaf a: about 117 degrees
  only_a = {"a": True, "b": {"c": False}}
  grads, info = gate(g_ce, g_acl, mode="project", params_mask=only_a)
  assert float(info["gate"]) == 0.0
  ce_a, acl_a = np.asarray(g_ce["a"]), np.asarray(g_acl["a"])
  added_a = (np.asarray(grads["a"]) - ce_a) / LAM
  np.testing.assert_allclose(added_a @ ce_a, 0.0, atol=1e-6)
  np.testing.assert_allclose(added_a, acl_a - (acl_a @ ce_a) / (ce_a @ ce_a) * ce_a, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(grads["b"]["c"]),
                             np.asarray(g_ce["b"]["c"]) + LAM * np.asarray(g_acl["b"]["c"]),
                             rtol=1e-6)
  array_mask = {"a": jnp.array(True), "b": {"c": jnp.array(False)}}
  grads_arr, _ = gate(g_ce, g_acl, mode="project", params_mask=array_mask)
  np.testing.assert_allclose(_flat(grads_arr), _flat(grads), rtol=1e-6)


def test_threshold_moves_the_decision():
  g_acl = _tree([-0.2, 1.0], [0.0, 0.0, 0.0, 0.0])  # about 101 degrees
  assert float(gate(G_CE, g_acl)[1]["gate"]) == 0.0
  assert float(gate(G_CE, g_acl, threshold_deg=120.0)[1]["gate"]) == 1.0
  g_acl = _tree([0.3, 1.0], [0.0, 0.0, 0.0, 0.0])  # about 73 degrees
  assert float(gate(G_CE, g_acl, threshold_deg=60.0)[1]["gate"]) == 0.0
  assert float(gate(G_CE, g_acl, threshold_deg=180.0)[1]["gate"]) == 1.0


def test_project_mode_removes_the_conflicting_component():
  rng = np.random.default_rng(0)
  g_ce = _tree(rng.normal(size=2), rng.normal(size=4))
  g_acl = jax.tree.map(lambda x: -x, g_ce)
  noise = _tree(rng.normal(size=2), rng.normal(size=4))
  g_acl = jax.tree.map(lambda x, n: x + 0.3 * n, g_acl, noise)
  grads, info = gate(g_ce, g_acl, mode="project")
  assert float(info["gate"]) == 0.0
  added = (_flat(grads) - _flat(g_ce)) / LAM
  ce, acl = _flat(g_ce), _flat(g_acl)
  np.testing.assert_allclose(added @ ce, 0.0, atol=1e-5)
  # What is left of g_acl is its component orthogonal to g_ce.
  np.testing.assert_allclose(added, acl - (acl @ ce) / (ce @ ce) * ce, rtol=1e-5, atol=1e-6)


def test_params_mask_restricts_the_angle():
  g_ce = _tree([1.0, 0.0], [1.0, 0.0, 0.0, 0.0])
  g_acl = _tree([1.0, 0.0], [-5.0, 0.0, 0.0, 0.0])  # leaf a agrees, leaf b conflicts strongly
  assert float(gate(g_ce, g_acl)[1]["gate"]) == 0.0
  only_a = {"a": True, "b": {"c": False}}
  grads, info = gate(g_ce, g_acl, params_mask=only_a)
  assert float(info["gate"]) == 1.0
  np.testing.assert_allclose(float(info["angle"]), 0.0, atol=1e-3)
  np.testing.assert_allclose(float(info["norm_acl"]), 1.0, rtol=1e-6)
  # The update itself still covers every leaf.
  np.testing.assert_allclose(_flat(grads), _flat(g_ce) + LAM * _flat(g_acl), rtol=1e-6)
  only_b = {"a": False, "b": {"c": True}}
  assert float(gate(g_ce, g_acl, params_mask=only_b)[1]["gate"]) == 0.0


def test_bool_array_mask_matches_python_bools():
  g_ce = _tree([1.0, 0.0], [1.0, 0.0, 0.0, 0.0])
  g_acl = _tree([1.0, 0.0], [-5.0, 0.0, 0.0, 0.0])
  array_mask = {"a": jnp.array(True), "b": {"c": jnp.array(False)}}
  _, info = jax.jit(angle_gate)(g_ce, g_acl, LAM, params_mask=array_mask)
  assert float(info["gate"]) == 1.0


def test_dtype_is_preserved_and_traced_lambda_works():
  g_ce = jax.tree.map(lambda x: x.astype(jnp.bfloat16), _tree([1.0, 0.0], [1.0, 0, 0, 0]))
  g_acl = jax.tree.map(lambda x: x.astype(jnp.bfloat16), _tree([1.0, 1.0], [0.0, 0, 0, 0]))
  grads, _ = jax.jit(angle_gate)(g_ce, g_acl, jnp.float32(LAM))
  assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(grads))


def test_jit_traces_once():
  @jax.jit
  @chex.assert_max_traces(n=1)
  def step(g_ce, g_acl):
    return angle_gate(g_ce, g_acl, LAM)

  for sign in (1.0, -1.0):
    step(G_CE, _tree([sign, 1.0], [0.0, 0.0, 0.0, 0.0]))


PARAMS = {
    "encoder": {
        "embeddings": {"word": {"embedding": 1}, "LayerNorm": {"scale": 1, "bias": 1}},
        "layer_0": {
            "attention": {"qkv": {"kernel": 1, "bias": 1}},
            "mlp_layer_norm": {"scale": 1, "bias": 1},
            "ffn": {"kernel": 1, "bias": 1},
        },
    },
    "exit_6": {"pooler": {"kernel": 1, "bias": 1}, "classifier": {"kernel": 1, "bias": 1}},
}


def test_encoder_angle_mask():
  mask = encoder_angle_mask(PARAMS)
  kept = {jax.tree_util.keystr(path) for path, keep in jax.tree.leaves_with_path(mask) if keep}
  assert kept == {
      "['encoder']['embeddings']['word']['embedding']",
      "['encoder']['layer_0']['attention']['qkv']['kernel']",
      "['encoder']['layer_0']['ffn']['kernel']",
  }
  # A Flax variables dict is looked through.
  assert encoder_angle_mask({"params": PARAMS}) == {"params": mask}
  # LayerNorm parameters go by their path, whatever their leaves are called (torch's names)
  torch_named = {"encoder": {"LayerNorm": {"weight": 1}, "out_layer_norm": {"gamma": 1},
                             "dense": {"weight": 1}}}
  assert encoder_angle_mask(torch_named) == {
      "encoder": {"LayerNorm": {"weight": False}, "out_layer_norm": {"gamma": False},
                  "dense": {"weight": True}}}


def test_angle_of_gradients_that_do_not_pair_is_refused():
  g = {"a": jnp.ones(2), "b": jnp.ones(3)}
  with pytest.raises(ValueError, match="The two gradients must share one pytree structure"):
    angle(g, {"a": jnp.ones(2)})
  with pytest.raises(ValueError, match=r"params_mask must have the gradients' pytree structure "
                                       r"\(one bool per leaf\); build it with angle_mask"):
    angle(g, g, {"a": True})


def test_encoder_mask_with_gate():
  grads_ce = jax.tree.map(lambda _: jnp.ones(2), PARAMS)
  # The classifier conflicts; the encoder kernels agree.
  grads_acl = {
      "encoder": jax.tree.map(lambda _: jnp.ones(2), PARAMS["encoder"]),
      "exit_6": jax.tree.map(lambda _: -10.0 * jnp.ones(2), PARAMS["exit_6"]),
  }
  assert float(gate(grads_ce, grads_acl)[1]["gate"]) == 0.0
  mask = encoder_angle_mask(grads_ce)
  assert float(gate(grads_ce, grads_acl, params_mask=mask)[1]["gate"]) == 1.0


@pytest.mark.parametrize("kwargs,match", [
    ({"lam": -0.1}, "lam .* must be >= 0"),
    ({"threshold_deg": 0.0}, r"threshold_deg must lie in \(0, 180\]"),
    ({"threshold_deg": 181.0}, r"threshold_deg must lie in \(0, 180\]"),
    ({"mode": "pcgrad"}, r"Unknown gate mode 'pcgrad'; known: \['drop', 'project'\]"),
])
def test_bad_arguments_raise(kwargs, match):
  args = {"lam": LAM, **kwargs}
  with pytest.raises(ValueError, match=match):
    angle_gate(G_CE, G_CE, **args)


def test_mismatched_trees_raise():
  with pytest.raises(ValueError, match="share one pytree structure"):
    angle_gate(G_CE, {"a": jnp.ones(2)}, LAM)
  with pytest.raises(ValueError, match="params_mask must have the gradients' pytree structure"):
    angle_gate(G_CE, G_CE, LAM, params_mask={"a": True})


def test_angle_masks_are_parameter_partitions():
  """The three angle_params modes are one gate fed three masks: all (None), encoder
  (RomeBERT's) and top (the top encoder layer and every head)."""
  from acl_jax.losses import angle_mask
  params = {"encoder": {"embeddings": {"w": 1}, "layer_0": {"k": 1}, "layer_1": {"k": 1}},
            "exit_1": {"classifier": {"kernel": 1}}, "exit_2": {"classifier": {"kernel": 1}}}
  assert angle_mask(params, "all") is None
  assert angle_mask(params, "encoder") == encoder_angle_mask(params)
  assert angle_mask(params, "top") == {
      "encoder": {"embeddings": {"w": False}, "layer_0": {"k": False}, "layer_1": {"k": True}},
      "exit_1": {"classifier": {"kernel": True}}, "exit_2": {"classifier": {"kernel": True}}}
  with pytest.raises(ValueError, match="Unknown loss.angle_params"):
    angle_mask(params, "heads")


def test_the_runs_gate_summary_from_its_sums():
  """The loop sums the step's gate metrics over the run; the results state the share of the
  judged steps (those with an angle) that let the term through."""
  from acl_jax.train import step as step_lib
  sums = {"gate/gate": 3.0, "gate/zero_grad": 1.0}
  assert step_lib.run_summary(sums, 5) == {"gate_on_fraction": 0.75, "zero_grad_steps": 1.0}
  assert step_lib.run_summary({"gate/gate": 0.0, "gate/zero_grad": 2.0}, 2) == {
      "gate_on_fraction": None, "zero_grad_steps": 2.0}
  assert step_lib.run_summary({}, 0) == {}


def test_parallel_and_opposite_gradients_measure_0_and_180_degrees():
  """Round-off can put <a, b> / (|a| |b|) just past +-1; the angle stays defined."""
  rng = np.random.default_rng(0)
  for _ in range(20):
    v = rng.normal(size=6) * rng.choice([1e-3, 1.0, 30.0])
    g = _tree(v[:2], v[2:])
    for sign, want in ((1.0, 0.0), (-1.0, 180.0)):
      angle = float(gate(g, jax.tree.map(lambda x, s=sign: s * x, g))[1]["angle"])
      assert abs(angle - want) < 0.1, (v, sign, angle)


def test_tiny_gradients_keep_the_sign_of_their_cosine():
  """Norms far below sqrt(eps): eps shrinks the cosine towards 0 but never flips it, and the
  projection coefficient is <g_acl, g_ce> / (|g_ce|^2 + eps)."""
  g_ce = _tree([1e-7, 0.0], [0.0, 0.0, 0.0, 0.0])
  g_acl = _tree([1e-7, 1e-7], [0.0, 0.0, 0.0, 0.0])  # 45 degrees
  assert float(gate(g_ce, g_acl)[1]["gate"]) == 1.0
  g_acl = _tree([-1e-7, 1e-7], [0.0, 0.0, 0.0, 0.0])  # 135 degrees
  grads, info = gate(g_ce, g_acl, threshold_deg=30.0, mode="project")
  assert float(info["gate"]) == 0.0
  ce, acl = _flat(g_ce).astype(np.float64), _flat(g_acl).astype(np.float64)
  coef = (acl @ ce) / (ce @ ce + 1e-12)
  np.testing.assert_allclose(_flat(grads), ce + LAM * (acl - coef * ce), rtol=1e-4, atol=1e-12)


def test_traced_threshold_decides_as_a_static_one():
  traced = jax.jit(lambda c, a, t: angle_gate(c, a, LAM, t))
  for g_acl in (_tree([-0.2, 1.0], [0.0] * 4), _tree([0.3, 1.0], [0.0] * 4)):  # 101, 73 deg
    for threshold in (60.0, 90.0, 120.0):
      assert float(traced(G_CE, g_acl, jnp.float32(threshold))[1]["gate"]) == \
          float(gate(G_CE, g_acl, threshold_deg=threshold)[1]["gate"])


def test_projected_update_keeps_the_gradient_dtypes():
  bf16 = lambda t: jax.tree.map(lambda x: x.astype(jnp.bfloat16), t)
  grads, info = gate(bf16(G_CE), bf16(_tree([-1.0, 1.0], [1.0, 0.0, 0.0, 0.0])), mode="project")
  assert float(info["gate"]) == 0.0
  assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(grads))


def test_default_threshold_is_90_degrees():
  _, info = angle_gate(G_CE, _tree([-0.01, 1.0], [0.0] * 4), LAM)  # 90.6 degrees
  assert float(info["gate"]) == 0.0


def test_angle_matches_a_float64_reference():
  """`angle` (the gate's measurement) against numpy in float64 on the same float32 inputs,
  over every leaf and over a mask of Python bools and a bool array. float32 round-off in the
  n-term sums moves the cosine by at most reassociation_rtol(n), so the angle by that over
  sin(angle) radians; `sq_norm` is such a sum itself. The gate's own angle is this function's,
  bit for bit."""
  rng = np.random.default_rng(0)
  shapes = {"w": (6, 5), "b": (7,), "k": (4, 3)}
  mask = {"w": True, "b": False, "k": np.array([True, False, True])}  # k: broadcast over rows
  n = sum(int(np.prod(s)) for s in shapes.values())
  rtol = numerics.reassociation_rtol(n)
  for c in np.linspace(-3.0, 3.0, 9):  # from near-opposite to near-parallel
    a = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    b = {k: (c * a[k] + rng.normal(size=s)).astype(np.float32) for k, s in shapes.items()}
    for m in (None, mask):
      keep = {k: np.broadcast_to(True if m is None else m[k], shapes[k]) for k in shapes}
      flat = lambda t: np.concatenate([t[k][keep[k]].astype(np.float64) for k in shapes])
      x, y = flat(a), flat(b)
      want = np.degrees(np.arccos(np.clip(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)),
                                          -1.0, 1.0)))
      got = float(angle(a, b, m))
      tol = np.degrees(rtol / np.sin(np.radians(want)))
      assert abs(got - want) <= tol, (c, m is None, got, want, tol)
      np.testing.assert_allclose(float(sq_norm(a, m)), x @ x, rtol=rtol)
      assert float(angle_gate(a, b, LAM, params_mask=m)[1]["angle"]) == got


def test_gate_arguments_at_their_bounds():
  from acl_jax.losses.gate import check_gate_args  # pylint: disable=import-outside-toplevel
  check_gate_args(0.0, 0.5, "drop")  # lambda 0 and a threshold below 1 degree are allowed
  check_gate_args(1.0, 180.0, "project")
  with pytest.raises(ValueError, match=r"threshold_deg must lie in \(0, 180\] degrees, got 0.0. "
                                       "The default 90 turns the contrastive term off"):
    check_gate_args(1.0, 0.0, "drop")
  with pytest.raises(ValueError, match="threshold_deg must lie in"):
    check_gate_args(1.0, 180.5, "drop")
  with pytest.raises(ValueError, match=r"lam \(the contrastive weight lambda\) must be >= 0"):
    check_gate_args(-0.1, 90.0, "drop")
