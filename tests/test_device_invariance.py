"""A seed pins the run on any device count: 1 and 2 fake CPU devices (4 and 8 too with
--runslow), dropout on.

Dropout masks are keyed by (step key, example id, position, layer, site) and the G-Loss split
by (step key, example id), so the only difference between device counts is the order of the
float32 reductions (a psum of per-device partial sums instead of one sum). Each device count
runs in its own process (`chex.set_n_cpu_devices`), on the same global batches, for CE, SCL,
ACL (gated; all params and the "top" mode), gated ACL-CL, the other multi-exit strategies (JT,
2ST through both of its stages, ALT, KD), G-Loss, triplet, cosine and the README's "Adding a
loss" examples (the prototype loss, gated, alone and as ACL-CL's final-exit term; the centre
loss, whose EMA centres are state between steps, gated), with every pairwise loss over the
gathered global batch (`contrastive_global` / `gloss_global`).

Passes with XLA_FLAGS unset and under XLA:CPU's alternative kernels, which round differently:
`--xla_cpu_experimental_ynn_fusion_type=` (YNN off: XLA's own dots and reductions) and
`--xla_cpu_experimental_ynn_fusion_type=+eltwise,+reduce` (YNN for those too).
"""
import json

import chex
import numpy as np
import pytest

from tests import helpers
from tests.workers import DROPOUT, INVARIANT_OBJECTIVES

EPS = float(np.finfo(np.float32).eps)  # 1.19e-7
# The bound. A device split regroups only the outermost sums of the step, over the batch's 16
# rows (the loss mean, the gradient's batch sum, the gathered contrastive and graph terms): a
# float32 sum of n terms moves by at most about n * eps relative to the terms' magnitudes when
# regrouped, 16 eps here, and three SGD steps through the network carry that error forward
# without amplifying it much. 100 eps = 1.2e-5 relative, with an absolute floor of the same
# size scaled to each leaf's largest magnitude (a near-zero element carries the round-off of
# the leaf's large ones), leaves room for kernels that round differently; a dropout mask that
# moved with the device changes the loss by order 1e-3 to 1e-2 (see the last test). Seen:
# at most 8e-7 relative, on an Intel Xeon.
RTOL = 100 * EPS


# By default CE, gated ACL, gated ACL-CL, G-Loss and the gated prototype and centre losses run
# on 1 and 2 devices; SCL, the "top" gate mode, the prototype loss in ACL-CL, JT, 2ST, ALT, KD,
# triplet and cosine (the same collectives again) and 4 and 8 devices (2 examples a device)
# only with --runslow: each device count is a process with one compile per objective.
DEFAULT_TAGS = ("ce", "acl", "acl_cl", "gloss", "proto", "center")
TAGS = [t if t in DEFAULT_TAGS else pytest.param(t, marks=pytest.mark.slow)
        for t in INVARIANT_OBJECTIVES]


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory, request):
  slow = request.config.getoption("--runslow")
  tags = list(INVARIANT_OBJECTIVES) if slow else DEFAULT_TAGS
  out = {}
  folder = tmp_path_factory.mktemp("invariance")
  for n in (1, 2, 4, 8) if slow else (1, 2):
    path = str(folder / f"dev{n}.npz")
    p = helpers.run_py(["-m", "tests.workers", "device_invariance", tiny_model_dir, str(n),
                        path, ",".join(tags)], timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    out[n] = dict(np.load(path))
  return out


def _params(d, tag):
  pre = f"{tag}/params/"
  return {k[len(pre):]: v for k, v in d.items() if k.startswith(pre)}


def _assert_leaves_close(got, want):
  """rtol plus an atol scaled to each leaf's own magnitude (a near-zero element of a leaf
  carries the round-off of the leaf's large ones)."""
  assert got.keys() == want.keys()
  for k in want:
    scale = float(np.max(np.abs(want[k]))) or 1.0
    chex.assert_trees_all_close(got[k], want[k], rtol=RTOL, atol=RTOL * scale,
                                custom_message=k)


@pytest.mark.parametrize("n", [2] + [pytest.param(n, marks=pytest.mark.slow) for n in (4, 8)])
@pytest.mark.parametrize("tag", TAGS)
def test_same_run_on_any_device_count(runs, tag, n):
  ref, got = runs[1], runs[n]
  # Per-step losses and the averaged gradient's norm (a sum over devices instead of a mean
  # would show here).
  chex.assert_trees_all_close(got[f"{tag}/loss"], ref[f"{tag}/loss"], rtol=RTOL)
  chex.assert_trees_all_close(got[f"{tag}/grad_norm"], ref[f"{tag}/grad_norm"], rtol=RTOL)
  if f"{tag}/gate/gate" in ref:  # every replica takes the same branch as one device does
    np.testing.assert_array_equal(got[f"{tag}/gate/gate"], ref[f"{tag}/gate/gate"])
  _assert_leaves_close(_params(got, tag), _params(ref, tag))


def test_the_comparison_is_not_vacuous(runs):
  """Dropout is on (it moves the first loss far beyond the bound), and the objectives differ."""
  assert DROPOUT > 0
  d = runs[1]
  assert abs(d["ce/loss"][0] - d["ce/loss_without_dropout"]) > 10 * RTOL * d["ce/loss"][0]
  assert not np.allclose(d["gloss/loss"], d["ce/loss"])
  assert not np.allclose(d["acl/loss"], d["ce/loss"])


def _train_losses(workdir):
  with open(f"{workdir}/metrics.jsonl") as f:
    recs = [json.loads(line) for line in f]
  return np.array([r["loss"] for r in recs if r["kind"] == "train"])


@pytest.mark.slow
def test_training_loop_gives_the_same_losses_on_1_and_2_devices(tiny_model_dir, tmp_path):
  """The real loop (quickstart runlocal, Adam, dropout at the checkpoint's rate): the loop feeds
  each example's dataset index to the step, so the per-step train losses agree.

  Adam divides by sqrt(v), which can turn a round-off difference in a near-zero gradient
  element into a full-size update of that element; such elements have near-zero gradients,
  so they move the loss only to second order, and the losses stay within the same bound.
  """
  losses = {}
  for n in (1, 2):
    wd = str(tmp_path / f"dev{n}")
    p = helpers.run_py(["train.py", "--config", "configs/quickstart.py:runlocal", "--workdir", wd,
                        f"--config.model.name={tiny_model_dir}", f"--config.model.dropout={DROPOUT}",
                        "--config.progress=False"],
                       XLA_FLAGS=f"--xla_force_host_platform_device_count={n}")
    assert p.returncode == 0, p.stderr[-3000:]
    losses[n] = _train_losses(wd)
  assert len(losses[1]) == 6
  chex.assert_trees_all_close(losses[2], losses[1], rtol=RTOL)
