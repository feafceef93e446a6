"""The checkpointed training state."""
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax


@flax.struct.dataclass
class TrainState:
  """Everything a step reads and writes; saving it (plus the data position) is an exact resume.

  Attributes:
    step: int32 scalar, optimizer steps taken.
    params: model params.
    opt_state: optax state.
    rng: uint32[2] raw PRNG key; a step's randomness is fold_in(rng, step), so it is stored.
    loss_state: the loss family's state between steps (`objectives.LossFamily.init_state`),
      replicated; {} for the families that keep none.
  """
  step: jax.Array
  params: Any
  opt_state: Any
  rng: jax.Array
  loss_state: Any = flax.struct.field(default_factory=dict)

  @classmethod
  def create(cls, params, tx: optax.GradientTransformation, seed: int,
             loss_state: Any = None) -> "TrainState":
    return cls(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
               rng=jax.random.PRNGKey(seed), loss_state={} if loss_state is None else loss_state)
