"""The encoder's dense layers in a low-precision compute dtype (bfloat16, float16).

`bert._dense` builds `LowPrecisionDense` where the compute dtype is narrower than float32, and
`nn.Dense` in float32.
"""
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp


def _f32_acc_dot(a, b, contract):
  """a · b over `contract`, accumulated in float32 and returned in float32."""
  return jax.lax.dot_general(a, b, (contract, ((), ())), preferred_element_type=jnp.float32)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _low_precision_affine(x, kernel, bias, dtype):
  """x [rows, d] (in `dtype`) @ kernel [d, f] + bias [f] on `dtype` (bfloat16, float16), with
  float32 accumulation, the bias added in float32 and one rounding to `dtype`; the kernel
  and bias stay float32 (their gradients too)."""
  y = _f32_acc_dot(x, kernel.astype(dtype), ((1,), (0,)))
  return (y + bias).astype(dtype)


def _low_precision_affine_fwd(x, kernel, bias, dtype):
  return _low_precision_affine(x, kernel, bias, dtype), (x, kernel)


def _low_precision_affine_bwd(dtype, res, g):
  x, kernel = res
  g = g.astype(dtype)
  dx = _f32_acc_dot(g, kernel.astype(dtype), ((1,), (1,))).astype(dtype)
  return dx, _f32_acc_dot(x, g, ((0,), (0,))), jnp.sum(g.astype(jnp.float32), axis=0)


_low_precision_affine.defvjp(_low_precision_affine_fwd, _low_precision_affine_bwd)


class LowPrecisionDense(nn.Module):
  """`nn.Dense` for a bfloat16 (or float16) compute dtype: the same params ("kernel" [d, f]
  and "bias" [f], float32, initialised the same way), computed by `_low_precision_affine`.

  Where `nn.Dense(dtype=bfloat16)` asks for a bfloat16 product, XLA:CPU runs float32 GEMMs;
  asked for a float32 result, it runs the CPU's bfloat16 instructions (AVX512-BF16, AMX) at
  about 2x the float32 rate. The bias gradient, a float32 sum here, is a bfloat16 one there
  that XLA:CPU splits into slow windowed reductions (BENCHMARKS.md, "Mixed precision on
  CPU"). Its values are nn.Dense's up to float32 summation order and the bias's rounding."""
  features: int
  dtype: Any
  kernel_init: Any

  @nn.compact
  def __call__(self, x):
    kernel = self.param("kernel", self.kernel_init, (x.shape[-1], self.features), jnp.float32)
    bias = self.param("bias", nn.initializers.zeros_init(), (self.features,), jnp.float32)
    dtype = jnp.dtype(self.dtype)
    y = _low_precision_affine(x.reshape(-1, x.shape[-1]).astype(dtype), kernel, bias, dtype)
    return y.reshape(*x.shape[:-1], self.features)
