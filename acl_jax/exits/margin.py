"""The `margin` exit policy: exit where the top two classes are far enough apart.

Not a policy of SPEC §3; the README's "Adding an exit policy" walks through it as the example
(this file plus one entry in `acl_jax.exits.policies.POLICIES`). An example exits at the first
layer where p_(1) - p_(2), its largest softmax probability minus the second largest, reaches
the threshold in (0, 1]: a confidence rule that also looks at the runner-up.
"""
import math
import numbers

import jax
import jax.numpy as jnp

from acl_jax.errors import UserError


def margin_rule(log_probs, pred, state, threshold):
  """(log_probs [b, K], pred [b], state, threshold) -> (done [b] bool, state)."""
  del pred
  top2 = jax.lax.top_k(jnp.exp(log_probs), 2)[0]
  return top2[:, 0] - top2[:, 1] >= threshold, state


def check_margin(t):
  if not isinstance(t, numbers.Real) or isinstance(t, bool) or not math.isfinite(t) \
      or not 0 < t <= 1:
    raise UserError(f"margin threshold must be a float in (0, 1], got {t!r}.")
  return float(t)
