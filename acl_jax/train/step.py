"""The data-parallel train and eval steps.

Each step is written as a per-device function with named-axis collectives over the "data" axis,
and mapped with `jax.shard_map` under `jax.jit` on a 1-D mesh. The same code runs on one device,
on N fake CPU devices and across processes (`jax.distributed`), where the mesh spans every
process's devices and each process feeds its own slice of the global batch.
"""
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from acl_jax.losses import angle_gate, angle_mask
from acl_jax.models import apply_batch, is_packed
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
    if isinstance(x, jax.Array) and x.sharding == sharding:
      return x
    host = np.asarray(x)
    placed = jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])
    # On CPU the callback's buffers can alias the host memory, which a step that donates its
    # state cannot reuse: its first call would then allocate a second state beside the temp
    # block. A copy into buffers XLA owns lets every call, the first too, write in place.
    return jax.device_put(placed, sharding, may_alias=False)
  return jax.tree.map(put, tree)


def shard_batch(batch: dict[str, np.ndarray], mesh) -> dict[str, jax.Array]:
  """This process's rows of a global batch -> global arrays split along the data axis."""
  sharding = NamedSharding(mesh, P(AXIS))
  return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v))
          for k, v in batch.items()}


def example_ids(batch) -> jax.Array:
  """[local batch] global example ids of a device's rows, inside the per-device step.

  The batch's "example_id" (the dataset index, as `data.batching` sets it) when present; else
  the row's index in the global batch, which is also the same on any device count.
  """
  if "example_id" in batch:
    return batch["example_id"]
  if is_packed(batch):
    raise ValueError("A packed batch needs its examples' global ids as batch['example_id'] "
                     "(the dataset index): its rows are not examples.")
  n = batch["input_ids"].shape[0]
  return lax.axis_index(AXIS) * n + jnp.arange(n)


def gather_global(*xs):
  """Each array (None passes through) gathered over the data axis into the global batch.

  A loss computed on the gathered batch is the same on every device; its gradient is still
  exact after the step's pmean: all_gather's transpose sums every device's cotangent of a
  device's rows back onto that device (N times its share), and the pmean divides by N.
  """
  return tuple(None if x is None else jax.lax.all_gather(x, AXIS, tiled=True) for x in xs)


def _forward(model, params, batch, key, train):
  """The model on a batch, one example a row or packed (`models.apply_batch`)."""
  rngs = {"dropout": key} if train else None
  return apply_batch(model, params, batch, train=train, rngs=rngs,
                     example_ids=example_ids(batch) if train else None)


def _gate_metrics(info, objective):
  """The gate's log: angle, on/off, zero-gradient steps and the two norms, unscaled (SPEC
  §2.4: |g_CE|, |g_ACL|), though under multi-exit both terms carry the final exit's weight."""
  info = {**info, "norm_ce": info["norm_ce"] / objective.main_scale,
          "norm_acl": info["norm_acl"] / objective.aux_scale}
  return {f"gate/{k}": v for k, v in info.items()}


def run_sums(objective) -> tuple[str, ...]:
  """The step metrics the loop sums over the whole run, across resumes: the gate's on and
  zero-gradient steps (`run_summary` states them in the results)."""
  return ("gate/gate", "gate/zero_grad") if objective.gate is not None else ()


def run_summary(sums: dict[str, float], steps: int) -> dict:
  """What a run's results say of its `run_sums` over `steps` steps: the share of the gated
  steps with an angle to judge whose term the gate let through, and the zero-gradient steps."""
  if not steps or "gate/gate" not in sums:
    return {}
  judged = steps - sums["gate/zero_grad"]
  return {"gate_on_fraction": sums["gate/gate"] / judged if judged else None,
          "zero_grad_steps": sums["gate/zero_grad"]}


def step_keys(state: TrainState) -> tuple[jax.Array, jax.Array]:
  """The (dropout key, loss key) of the step `state` is at, the same on every device."""
  step_key = jax.random.fold_in(state.rng, state.step)
  return jax.random.fold_in(step_key, 0), jax.random.fold_in(step_key, 1)


