"""The train step and the loop on packed batches (task.packing).

The same examples, packed or one a row, give the train step the same losses, gate decision
and gradient, dropout on: masks are keyed by (example id, position in the example), and every
loss reads the per-example outputs (tests/test_packing.py checks the model and each objective
family alone). The loop trains and evaluates with packing from the command line.
"""
import json

import jax
import numpy as np
import pytest

from acl_jax.models.bert import Classifier
from acl_jax.train import setup as setup_lib, step as step_lib
from tests import helpers, numerics
from tests.acl_utils import capture_grads, config
from tests.test_packing import _batches, _cfg, _cols, _diverse_params

N = 16


@pytest.fixture(scope="module")
def packed_setup():
  cfg = _cfg(hidden_dropout=0.1, attention_dropout=0.1, exits="last")
  cols = _cols(N, pair=True, seed=4)
  indices = np.random.default_rng(5).permutation(N)
  return Classifier(cfg), _diverse_params(cfg), _batches(cols, indices, 1)


def _step(model, params, batch, method, **loss):
  c = config(method, **loss)
  mesh = step_lib.make_mesh(jax.devices()[:1])
  tr = setup_lib.make_trainer(c, model, params, mesh, num_labels=3, total_steps=10,
                              tx=capture_grads(), donate=False)
  state, m = tr.train_step(tr.state, step_lib.shard_batch(batch, mesh))
  return jax.device_get(state.opt_state), {k: float(v) for k, v in jax.device_get(m).items()}


# By default the gated ACL step (two grads, the gate, the pmean); CE and G-Loss with --runslow
# (test_packing checks every objective's loss and gradients packed, G-Loss with dropout on).
@pytest.mark.parametrize("method,loss", [
    pytest.param("ce", {}, marks=pytest.mark.slow), ("acl", {"gate_threshold": 180.0}),
    pytest.param("gloss", {}, marks=pytest.mark.slow)])
def test_packed_step_equals_unpacked_step(packed_setup, method, loss):
  model, params, (unpacked, packed) = packed_setup
  g_u, m_u = _step(model, params, unpacked, method, **loss)
  g_p, m_p = _step(model, params, packed, method, **loss)
  assert m_u.keys() == m_p.keys()
  rtol = numerics.reassociation_rtol(N * 32)
  for k in m_u:
    np.testing.assert_allclose(m_p[k], m_u[k], rtol=rtol, atol=rtol * abs(m_u["loss"]),
                               err_msg=k)
  if "gate/gate" in m_u:  # the gated path ran (threshold 180: always on)
    assert m_p["gate/gate"] == m_u["gate/gate"] == 1.0
  scale = max(float(np.abs(x).max()) for x in jax.tree.leaves(g_u))
  for (path, a), d in zip(jax.tree_util.tree_leaves_with_path(g_p), jax.tree.leaves(g_u)):
    np.testing.assert_allclose(a, d, rtol=rtol, atol=rtol * scale,
                               err_msg=jax.tree_util.keystr(path))


def test_packed_batch_without_example_ids_is_refused(packed_setup):
  model, params, (_, packed) = packed_setup
  packed = {k: v for k, v in packed.items() if k != "example_id"}
  with pytest.raises(ValueError, match="example_id"):
    _step(model, params, packed, "ce")


@pytest.mark.slow  # packing is the default: every training test of the loop runs it packed
def test_loop_trains_and_evaluates_packed(tiny_model_dir, tmp_path):
  wd = str(tmp_path / "packed")
  p = helpers.run_py(["train.py", "--config", "configs/quickstart.py:runlocal", "--workdir", wd,
                      f"--config.model.name={tiny_model_dir}", "--config.task.packing=True",
                      "--config.progress=False"])
  assert p.returncode == 0, p.stderr[-3000:]
  with open(f"{wd}/results.json") as f:
    res = json.load(f)
  assert res["train"]["final_step"] == 6
  assert 0.0 <= res["dev"]["accuracy"] <= 1.0 and res["dev"]["num_examples"] > 0
  with open(f"{wd}/config.json") as f:
    assert json.load(f)["task"]["packing"] is True
  with open(f"{wd}/metrics.jsonl") as f:
    train = [json.loads(ln) for ln in f if '"train"' in ln]
  assert train and all(np.isfinite(r["loss"]) for r in train)


def test_packed_evaluation_gives_the_unpacked_predictions(tiny_model_dir):
  import configs.quickstart  # pylint: disable=import-outside-toplevel
  import dataclasses  # pylint: disable=import-outside-toplevel
  from acl_jax import data as data_lib  # pylint: disable=import-outside-toplevel
  from acl_jax.train import scoring  # pylint: disable=import-outside-toplevel
  c = configs.quickstart.get_config("runlocal")
  c.model.name = tiny_model_dir
  s = setup_lib.build(c)
  sc = s.scorer()
  params = step_lib.replicate(s.params, s.mesh)
  ds = s.tok["dev"]
  preds, feats = scoring.predict_split(sc, params, ds, with_features=True)
  packed = dataclasses.replace(sc, packing=data_lib.Packing(c.task.max_length, s.mesh.size))
  preds_p, feats_p = scoring.predict_split(packed, params, ds, with_features=True)
  assert feats.shape == (len(ds), s.model.cfg.hidden_size)
  np.testing.assert_array_equal(preds_p, preds)
  numerics.assert_trees_close_f32(feats_p, feats, n=c.task.max_length * s.model.cfg.hidden_size)
