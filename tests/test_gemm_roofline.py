"""benchmarks/gemm_roofline.py computes the products it claims to time, at the step's FLOPs."""
import numpy as np
import pytest

from benchmarks import gemm_roofline as gr


@pytest.mark.parametrize("bmkn", [(1, 5, 3, 7), (4, 6, 2, 5)])
@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False)])
def test_jax_and_torch_compute_the_named_product(bmkn, ta, tb):
  g = dict(name="t", bmkn=bmkn, ta=ta, tb=tb, per_step=1)
  a, b = gr.operands(g, seed=3)
  op_a = np.swapaxes(a, -1, -2) if ta else a
  op_b = np.swapaxes(b, -1, -2) if tb else b
  want = np.matmul(op_a.astype(np.float64), op_b.astype(np.float64))
  m, n = bmkn[1], bmkn[3]
  assert want.shape[-2:] == (m, n)
  # float32 products of length k: a few ulps of the largest partial sum.
  tol = 8 * np.finfo(np.float32).eps * bmkn[2] * np.abs(op_a).max() * np.abs(op_b).max()
  np.testing.assert_allclose(np.asarray(gr.jax_product(g, a, b)()), want, atol=tol, rtol=0)
  torch = pytest.importorskip("torch")
  with torch.no_grad():
    np.testing.assert_allclose(gr.torch_product(g, a, b)().numpy(), want, atol=tol, rtol=0)


def test_step_flops_are_the_models():
  t, h, f, heads, seq, layers = 32 * 64, 384, 1536, 12, 64, 6
  dense = 2 * t * h * (3 * h + h + f + f)               # QKV, out, FFN in, FFN out
  attention = 2 * (2 * (t // seq) * heads * seq * seq * (h // heads))   # scores, context
  want = 3 * layers * (dense + attention)               # forward and two backward products
  assert sum(gr.flops(g) * g["per_step"] for g in gr.gemms()) == want
