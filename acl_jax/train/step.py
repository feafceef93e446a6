"""The data-parallel train and eval steps.

Each step is written as a per-device function with named-axis collectives over the "data" axis,
and mapped with `jax.shard_map` under `jax.jit` on a 1-D mesh. The same code runs on one device,
on N fake CPU devices and across processes (`jax.distributed`), where the mesh spans every
process's devices and each process feeds its own slice of the global batch.
"""
import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from acl_jax.losses import angle_gate, encoder_angle_mask
from acl_jax.train.state import TrainState

AXIS = "data"


def make_mesh(devices=None) -> jax.sharding.Mesh:
  """A 1-D data mesh over all (global) devices.

  Auto axis types: `shard_map` then accepts inputs that are not yet sharded (the default
  Explicit axes of `jax.make_mesh` would reject them).
  """
  devices = jax.devices() if devices is None else devices
  return jax.make_mesh((len(devices),), (AXIS,), axis_types=(jax.sharding.AxisType.Auto,),
                       devices=devices)


def replicate(tree: Any, mesh) -> Any:
  """Places a host pytree on every device of the mesh (works across processes)."""
  sharding = NamedSharding(mesh, P())

  def put(x):
    x = np.asarray(x) if not isinstance(x, jax.Array) else x
    if isinstance(x, jax.Array) and x.sharding == sharding:
      return x
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])
  return jax.tree.map(put, tree)


def shard_batch(batch: dict[str, np.ndarray], mesh) -> dict[str, jax.Array]:
  """This process's rows of a global batch -> global arrays split along the data axis."""
  sharding = NamedSharding(mesh, P(AXIS))
  return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v))
          for k, v in batch.items()}


@dataclasses.dataclass(frozen=True)
class GateSpec:
  """ACL-Grad: the "aux" term's gradient is gated against the "ce" term's (SPEC 2.4)."""
  threshold_deg: float = 90.0
  mode: str = "drop"
  angle_params: str = "all"

  def __post_init__(self):
    # The top mode picks CE or CE + lam*ACL inside a lax.cond; it has no projection branch.
    if self.angle_params == "top" and self.mode != "drop":
      raise ValueError(f"loss.angle_params='top' supports gate_mode='drop' only, got "
                       f"{self.mode!r}: 'project' needs the full-parameter gradients; use "
                       "angle_params='all'.")


@dataclasses.dataclass(frozen=True)
class Objective:
  """A training objective: named scalar loss terms and their weights in the total.

  `terms(params, logits, aux, batch, key, step)` is pure and returns `(terms, metrics)`, dicts of
  scalars. The total loss is sum_k weights[k] * terms[k]. With `gate`, the step takes
  separate gradients of "ce" and "aux" and combines them with the angle gate; any other terms
  (gated ACL-CL's "rest") get a third gradient, added outside the gate.
  """
  name: str
  terms: Callable[..., tuple[dict[str, jax.Array], dict[str, jax.Array]]]
  weights: dict[str, float]
  gate: GateSpec | None = None
  # (grads, step) -> grads: zeroes the gradients of parameters frozen at this step (2ST),
  # after the cross-device mean and before clipping.
  freeze: Callable[[Any, jax.Array], Any] | None = None
  # A constant factor inside a term (gated multi-exit: the final exit's weight w_M in "ce"
  # and "aux"), divided out of the gate's logged norms.
  term_scales: dict[str, float] = dataclasses.field(default_factory=dict)


def example_ids(batch) -> jax.Array:
  """[local batch] global example ids of a device's rows, inside the per-device step.

  The batch's "example_id" (the dataset index, set by the train loop) when present; else the
  row's index in the global batch, which is also the same on any device count.
  """
  if "example_id" in batch:
    return batch["example_id"]
  n = batch["input_ids"].shape[0]
  return lax.axis_index(AXIS) * n + jnp.arange(n)


def _forward(model, params, batch, key, train):
  rngs = {"dropout": key} if train else None
  return model.apply({"params": params}, batch["input_ids"], batch["attention_mask"],
                     batch.get("token_type_ids"), train=train, rngs=rngs,
                     example_ids=example_ids(batch) if train else None)


def _gate_metrics(info, objective: Objective):
  """The gate's log: angle, on/off and the two norms, unweighted (SPEC §2.4: |g_CE|, |g_ACL|),
  though the gate sees (1 - lam) g_CE under SCL's convex form and w_M-weighted terms in
  multi-exit training."""
  scale = {"ce": objective.weights["ce"] * objective.term_scales.get("ce", 1.0),
           "acl": objective.term_scales.get("aux", 1.0)}
  info = {**info, **{f"norm_{k}": info[f"norm_{k}"] / w for k, w in scale.items() if w > 0}}
  return {f"gate/{k}": v for k, v in info.items()}


