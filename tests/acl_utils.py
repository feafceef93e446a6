"""A tiny model and step driver for ACL-Grad tests (in-process and in workers)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax

from acl_jax.models import Classifier, EncoderConfig, init_params
from acl_jax.train import setup as setup_lib, step as step_lib
from configs import common

__all__ = ["step_lib", "tiny_setup", "one_step", "step_grads", "capture_grads", "loss_cfg"]


def tiny_setup(num_batches=4, batch=8, seq=12, dropout=0.0, seed=0, exits="last"):
  cfg = EncoderConfig(vocab_size=200, hidden_size=32, num_layers=3, num_heads=4,
                      intermediate_size=64, num_labels=3, hidden_dropout=dropout,
                      attention_dropout=dropout, exits=exits)
  params = init_params(cfg, jax.random.key(seed))
  rng = np.random.default_rng(seed)
  batches = []
  for _ in range(num_batches):
    ids = rng.integers(5, 200, (batch, seq)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1::2, seq // 2:] = 0
    batches.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids),
                    "labels": rng.integers(0, 3, batch).astype(np.int32),
                    "example_mask": np.ones(batch, np.float32)})
  return Classifier(cfg), params, batches


def config(name="scl", **loss):
  """The base config with method preset `name` and `loss` fields overriding it."""
  c = common.base_config()
  c.loss.update(common.METHODS[name])
  c.loss.update(loss)
  return c


def loss_cfg(name="scl", **kw):
  return config(name, **kw).loss


_STEPS = {}


def one_step(model, params, batch, mesh, gate=False, name="scl", lr=1e-2, **kw):
  """One train step from `params`; returns (state, host metrics). Steps are cached."""
  key = (id(model), tuple(d.id for d in mesh.devices.flat), gate, name, lr,
         tuple(sorted(kw.items())))
  if key not in _STEPS:
    c = config(name, gate=gate, **kw)
    c.optim.update(lr=lr, warmup_ratio=0.0, clip_norm=0.0)
    _STEPS[key] = setup_lib.make_trainer(c, model, params, mesh, num_labels=3, total_steps=10,
                                         donate=False)
  tr = _STEPS[key]
  state = step_lib.replicate(tr.state.replace(params=params), mesh)
  state, m = tr.train_step(state, step_lib.shard_batch(batch, mesh))
  return state, {k: float(v) for k, v in jax.device_get(m).items()}


def capture_grads() -> optax.GradientTransformation:
  """An optimizer that leaves the params alone and keeps, as its state, the gradient it got.

  A train step run with it yields the step's gradient (after the gate, the cross-device mean
  and freezing) with no optimizer arithmetic on top. Equivalence tests compare that gradient:
  after AdamW they would compare lr * g / (sqrt(v) + eps), which turns the round-off of a
  gradient element near eps into an update change of order lr.
  """
  return optax.GradientTransformation(
      init=lambda params: jax.tree.map(jnp.zeros_like, params),
      update=lambda grads, state, params=None: (jax.tree.map(jnp.zeros_like, grads), grads))


_GRAD_STEPS = {}


def step_grads(model, params, batch, mesh, gate=False, name="scl", **kw):
  """The gradient one train step from `params` hands to its optimizer, and the host metrics.

  Steps are cached.
  """
  key = (id(model), tuple(d.id for d in mesh.devices.flat), gate, name, tuple(sorted(kw.items())))
  if key not in _GRAD_STEPS:
    _GRAD_STEPS[key] = setup_lib.make_trainer(config(name, gate=gate, **kw), model, params,
                                              mesh, num_labels=3, total_steps=10,
                                              tx=capture_grads(), donate=False)
  tr = _GRAD_STEPS[key]
  state = step_lib.replicate(tr.state.replace(params=params), mesh)
  state, m = tr.train_step(state, step_lib.shard_batch(batch, mesh))
  return jax.device_get(state.opt_state), {k: float(v) for k, v in jax.device_get(m).items()}
