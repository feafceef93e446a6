"""Optax AdamW with warmup + linear decay, clipping, and no decay on biases and LayerNorm."""
import functools
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import optax

from acl_jax.errors import UserError
from acl_jax.names import path_names


def decay_mask(params):
  """True where weight decay applies: kernels and embeddings, not biases or LayerNorm."""
  def keep(path, x):
    names = path_names(path)
    return not (names[-1] in ("bias", "scale") or any("LayerNorm" in n for n in names))
  return jax.tree_util.tree_map_with_path(keep, params)


def lr_schedule(lr: float, total_steps: int, warmup_steps: int) -> optax.Schedule:
  """Linear warmup from 0 to `lr`, then linear decay to 0 at `total_steps`."""
  warmup_steps = max(0, min(warmup_steps, total_steps))
  return optax.join_schedules(
      [optax.linear_schedule(0.0, lr, max(warmup_steps, 1)),
       optax.linear_schedule(lr, 0.0, max(total_steps - warmup_steps, 1))],
      boundaries=[warmup_steps])


def _adamw(lr_fn, b1, b2, eps, weight_decay):
  return optax.adamw(lr_fn, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=decay_mask)


def param_groups(params, exit_layers: Sequence[int]):
  """'encoder', 'head' (the final exit) or 'lower_heads' (the other exits) for every leaf of a
  model with exits after `exit_layers` (`EncoderConfig.exit_layers`)."""
  head, lower = f"exit_{exit_layers[-1]}", {f"exit_{m}" for m in exit_layers[:-1]}

  def group(k):
    if k in lower:
      return "lower_heads"
    return "head" if k == head else "encoder"
  return {k: jax.tree.map(lambda _, g=group(k): g, v) for k, v in params.items()}


class Group(NamedTuple):
  """One parameter group's learning rate.

  Attributes:
    schedule: learning rate of the group's own k-th update (optax's count of its AdamW).
    on: global step -> whether the group updates at that step; None: every step.
    own_count: global step -> the group's own update count at that step (host-side).
  """
  schedule: optax.Schedule
  on: Optional[Callable[[Any], Any]]
  own_count: Callable[[int], int]


