"""ACL-Grad: gate the contrastive gradient by its angle to the CE gradient (SPEC §2.4)."""
import math
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from acl_jax.names import check_known, path_names

GATE_MODES = ("drop", "project")
# What the ACL-Grad angle is measured over (`angle_mask`).
ANGLE_PARAMS = ("all", "encoder", "top")
_EPS = 1e-12


def check_gate_args(lam, threshold_deg, mode) -> None:
  """Raises ValueError for a negative lambda, a threshold outside (0, 180] or a bad mode."""
  check_known(mode, GATE_MODES, "gate mode")
  if not isinstance(threshold_deg, jax.core.Tracer):
    if not 0.0 < float(threshold_deg) <= 180.0:
      raise ValueError(
          f"threshold_deg must lie in (0, 180] degrees, got {threshold_deg!r}. The default "
          "90 turns the contrastive term off whenever it conflicts with CE.")
  if not isinstance(lam, jax.core.Tracer) and float(lam) < 0:
    raise ValueError(f"lam (the contrastive weight lambda) must be >= 0, got {lam!r}.")


def _is_static_bool(m) -> bool:
  return isinstance(m, (bool, np.bool_))


def _tree_dot(a: Any, b: Any, mask: Optional[Any] = None) -> jax.Array:
  """<a, b> summed over all leaves in float32; masked-out leaves contribute 0."""
  if mask is None:
    mask = jax.tree.map(lambda _: True, a)
  total = jnp.zeros((), jnp.float32)
  for x, y, m in zip(jax.tree.leaves(a), jax.tree.leaves(b), jax.tree.leaves(mask)):
    if _is_static_bool(m):
      if not m:
        continue  # Dropped at trace time: no work for excluded leaves.
      prod = x.astype(jnp.float32) * y.astype(jnp.float32)
    else:
      prod = jnp.where(m, x.astype(jnp.float32) * y.astype(jnp.float32), 0.0)
    total = total + jnp.sum(prod)
  return total


class AngleStats(NamedTuple):
  """Two gradients compared over a parameter partition (`angle_stats`), float32 scalars."""
  dot: jax.Array  # <g_a, g_b>
  sq_a: jax.Array  # |g_a|^2
  sq_b: jax.Array  # |g_b|^2
  cos: jax.Array  # <g_a, g_b> / (|g_a| |g_b| + 1e-12), clipped to [-1, 1]
  degrees: jax.Array  # arccos(cos) in degrees, in [0, 180]


def sq_norm(g: Any, params_mask: Optional[Any] = None) -> jax.Array:
  """|g|^2 over the leaves `params_mask` selects (None: every leaf), summed in float32.

  Args:
    g: pytree of arrays.
    params_mask: optional pytree of bools with g's structure, as in `angle_gate`.

  Returns:
    A float32 scalar.
  """
  return _tree_dot(g, g, params_mask)


def angle_stats(g_a: Any, g_b: Any, params_mask: Optional[Any] = None) -> AngleStats:
  """The angle between two gradients over a parameter partition, as ACL-Grad measures it.

  cos = <g_a, g_b> / (|g_a| |g_b| + eps) over the leaves `params_mask` selects, in float32,
  clipped to [-1, 1] against round-off; a zero gradient on either side gives cos = 0 (90
  degrees). `angle_gate` decides with this function, so a diagnostic that calls it measures
  what the gate sees.

  Args:
    g_a: pytree of arrays.
    g_b: pytree with g_a's structure.
    params_mask: optional pytree of bools with g_a's structure (`angle_mask`); None uses
      every leaf.

  Returns:
    AngleStats: the dot product, both squared norms, the cosine and the angle in degrees.

  Raises:
    ValueError: the gradients, or the mask, differ in pytree structure.
  """
  if jax.tree.structure(g_a) != jax.tree.structure(g_b):
    raise ValueError("The two gradients must share one pytree structure; got "
                     f"{jax.tree.structure(g_a)} and {jax.tree.structure(g_b)}.")
  if params_mask is not None and jax.tree.structure(params_mask) != jax.tree.structure(g_a):
    raise ValueError("params_mask must have the gradients' pytree structure (one bool per "
                     "leaf); build it with angle_mask(params, ...).")
  dot = _tree_dot(g_a, g_b, params_mask)
  sq_a, sq_b = sq_norm(g_a, params_mask), sq_norm(g_b, params_mask)
  cos = jnp.clip(dot / (jnp.sqrt(sq_a) * jnp.sqrt(sq_b) + _EPS), -1.0, 1.0)
  return AngleStats(dot, sq_a, sq_b, cos, jnp.degrees(jnp.arccos(cos)))