def loss_grad(model, objective, state: TrainState, batch):
  """Inside the per-device step: the gradients the train step takes, one per call.

  Args:
    model: the Flax `Classifier`.
    objective: an `objectives.Objective`.
    state: the replicated TrainState (params, step, rng, loss state).
    batch: this device's rows, one example a row or packed.

  Returns:
    grad(pick) -> (g, (terms, metrics)): this device's gradient of `pick(terms)` (a scalar of
    the objective's `Terms`) w.r.t. the params, not yet averaged over the data axis, on the
    step's dropout and loss keys (`step_keys`). All calls differentiate one forward pass.
  """
  # Both keys are the same on every device: randomness is keyed by the batch's global
  # example ids (batch["example_id"]), never by the device, so the run does not depend on
  # the device count (dropout: models.bert.Dropout; the G-Loss split: losses.gloss).
  drop_key, loss_key = step_keys(state)
  # Mark the replicated params as device-varying before differentiating. Under shard_map's
  # varying-axes typing, jax.grad with respect to an unvarying input already sums its
  # cotangent over the axis (the transpose of the implicit pvary is a psum), which would
  # make every gradient N_devices times the global-batch gradient and the pmeans after it
  # no-ops. With varying params each device gets its local gradient, and pmean averages.
  params = lax.pcast(state.params, AXIS, to="varying")

  def grad(pick):
    def f(params):
      logits, aux = _forward(model, params, batch, drop_key, True)
      terms, metrics = objective.terms(params, logits, aux, batch, loss_key, state.step,
                                       state.loss_state)
      return pick(terms), (terms, metrics)
    return jax.grad(f, has_aux=True)(params)
  return grad


def make_train_step(model, objective, tx: optax.GradientTransformation, mesh,
                    donate: bool = True):
  """Builds `train_step(state, batch) -> (state, metrics)`, jitted, state donated.

  Args:
    model: the Flax `Classifier`.
    objective: an `objectives.Objective`: loss terms by role, their weights, the gate.
    tx: the optax transformation.
    mesh: 1-D data mesh from `make_mesh`.
    donate: donate the input state buffers.
  """
  gate = objective.gate

  def per_device(state: TrainState, batch):
    grad = loss_grad(model, objective, state, batch)
    metrics_out = {}
    if gate is None:
      grads, (terms, metrics) = grad(objective.total)
      grads = lax.pmean(grads, AXIS)
    else:
      # One gradient per role, with the same batch and dropout key; XLA shares the forward.
      g_main, (terms, metrics) = grad(lambda t: t.main)
      g_aux, _ = grad(lambda t: t.aux)
      g_out = grad(lambda t: t.outside)[0] if "outside" in objective.roles else None
      # Average first, so the gate sees global gradients and every replica branches alike.
      g_main, g_aux, g_out = lax.pmean((g_main, g_aux, g_out), AXIS)
      grads, info = angle_gate(g_main, g_aux, objective.aux_weight,
                               threshold_deg=gate.threshold_deg, mode=gate.mode,
                               params_mask=angle_mask(state.params, gate.angle_params),
                               ce_weight=objective.main_weight)
      if g_out is not None:
        grads = jax.tree.map(jnp.add, grads, g_out)
      metrics_out.update(_gate_metrics(info, objective))
    if objective.freeze is not None:
      grads = objective.freeze(grads, state.step)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    new_params = optax.apply_updates(state.params, updates)
    metrics_out.update({f"loss/{r}": getattr(terms, r) for r in objective.roles})
    metrics_out.update(metrics)
    metrics_out["loss"] = objective.total(terms)
    metrics_out = lax.pmean(metrics_out, AXIS)
    metrics_out["grad_norm"] = optax.global_norm(grads)
    loss_state = state.loss_state if terms.state is None else terms.state
    new_state = state.replace(step=state.step + 1, params=new_params, opt_state=opt_state,
                              loss_state=loss_state)
    return new_state, metrics_out

  mapped = jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=(P(), P()))
  return jax.jit(mapped, donate_argnums=(0,) if donate else ())


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
