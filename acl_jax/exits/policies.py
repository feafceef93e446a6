"""Early-exit policies: when does an example leave the network?

Each policy is a per-layer rule on the softmax p_m of exit m (SPEC §3):
  entropy:    exit at the first layer where -sum p log p (natural log) < threshold (DeeBERT).
  confidence: exit at the first layer where max p >= threshold.
  patience:   PABEE's counter: 0 at layer 1; at every later layer +1 if the argmax equals the
              previous layer's, else back to 0. Exit where the counter reaches threshold P, so
              the earliest exit is layer P + 1.
An example that never meets its rule exits at the last layer; its prediction is the argmax of
the exit it leaves at.

The rule is written once, as `policy_step` on one layer's logits plus a small carried state.
`select_exit` scans it over all layers of a full forward pass (the reference), and
`acl_jax.exits.fast` calls it layer by layer on the examples still running.
"""
import functools
import math
import numbers
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from acl_jax.errors import UserError
from acl_jax.exits.margin import check_margin, margin_rule
from acl_jax.names import lookup

ONE_EXIT_MSG = "early-exit needs a model trained with exits='all' (this checkpoint has one exit)"


class ExitState(NamedTuple):
  """Per-example state carried from layer to layer.

  Attributes:
    count: [batch] int32, PABEE's patience counter.
    prev: [batch] int32, the previous layer's argmax (-1 before layer 1, so layer 1 resets
      the counter to 0).
  """
  count: jax.Array
  prev: jax.Array


def init_state(batch: int) -> ExitState:
  """The state before layer 1 for `batch` examples."""
  return ExitState(count=jnp.zeros((batch,), jnp.int32), prev=jnp.full((batch,), -1, jnp.int32))


# Rules: (log_probs [b, K], pred [b], state, threshold) -> (done [b] bool, new state).
def _entropy_rule(log_probs, pred, state, threshold):
  del pred
  entropy = -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)
  return entropy < threshold, state


def _confidence_rule(log_probs, pred, state, threshold):
  del pred
  return jnp.exp(jnp.max(log_probs, axis=-1)) >= threshold, state


def _patience_rule(log_probs, pred, state, threshold):
  del log_probs
  count = jnp.where(pred == state.prev, state.count + 1, 0).astype(jnp.int32)
  return count >= threshold, ExitState(count=count, prev=pred)


def _is_real(x) -> bool:
  return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))


def _check_entropy(t):
  if not _is_real(t) or not math.isfinite(t) or t < 0:
    raise UserError(f"entropy threshold must be a finite float >= 0 (nats), got {t!r}.")
  return float(t)


def _check_confidence(t):
  if not _is_real(t) or not 0 < t <= 1:
    raise UserError(f"confidence threshold must be a float in (0, 1], got {t!r}.")
  return float(t)


def _check_patience(t):
  if not isinstance(t, numbers.Integral) or isinstance(t, (bool, np.bool_)) or t < 1:
    raise UserError(
        f"patience threshold must be an int >= 1 (layers in a row with the same argmax), "
        f"got {t!r}.")
  return int(t)


class Policy(NamedTuple):
  """A registered exit policy.

  Attributes:
    rule: (log_probs [b, K], pred [b], state, threshold) -> (done [b] bool, state).
    check: validates a Python threshold and returns it normalised (float or int).
    dtype: dtype of the threshold inside jitted code.
  """
  rule: Callable[..., Any]
  check: Callable[[Any], Any]
  dtype: Any


POLICIES = {
    "entropy": Policy(_entropy_rule, _check_entropy, jnp.float32),
    "confidence": Policy(_confidence_rule, _check_confidence, jnp.float32),
    "patience": Policy(_patience_rule, _check_patience, jnp.int32),
    "margin": Policy(margin_rule, check_margin, jnp.float32),  # not in SPEC: README example
}


def get_policy(policy: str) -> Policy:
  return lookup(POLICIES, policy, "exit policy")


def normalize_threshold(policy: str, threshold: Any) -> float | int:
  """Validates a concrete `threshold` for `policy`; returns it as a Python float or int."""
  if isinstance(threshold, (np.ndarray, jax.Array)) and np.ndim(threshold) == 0:
    threshold = threshold.item()
  return get_policy(policy).check(threshold)


def check_threshold(policy: str, threshold: Any) -> jax.Array:
  """Validates `threshold` for `policy`; returns it as a scalar array of the policy's dtype.

  A traced threshold (inside a caller's jit) cannot be range-checked and is only cast.
  """
  pol = get_policy(policy)
  if not isinstance(threshold, jax.core.Tracer):
    threshold = normalize_threshold(policy, threshold)
  return jnp.asarray(threshold, pol.dtype)


def policy_step(logits: jax.Array, state: ExitState, policy: str,
                threshold: jax.Array) -> tuple[jax.Array, jax.Array, ExitState]:
  """Applies `policy` to one layer's exit.

  Pure and jittable with `policy` static; `threshold` may be traced (see `check_threshold`).

  Args:
    logits: [batch, K] logits of this layer's exit.
    state: the `ExitState` after the previous layer (`init_state` before layer 1).
    policy: a key of `POLICIES`.
    threshold: scalar, already validated.

  Returns:
    done: [batch] bool, whether the rule says exit here.
    pred: [batch] int32, this exit's argmax.
    state: the updated `ExitState`.
  """
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  pred = jnp.argmax(log_probs, axis=-1).astype(jnp.int32)
  done, state = get_policy(policy).rule(log_probs, pred, state, threshold)
  return done, pred, state


def check_num_exits(num_exits: int) -> None:
  if num_exits < 2:
    raise ValueError(f"{ONE_EXIT_MSG}; got logits with {num_exits} exit(s).")


@functools.partial(jax.jit, static_argnames="policy")
def _select_exit(logits, threshold, policy):
  def body(state, lg):
    done, pred, state = policy_step(lg, state, policy, threshold)
    return state, (done, pred)

  _, (done, pred) = jax.lax.scan(body, init_state(logits.shape[1]), logits)
  done = done.at[-1].set(True)  # whoever never met the rule leaves at the last layer
  first = jnp.argmax(done, axis=0)
  return (first + 1).astype(jnp.int32), jnp.take_along_axis(pred, first[None], axis=0)[0]


def select_exit(logits: jax.Array, policy: str, threshold: Any) -> tuple[jax.Array, jax.Array]:
  """Exit layer and prediction of every example, given all exits' logits (the reference).

  Args:
    logits: [num_exits, batch, K] (jax or numpy) from a model with `exits="all"`.
    policy: "entropy", "confidence" or "patience".
    threshold: entropy: float >= 0; confidence: float in (0, 1]; patience: int >= 1.

  Returns:
    exit_layer: [batch] int32, 1-based layer each example leaves at.
    preds: [batch] int32, the argmax of that exit.
  """
  get_policy(policy)
  threshold = check_threshold(policy, threshold)
  if np.ndim(logits) != 3:
    raise ValueError(f"logits must be [num_exits, batch, K], got shape {np.shape(logits)}.")
  check_num_exits(np.shape(logits)[0])
  return _select_exit(jnp.asarray(logits), threshold, policy=policy)