def angle(g_a: Any, g_b: Any, params_mask: Optional[Any] = None) -> jax.Array:
  """The angle between g_a and g_b in degrees, [0, 180], over `params_mask`'s leaves: the
  gate's `info["angle"]` (`angle_stats`)."""
  return angle_stats(g_a, g_b, params_mask).degrees


def _combine(g_ce: Any, g_acl: Any, ce_scale, acl_scale) -> Any:
  """ce_scale * g_ce + acl_scale * g_acl per leaf, kept in g_ce's leaf dtypes."""
  def leaf(c, a):
    mixed = ce_scale * c.astype(jnp.float32) + acl_scale * a.astype(jnp.float32)
    return mixed.astype(c.dtype)

  return jax.tree.map(leaf, g_ce, g_acl)


def angle_gate(
    g_ce: Any,
    g_acl: Any,
    lam: float,
    threshold_deg: float = 90.0,
    mode: str = "drop",
    params_mask: Optional[Any] = None,
    ce_weight: float = 1.0,
) -> tuple[Any, dict]:
  """Combines the CE and contrastive gradients, dropping or projecting on conflict (SPEC §2.4).

  The one place a gate decision is made. cos = <g_ce, g_acl> / (|g_ce| |g_acl| + eps) over
  the leaves `params_mask` selects (the parameter partition the angle is measured over), and
  angle = degrees(arccos(cos)), both from `angle_stats`. The two do not conflict when
  angle <= threshold_deg; the test is done on cos against cos(threshold) so that exactly
  orthogonal gradients count as 90 degrees despite arccos round-off.

  Updates:
    agree:             g = ce_weight * g_ce + lam * g_acl, the objective's own gradient
                       (ce_weight is 1 - lam in SCL's convex form, 1 for ACL-Embed);
    conflict, drop:    g = g_ce;
    conflict, project: g = g_ce + lam * (g_acl - c * g_ce|mask), c = <g_acl, g_ce> /
                       (|g_ce|^2 + eps), PCGrad style. Judged and projected over the same
                       masked leaves: the added term is orthogonal to g_ce on them, and the
                       leaves the angle does not see keep g_ce + lam * g_acl.
  A zero gradient on either side (over the mask) gives cos = 0, so angle 90, which is not a
  conflict under the default threshold: the update is then the agree one (a zero g_acl adds
  nothing; a zero g_ce lets the ACL term through). Such a step had no angle to judge: it is
  reported as `zero_grad`, not as gate on.

  Call this on gradients already averaged across devices, so every replica takes the
  same branch.

  Args:
    g_ce: pytree, grad of CE.
    g_acl: pytree with g_ce's structure, grad of the contrastive loss.
    lam: lambda >= 0, the contrastive weight.
    threshold_deg: angle threshold in (0, 180].
    mode: "drop" or "project".
    params_mask: optional pytree of bools with g_ce's structure; the angle (and the
      projection) use only True leaves (see `angle_mask`). None uses every leaf. Leaves may
      be Python bools (excluded leaves cost nothing) or bool arrays broadcastable to the leaf.
    ce_weight: the weight of g_ce in the agree branch.

  Returns:
    grads: pytree like g_ce, in g_ce's dtypes.
    info: {"angle": degrees, "gate": 1.0 when a measured angle let the ACL term through
      else 0.0, "zero_grad": 1.0 when either gradient is zero over the mask (then "gate" is
      0.0), "norm_ce", "norm_acl": norms over the masked leaves, the ones the angle uses}.
  """
  check_gate_args(lam, threshold_deg, mode)
  stats = angle_stats(g_ce, g_acl, params_mask)
  dot, sq_ce, cos = stats.dot, stats.sq_a, stats.cos
  norm_ce, norm_acl = jnp.sqrt(sq_ce), jnp.sqrt(stats.sq_b)

  if isinstance(threshold_deg, jax.core.Tracer):
    cos_threshold = jnp.cos(jnp.radians(threshold_deg))
  else:
    cos_threshold = math.cos(math.radians(float(threshold_deg)))
    # cos(pi/2) is 6e-17 in floating point; snap so an exact 0 cosine is "<= 90 degrees".
    cos_threshold = 0.0 if abs(cos_threshold) < 1e-12 else cos_threshold
  agree = cos >= cos_threshold

  def conflict_branch(_):
    if mode == "drop":
      return jax.tree.map(lambda c: c, g_ce)
    coef = dot / (sq_ce + _EPS)
    mask = params_mask if params_mask is not None else jax.tree.map(lambda _: True, g_ce)

    def leaf(c, a, m):
      c32, a32 = c.astype(jnp.float32), a.astype(jnp.float32)
      if _is_static_bool(m):
        projected = a32 - coef * c32 if m else a32
      else:
        projected = jnp.where(m, a32 - coef * c32, a32)
      return (c32 + lam * projected).astype(c.dtype)
    return jax.tree.map(leaf, g_ce, g_acl, mask)

  def agree_branch(_):
    return _combine(g_ce, g_acl, ce_weight, lam)

  grads = jax.lax.cond(agree, agree_branch, conflict_branch, None)
  zero = (norm_ce == 0.0) | (norm_acl == 0.0)
  info = {
      "angle": stats.degrees,
      "gate": (agree & ~zero).astype(jnp.float32),
      "zero_grad": zero.astype(jnp.float32),
      "norm_ce": norm_ce,
      "norm_acl": norm_acl,
  }
  return grads, info