def _ungated(names):
  """The loss terms a gated step adds outside the gate: all but "ce" and "aux"."""
  return tuple(k for k in names if k not in ("ce", "aux"))


def _weighted(terms, weights, names):
  """sum_k weights[k] * terms[k] over `names`; weights=None means unit weights."""
  return sum((1.0 if weights is None else weights[k]) * terms[k] for k in names)


def make_train_step(model, objective: Objective, tx: optax.GradientTransformation, mesh,
                    donate: bool = True, max_traces: int | None = None):
  """Builds `train_step(state, batch) -> (state, metrics)`, jitted, state donated.

  Args:
    model: the Flax `Classifier`.
    objective: loss terms and weights (see `Objective`).
    tx: the optax transformation.
    mesh: 1-D data mesh from `make_mesh`.
    donate: donate the input state buffers.
    max_traces: if set, fail when the step is traced more often (catches recompiles).
  """

  def per_device(state: TrainState, batch):
    # Both keys are the same on every device: randomness is keyed by the batch's global
    # example ids (batch["example_id"]), never by the device, so the run does not depend on
    # the device count (dropout: models.bert.Dropout; the G-Loss split: losses.gloss).
    step_key = jax.random.fold_in(state.rng, state.step)
    drop_key = jax.random.fold_in(step_key, 0)
    loss_key = jax.random.fold_in(step_key, 1)
    # Mark the replicated params as device-varying before differentiating. Under shard_map's
    # varying-axes typing, jax.grad with respect to an unvarying input already sums its
    # cotangent over the axis (the transpose of the implicit pvary is a psum), which would
    # make every gradient N_devices times the global-batch gradient and the pmeans below
    # no-ops. With varying params each device gets its local gradient, and pmean averages.
    params = lax.pcast(state.params, AXIS, to="varying")

    def terms_fn(params):
      logits, aux = _forward(model, params, batch, drop_key, True)
      return objective.terms(params, logits, aux, batch, loss_key, state.step)

    def loss_of(names, weights=objective.weights):
      def f(params):
        terms, metrics = terms_fn(params)
        return _weighted(terms, weights, names), (terms, metrics)
      return f

    names = tuple(objective.weights)
    metrics_out = {}
    if objective.gate is None:
      grads, (terms, metrics) = jax.grad(loss_of(names), has_aux=True)(params)
      grads = lax.pmean(grads, AXIS)
    elif objective.gate.angle_params == "top":
      grads, terms, metrics, info = _top_gated_grads(model, objective, params, batch,
                                                     drop_key, loss_key, state.step)
      metrics_out.update(_gate_metrics(info, objective))
    else:
      # Separate gradients with the same batch and dropout key; XLA shares the forward.
      g_ce, (terms, metrics) = jax.grad(loss_of(("ce",)), has_aux=True)(params)
      g_aux, _ = jax.grad(loss_of(("aux",), None), has_aux=True)(params)
      rest = _ungated(names)
      g_rest = jax.grad(loss_of(rest), has_aux=True)(params)[0] if rest else None
      # Average first, so the gate sees global gradients and every replica branches alike.
      g_ce, g_aux, g_rest = lax.pmean((g_ce, g_aux, g_rest), AXIS)
      mask = encoder_angle_mask(state.params) if objective.gate.angle_params == "encoder" else None
      # g_ce carries its weight (1 for ACL, 1-lam for SCL); the gate adds lam * g_aux. In
      # gated ACL-CL both terms are the final exit's, already times its weight w_M.
      grads, info = angle_gate(g_ce, g_aux, objective.weights["aux"],
                               threshold_deg=objective.gate.threshold_deg,
                               mode=objective.gate.mode, params_mask=mask)
      if g_rest is not None:
        grads = jax.tree.map(jnp.add, grads, g_rest)
      metrics_out.update(_gate_metrics(info, objective))
    if objective.freeze is not None:
      grads = objective.freeze(grads, state.step)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    new_params = optax.apply_updates(state.params, updates)
    metrics_out.update({f"loss/{k}": v for k, v in terms.items()})
    metrics_out.update(metrics)
    metrics_out["loss"] = _weighted(terms, objective.weights, names)
    metrics_out = lax.pmean(metrics_out, AXIS)
    metrics_out["grad_norm"] = optax.global_norm(grads)
    new_state = state.replace(step=state.step + 1, params=new_params, opt_state=opt_state)
    return new_state, metrics_out

  if max_traces is not None:
    import chex  # pylint: disable=import-outside-toplevel
    per_device = chex.assert_max_traces(per_device, n=max_traces)
  mapped = jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=(P(), P()))
  return jax.jit(mapped, donate_argnums=(0,) if donate else ())


