"""The trainer's behaviour, pinned: eleven runlocal runs against tests/golden/trainer_runs.json.

CE, SCL, ACL gated (all params and top), gated ACL-CL, JT, 2ST, ALT, KD, G-Loss and triplet,
each trained by the real loop (quickstart runlocal, 6 steps, tiny model, dropout 0.1). A
restructuring of `acl_jax/train` must leave them unchanged:
- on any machine, the per-step train losses and each param leaf's norm and sum agree with the
  record to a float32 bound;
- on the machine that wrote the record, with ACL_JAX_GOLDEN_EXACT=1, the final params are
  bit-identical (sha256). The hash is not portable: another CPU's kernels round differently.

Slow (BENCHMARKS.md, "The test suite's duration"): `pytest --runslow
tests/test_golden_runs.py`. To record anew (only where a change of behaviour is intended, and
say why in the commit):
  python -m tests.workers golden_runs MODEL_DIR ROOT tests/golden/trainer_runs.json
with MODEL_DIR made by `tests.conftest.make_tiny_model_dir`.
"""
import json
import os

import numpy as np
import pytest

from tests import helpers
from tests.workers import GOLDEN_RUNS

RECORD = os.path.join(helpers.REPO, "tests", "golden", "trainer_runs.json")
EPS = float(np.finfo(np.float32).eps)
# Six Adam steps on another CPU: every matmul's inner sums are blocked differently (not only
# the batch sum, as across device counts), n up to ~1e3 terms, so the losses move by up to
# about n * eps ~ 1e-4 relative; Adam can turn round-off in a near-zero gradient element into
# a full-size update of lr = 5e-5 per step, which moves a leaf's sum by at most
# steps * lr * sqrt(size) * norm-relative terms. 1e3 eps on losses and norms, and on a leaf's
# sum 1e3 eps * sqrt(size) * its norm (Cauchy-Schwarz) plus 6 * lr * sqrt(size).
RTOL = 1e3 * EPS
LR_STEPS = 6 * 5e-5


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory):
  root = tmp_path_factory.mktemp("golden")
  out = str(root / "now.json")
  p = helpers.run_py(["-m", "tests.workers", "golden_runs", tiny_model_dir, str(root / "runs"),
                      out], timeout=1800)
  assert p.returncode == 0, p.stderr[-3000:]
  with open(out) as f:
    return json.load(f)


@pytest.fixture(scope="module")
def record():
  with open(RECORD) as f:
    return json.load(f)


@pytest.mark.slow
@pytest.mark.parametrize("tag", list(GOLDEN_RUNS))
def test_run_matches_the_record(runs, record, tag):
  got, want = runs["runs"][tag], record["runs"][tag]
  np.testing.assert_allclose(got["losses"], want["losses"], rtol=RTOL)
  assert got["leaf_norm"].keys() == want["leaf_norm"].keys()
  for k, norm in want["leaf_norm"].items():
    root_n = np.sqrt(want["leaf_size"][k])
    np.testing.assert_allclose(got["leaf_norm"][k], norm, rtol=RTOL, atol=LR_STEPS * root_n,
                               err_msg=k)
    np.testing.assert_allclose(got["leaf_sum"][k], want["leaf_sum"][k],
                               atol=RTOL * root_n * norm + LR_STEPS * root_n, err_msg=k)
  if os.environ.get("ACL_JAX_GOLDEN_EXACT") == "1":
    assert got["params_sha256"] == want["params_sha256"], (
        f"{tag}: params differ bit-wise from the record (written on {record['cpu_model']})")
