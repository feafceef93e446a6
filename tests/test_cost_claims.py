"""benchmarks/cost_claims.py measures at the study's own settings: the config a sweep run of
the cost rules' task and method starts from, with the overrides its stage-1 runs were
trained with."""
import jax
import numpy as np

from acl_jax.train import objectives, step as step_lib
from benchmarks import cost_claims
from configs import common
from studies.papers import PAPERS as p
from tests import numerics


def test_the_cost_task_settings_are_its_stage1_runs():
  config_file, sets = cost_claims.task_settings(p, p.cost_rules[0].task)
  assert config_file == p.tasks["mr"].config
  assert "task.max_length=64" in sets and "loss.class_weights=balanced" in sets


def test_study_config_is_the_preset_with_the_overrides_typed():
  c = cost_claims.study_config("configs/textgcn.py", "mr", "gloss",
                               ["task.max_length=64", "optim.lr=5e-5", "num_epochs=3",
                                "loss.class_weights=balanced", "task.data_dir=../d"])
  assert (c.loss.name, c.loss.sigma_mode) == ("gloss", "fixed")
  assert c.task.max_length == 64 and isinstance(c.task.max_length, int)
  assert c.optim.lr == 5e-5 and c.num_epochs == 3 and c.task.data_dir == "../d"
  assert c.loss.class_weights == "balanced"
  scl = cost_claims.study_config("configs/textgcn.py", "mr", "scl", [])
  assert scl.loss.name == "scl" and scl.task.max_length == 128  # the file's own default


def test_a_recorded_cpu_kind_is_told_apart_from_its_prefix():
  rows = [{"run": "task=mr,method=gloss,cpu=amd_f25m17"}, {"run": "task=mr,method=scl,seed=0"}]
  assert cost_claims.kind_recorded(rows, "amd_f25m17")
  assert not cost_claims.kind_recorded(rows, "amd_f25m1")
  assert not cost_claims.kind_recorded([], "amd_f25m17")


def test_the_timed_term_is_the_objectives_aux_term():
  """What the benchmark times alone is the G-Loss term the train step computes: the same value
  and feature gradient as the objective's aux term on the same inputs, padding row included."""
  c = common.base_config()
  c.loss.update(common.METHODS["gloss"])
  c.loss.class_weights = "balanced"
  cw = np.array([0.8, 1.4], np.float32)
  obj = objectives.build_objective(c.loss, num_labels=2, last_exit=6, class_weights=cw)
  term = cost_claims.aux_term(c.loss, 2, 6, cw, {})
  rng = np.random.default_rng(0)
  feats = rng.normal(size=(12, 16)).astype(np.float32)
  labels = np.array([0, 1] * 6, np.int32)
  mask = np.r_[np.ones(11), 0.0].astype(np.float32)
  ids = np.arange(12, dtype=np.int32)
  key = jax.random.PRNGKey(3)
  batch = {"labels": labels, "example_mask": mask, "example_id": ids}

  def from_objective(x):
    def one(x, b):
      return obj.terms(None, [np.zeros((12, 2), np.float32)], {"feats": [x]}, b, key, 1)[0].aux
    return jax.vmap(one, axis_name=step_lib.AXIS)(x[None], jax.tree.map(lambda v: v[None],
                                                                         batch))[0]
  # Jitted: op by op, G-Loss's solve and graph compile dozens of small programs.
  want, want_g = jax.jit(jax.value_and_grad(from_objective))(feats)
  got, got_g = jax.jit(jax.value_and_grad(term))(feats, key, labels, mask, ids)
  assert float(want) > 0
  tol = numerics.reassociation_rtol(feats.size)
  np.testing.assert_allclose(got, want, rtol=tol)
  np.testing.assert_allclose(got_g, want_g, rtol=tol, atol=tol * float(np.abs(want_g).max()))