def _split_params(params, top_names):
  """(upper, lower) param dicts: the top encoder layers and every exit head vs the rest."""
  enc = params["encoder"]
  upper = {k: v for k, v in params.items() if k != "encoder"}
  upper["encoder"] = {k: enc[k] for k in top_names}
  lower = {"encoder": {k: v for k, v in enc.items() if k not in top_names}}
  return upper, lower


def _merge_params(upper, lower):
  out = {k: v for k, v in upper.items() if k != "encoder"}
  out["encoder"] = {**lower["encoder"], **upper["encoder"]}
  return out


def _top_gated_grads(model, objective: Objective, params, batch, drop_key, loss_key, step):
  """ACL-Grad with the angle measured on the top layer and the heads only (fast mode).

  The forward is split below the top layer. Two separate `jax.grad` calls give the CE and ACL
  gradients of the upper part (top layer + exit heads) and of its inputs (the hidden states and
  the lower layers' per-layer states, read by lower exits); the parameter parts,
  averaged across devices, give the angle and the gate. A `lax.cond` then picks the upper
  gradient and the input cotangents of CE or of CE + lam*ACL (a linear combination of the two,
  so the gate itself needs no third backward), and one vjp carries the cotangent through the
  lower layers. Cost: one forward, two backwards of the top layer and one of the rest, instead
  of two full backwards. Ungated terms (gated ACL-CL's lower exits) add a third backward of
  the top layer only.
  """
  top = f"layer_{model.cfg.num_layers - 1}"
  upper_p, lower_p = _split_params(params, (top,))
  rngs = {"dropout": drop_key}
  ids, mask, eids = batch["input_ids"], batch["attention_mask"], example_ids(batch)

  def lower_fn(lp):
    return model.apply({"params": lp}, ids, mask, batch.get("token_type_ids"), True,
                       method="lower", rngs=rngs, example_ids=eids)

  (x, states_lower), vjp_lower = jax.vjp(lower_fn, lower_p)

  def upper_loss(names, weights=objective.weights):
    def f(up, x_in, states_in):
      logits, aux = model.apply({"params": up}, x_in, mask, states_in, True, method="upper",
                                rngs=rngs, example_ids=eids)
      terms, metrics = objective.terms(_merge_params(up, lower_p), logits, aux, batch, loss_key,
                                       step)
      return _weighted(terms, weights, names), (terms, metrics)
    return f

  # Cotangents flow into the lower layers through x and through the per-layer states that
  # the lower exits (and ACL-CL's lower-layer terms) read.
  grad3 = lambda f: jax.grad(f, argnums=(0, 1, 2), has_aux=True)(upper_p, x, states_lower)
  (g_ce, *ct_ce), (terms, metrics) = grad3(upper_loss(("ce",)))
  (g_aux, *ct_aux), _ = grad3(upper_loss(("aux",), None))
  lam = objective.weights["aux"]
  _, info = angle_gate(*lax.pmean((g_ce, g_aux), AXIS), lam,
                       threshold_deg=objective.gate.threshold_deg)
  g_up, ct = lax.cond(
      info["gate"] > 0,
      lambda: (jax.tree.map(lambda c, a: c + lam * a, g_ce, g_aux),
               jax.tree.map(lambda c, a: c + lam * a, ct_ce, ct_aux)),
      lambda: (g_ce, ct_ce))
  rest = _ungated(tuple(objective.weights))
  if rest:  # ungated terms (gated ACL-CL's lower exits): their own upper backward, added
    (g_rest, *ct_rest), _ = grad3(upper_loss(rest))
    g_up, ct = jax.tree.map(jnp.add, (g_up, ct), (g_rest, ct_rest))
  (g_low,) = vjp_lower(tuple(ct))
  grads = lax.pmean(_merge_params(g_up, g_low), AXIS)
  return grads, terms, metrics, info


def make_eval_step(model, mesh):
  """Builds `eval_step(params, batch) -> (logits [exits, B, K], feats [exits, B, d])`."""
  def per_device(params, batch):
    logits, aux = _forward(model, params, batch, None, False)
    return logits, aux["feats"]

  mapped = jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(AXIS)),
                         out_specs=(P(None, AXIS), P(None, AXIS)))
  return jax.jit(mapped)


def to_host(x: jax.Array) -> np.ndarray:
  """A global array as numpy on every process (gathers across processes when needed)."""
  if jax.process_count() == 1:
    return np.asarray(x)
  from jax.experimental import multihost_utils  # pylint: disable=import-outside-toplevel
  return np.asarray(multihost_utils.process_allgather(x, tiled=True))