def lr_groups(*, lr: float, total_steps: int, warmup_ratio: float = 0.1, strategy: str = "",
              stage1_steps: int = 0, head_lr_mult: float = 1.0) -> dict[str, Group]:
  """The learning rate of every parameter group, as `make_optimizer` applies it.

  One group, "encoder", without a multi-exit strategy and with head_lr_mult 1; else
  "encoder", "head" (the final exit) and "lower_heads" (see `make_optimizer`).
  """
  if lr <= 0:
    raise UserError(f"optim.lr must be > 0, got {lr}.")
  if head_lr_mult <= 0:
    raise UserError(f"optim.head_lr_mult must be > 0, got {head_lr_mult}.")
  if total_steps < 1:
    raise UserError(f"total_steps must be >= 1, got {total_steps}; check num_epochs/num_steps.")

  def sched(peak, steps=total_steps):
    return lr_schedule(peak, steps, int(round(warmup_ratio * steps)))

  every = lambda c: c
  if not strategy and head_lr_mult == 1.0:
    return {"encoder": Group(sched(lr), None, every)}
  head_lr = lr * head_lr_mult
  if strategy == "2st":
    s1 = max(1, min(stage1_steps, total_steps - 1))  # strategies.stage1_length already is
    stage1 = lambda c: c < s1
    return {"encoder": Group(sched(lr, s1), stage1, lambda c: min(c, s1)),
            "head": Group(sched(head_lr, s1), stage1, lambda c: min(c, s1)),
            "lower_heads": Group(sched(head_lr, total_steps - s1), lambda c: c >= s1,
                                 lambda c: max(c - s1, 0))}
  head = sched(head_lr)
  if strategy == "alt":
    # The lower exits' k-th own update is global step 2k + 1, on the global schedule.
    lower = Group(lambda k: head(2 * k + 1), lambda c: c % 2 == 1, lambda c: c // 2)
  else:
    lower = Group(head, None, every)
  return {"encoder": Group(sched(lr), None, every), "head": Group(head, None, every),
          "lower_heads": lower}


def learning_rates(groups: dict[str, Group], step: int) -> dict[str, float]:
  """The learning rate each group's update at global `step` (0-based) uses; 0 where the group
  skips the step. Host-side, for the train metrics: "lr" is the encoder's, "lr/{group}" the
  others'."""
  out = {}
  for name, g in groups.items():
    on = g.on is None or bool(g.on(step))
    out["lr" if name == "encoder" else f"lr/{name}"] = (
        float(g.schedule(g.own_count(step))) if on else 0.0)
  return out


def make_optimizer(*, lr: float, total_steps: int, warmup_ratio: float = 0.1,
                   weight_decay: float = 0.01, clip_norm: float = 1.0, b1: float = 0.9,
                   b2: float = 0.999, eps: float = 1e-6, strategy: str = "",
                   stage1_steps: int = 0, head_lr_mult: float = 1.0,
                   exit_layers: Sequence[int] = ()) -> optax.GradientTransformation:
  """AdamW as in BERT fine-tuning recipes, with parameter groups for exit heads.

  Args:
    lr: peak learning rate of the encoder.
    total_steps: number of optimizer steps, for the decay.
    warmup_ratio: fraction of the (stage's) steps spent warming up.
    weight_decay: decoupled decay, applied to kernels and embeddings only.
    clip_norm: global-norm gradient clipping over all gradients (<= 0 disables it).
    strategy: multi-exit strategy. Freezing is done here, in the optimizer (for 2ST the train
      step also zeroes the frozen groups' gradients before clipping, see
      `strategies.two_stage_freeze`): a frozen group's AdamW is skipped outright
      (`optax.transforms.conditionally_mask`: zero update, moments and step count left as
      they were), so its bias correction and moments count only its own updates, as a fresh
      optimizer for a stage (DeeBERT) or PyTorch's Adam skipping gradient-less parameters
      (BERxiT) would. The mask's counter is the global step and is checkpointed, so a stage
      survives a resume:
        2st: encoder + final exit train for steps < stage1_steps, the lower exits after,
             each with its own warmup + linear decay over its stage (DeeBERT's two stages);
        alt: the lower exits update on odd steps only (BERxiT's alternation), on the global
             learning-rate schedule.
    stage1_steps: 2ST's stage-1 length.
    head_lr_mult: the exit heads' peak learning rate is lr * head_lr_mult. Fresh heads on a
      pretrained encoder often need more than the encoder's 2e-5..5e-5 in short runs.
    exit_layers: the model's `EncoderConfig.exit_layers`, which name the exit heads' params;
      needed when the heads have their own group (a strategy, or head_lr_mult != 1).

  The groups' learning rates come from `lr_groups`, which the training loop also reads to log
  them (`learning_rates`).
  """
  groups = lr_groups(lr=lr, total_steps=total_steps, warmup_ratio=warmup_ratio,
                     strategy=strategy, stage1_steps=stage1_steps, head_lr_mult=head_lr_mult)
  clip = [optax.clip_by_global_norm(clip_norm)] if clip_norm > 0 else []
  adam = dict(b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)
  if len(groups) == 1:
    return optax.chain(*clip, _adamw(groups["encoder"].schedule, **adam))

  def gated(g: Group):
    """AdamW on the group's own update count, skipped on global steps where `on` is False."""
    t = _adamw(g.schedule, **adam)
    return t if g.on is None else optax.transforms.conditionally_mask(t, g.on)

  if not exit_layers:
    raise ValueError("The exit heads have their own learning rate here: make_optimizer needs "
                     "the model's exit_layers.")
  return optax.chain(*clip, optax.multi_transform(
      {k: gated(g) for k, g in groups.items()},
      functools.partial(param_groups, exit_layers=tuple(exit_layers))))
