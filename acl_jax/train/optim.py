"""Optax AdamW with warmup + linear decay, clipping, and no decay on biases and LayerNorm."""
import jax
import optax


def decay_mask(params):
  """True where weight decay applies: kernels and embeddings, not biases or LayerNorm."""
  def keep(path, x):
    names = [getattr(k, "key", str(k)) for k in path]
    return not (names[-1] in ("bias", "scale") or any("LayerNorm" in n for n in names))
  return jax.tree_util.tree_map_with_path(keep, params)


def lr_schedule(lr: float, total_steps: int, warmup_steps: int) -> optax.Schedule:
  """Linear warmup from 0 to `lr`, then linear decay to 0 at `total_steps`."""
  warmup_steps = max(0, min(warmup_steps, total_steps))
  return optax.join_schedules(
      [optax.linear_schedule(0.0, lr, max(warmup_steps, 1)),
       optax.linear_schedule(lr, 0.0, max(total_steps - warmup_steps, 1))],
      boundaries=[warmup_steps])


def make_optimizer(*, lr: float, total_steps: int, warmup_ratio: float = 0.1,
                   weight_decay: float = 0.01, clip_norm: float = 1.0, b1: float = 0.9,
                   b2: float = 0.999, eps: float = 1e-6) -> optax.GradientTransformation:
  """AdamW as in BERT fine-tuning recipes.

  Args:
    lr: peak learning rate.
    total_steps: number of optimizer steps, for the decay.
    warmup_ratio: fraction of total_steps spent warming up.
    weight_decay: decoupled decay, applied to kernels and embeddings only.
    clip_norm: global-norm gradient clipping (<= 0 disables it).
  """
  if lr <= 0:
    raise ValueError(f"optim.lr must be > 0, got {lr}.")
  if total_steps < 1:
    raise ValueError(f"total_steps must be >= 1, got {total_steps}; check num_epochs/num_steps.")
  sched = lr_schedule(lr, total_steps, int(round(warmup_ratio * total_steps)))
  parts = [optax.clip_by_global_norm(clip_norm)] if clip_norm > 0 else []
  parts.append(optax.adamw(sched, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay,
                           mask=decay_mask))
  return optax.chain(*parts)
