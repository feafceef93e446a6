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


def _adamw(lr_fn, clip_norm, b1, b2, eps, weight_decay):
  parts = [optax.clip_by_global_norm(clip_norm)] if clip_norm > 0 else []
  parts.append(optax.adamw(lr_fn, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay,
                           mask=decay_mask))
  return optax.chain(*parts)


def lower_head_labels(params):
  """'lower_heads' for the exit heads below the top layer, 'main' for everything else."""
  exits = sorted(int(k.split("_")[1]) for k in params if k.startswith("exit_"))
  lower = {f"exit_{m}" for m in exits[:-1]}
  return {k: jax.tree.map(lambda _, k=k: "lower_heads" if k in lower else "main", v)
          for k, v in params.items()}


def make_optimizer(*, lr: float, total_steps: int, warmup_ratio: float = 0.1,
                   weight_decay: float = 0.01, clip_norm: float = 1.0, b1: float = 0.9,
                   b2: float = 0.999, eps: float = 1e-6, strategy: str = "",
                   stage1_steps: int = 0) -> optax.GradientTransformation:
  """AdamW as in BERT fine-tuning recipes, with multi-exit parameter groups.

  Args:
    lr: peak learning rate.
    total_steps: number of optimizer steps, for the decay.
    warmup_ratio: fraction of the (stage's) steps spent warming up.
    weight_decay: decoupled decay, applied to kernels and embeddings only.
    clip_norm: global-norm gradient clipping (<= 0 disables it); per group when grouped.
    strategy: multi-exit strategy. Freezing is done here, in the optimizer, never by zeroing
      gradients by hand: the groups "main" (encoder + final exit) and "lower_heads" get a
      0/1 step-dependent scale (`optax.scale_by_schedule`, whose count is the global step
      and is checkpointed, so a stage survives a resume):
        2st: "main" trains for steps < stage1_steps, "lower_heads" after, each with its own
             warmup + linear decay over its stage (DeeBERT's two stages);
        alt: "lower_heads" update on odd steps only (BERxiT's alternation).
    stage1_steps: 2ST's stage-1 length.
  """
  if lr <= 0:
    raise ValueError(f"optim.lr must be > 0, got {lr}.")
  if total_steps < 1:
    raise ValueError(f"total_steps must be >= 1, got {total_steps}; check num_epochs/num_steps.")
  adam = dict(clip_norm=clip_norm, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)
  if strategy == "2st":
    s1 = max(1, min(stage1_steps, total_steps - 1))
    stage1 = lr_schedule(lr, s1, int(round(warmup_ratio * s1)))
    stage2 = optax.join_schedules(
        [optax.constant_schedule(0.0),
         lr_schedule(lr, total_steps - s1, int(round(warmup_ratio * (total_steps - s1))))], [s1])
    return optax.multi_transform({
        "main": optax.chain(_adamw(stage1, **adam),
                            optax.scale_by_schedule(lambda c: (c < s1).astype(float))),
        "lower_heads": optax.chain(_adamw(stage2, **adam),
                                   optax.scale_by_schedule(lambda c: (c >= s1).astype(float)))},
        lower_head_labels)
  sched = lr_schedule(lr, total_steps, int(round(warmup_ratio * total_steps)))
  if strategy == "alt":
    return optax.multi_transform({
        "main": _adamw(sched, **adam),
        "lower_heads": optax.chain(_adamw(sched, **adam),
                                   optax.scale_by_schedule(lambda c: (c % 2).astype(float)))},
        lower_head_labels)
  return _adamw(sched, **adam)
