"""Float32 tolerances for equivalence tests, derived from round-off, not from one CPU.

Two float32 evaluations of the same quantity that differ only in summation order (another
fusion, another matmul kernel, gradients summed per term instead of taken of the sum) differ by
round-off. For a length-n reduction that is about sqrt(n) * eps relative to the magnitudes
summed (the probabilistic bound of Higham and Mary, 2019); eps = 2**-23 is float32's machine
epsilon. A bound built from these quantities holds on any CPU and any XLA kernel; a bare
atol=2e-6 holds on the machine it was fitted on.
"""
import chex
import jax
import numpy as np

EPS = float(np.finfo(np.float32).eps)  # 2**-23 ~ 1.19e-7


def reassociation_rtol(n: int, depth: float = 8.0) -> float:
  """Relative round-off between two summation orders of length-n float32 reductions.

  Args:
    n: the longest reduction in the computation. For parameter gradients it is the number of
      tokens in the batch (each weight's gradient sums one outer product per token).
    depth: a factor for the round-off each stage of the computation (every backward layer)
      adds and hands on, and for cancellation in the sums.
  """
  return depth * EPS * np.sqrt(n)


def assert_trees_close_f32(actual, desired, n: int, depth: float = 8.0):
  """Leaf by leaf: |actual - desired| <= rtol * (|desired| + max|desired|), rtol as above.

  The absolute part is scaled to the leaf's own magnitude: its small elements are sums of
  terms as large as its large ones, so they carry as much absolute round-off. A leaf that is
  exactly zero must stay exactly zero.
  """
  chex.assert_trees_all_equal_structs(actual, desired)
  rtol = reassociation_rtol(n, depth)
  for (path, a), d in zip(jax.tree_util.tree_leaves_with_path(actual), jax.tree.leaves(desired)):
    a, d = np.asarray(a), np.asarray(d)
    name = jax.tree_util.keystr(path)
    chex.assert_trees_all_close({name: a}, {name: d}, rtol=rtol,
                                atol=rtol * float(np.abs(d).max(initial=0.0)))


def trees_differ_f32(a, b, n: int, depth: float = 8.0) -> bool:
  """True when some leaf of a and b differs by more than `assert_trees_close_f32` allows."""
  try:
    assert_trees_close_f32(a, b, n, depth)
  except AssertionError:
    return True
  return False