def encoder_angle_mask(params: Any) -> Any:
  """Bool pytree selecting encoder weights for the gate angle (`angle_params=encoder`).

  As in RomeBERT, the angle skips: everything under a top-level key starting with "exit"
  (classifier heads and their poolers), LayerNorm parameters (a path part containing
  "LayerNorm" or "layer_norm", or a leaf named "scale") and every leaf named "bias". A
  leading "params" collection key is looked through, so a Flax variables dict works too.

  Args:
    params: nested dict of parameters (or gradients).

  Returns:
    Pytree of Python bools with params' structure.
  """
  def keep(path, _):
    names = path_names(path)
    if names and names[0] == "params":
      names = names[1:]
    if not names:
      return True
    if names[0].startswith("exit"):
      return False
    if any("LayerNorm" in n or "layer_norm" in n for n in names):
      return False
    return names[-1] not in ("bias", "scale")

  return jax.tree.map_with_path(keep, params)


def top_angle_mask(params: Any) -> Any:
  """Bool pytree selecting the top encoder layer and every exit head (`angle_params=top`).

  The fast ACL-Grad mode's partition: the angle sees the parameters nearest the losses.
  Everything outside "encoder" (the heads) and the encoder's highest `layer_{i}` are True.
  """
  layers = sorted(int(k.split("_")[1]) for k in params["encoder"] if k.startswith("layer_"))
  top = f"layer_{layers[-1]}"

  def keep(path, _):
    names = path_names(path)
    return names[0] != "encoder" or names[1] == top
  return jax.tree.map_with_path(keep, params)



def angle_mask(params: Any, angle_params: str) -> Any:
  """The parameter partition the ACL-Grad angle is measured over, as `angle_gate`'s
  `params_mask`: None for "all", `encoder_angle_mask` for "encoder" (RomeBERT: no heads,
  LayerNorm or biases), `top_angle_mask` for "top" (the top layer and the heads)."""
  if check_known(angle_params, ANGLE_PARAMS, "loss.angle_params") == "all":
    return None
  return encoder_angle_mask(params) if angle_params == "encoder" else top_angle_mask(params)
