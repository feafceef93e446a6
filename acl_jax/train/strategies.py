"""Multi-exit strategies (SPEC §3): how the exits' CE losses are weighted, one registry.

`STRATEGIES` holds one `Strategy` per `multi_exit.strategy`. Each validates its own fields of
the `multi_exit` block and weights the exits' CE (and adds its own terms: KD, ACL-CL) inside
the per-device step; `objectives.build_objective` puts the result in the objective's roles.
"""
import dataclasses
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from acl_jax import losses
from acl_jax.errors import UserError
from acl_jax.models import label_embeddings
from acl_jax.names import check_known
from acl_jax.train.step import AXIS, gather_global

EXIT_WEIGHTS = ("uniform", "linear")
KD_FORMS = ("add", "convex")
# Gated ACL-CL: the CE the angle is measured against. "last" is SPEC §2.5 (the final exit's
# CE; the lower exits' losses are added outside the gate, a third backward pass); "all"
# measures against the gradient of every exit's loss (two backward passes).
GATE_CE = ("last", "all")


@dataclasses.dataclass(frozen=True)
class MultiExit:
  """A validated `multi_exit` block (`multi_exit_from_config`)."""
  strategy: str
  exit_layers: tuple[int, ...]  # the model's (`EncoderConfig.exit_layers`), the last one final
  weights: np.ndarray  # [num_exits], sums to 1
  stage1_steps: int  # 2ST: steps of stage 1
  kd_temperature: float
  kd_alpha: float
  lambda_cl: float
  teacher_grad: bool
  kd_form: str  # "add": CE_m + alpha T^2 KL (SPEC §3, JT plus KL); "convex": Hinton's mix
  gate_ce: str  # see GATE_CE


@dataclasses.dataclass(frozen=True)
class ExitInputs:
  """What a strategy reads, inside the per-device step.

  Attributes:
    params: the model params.
    logits: [num_exits, batch, K].
    feats: [num_exits, batch, d] every exit's features.
    labels: [batch]; mask: [batch] or None.
    ce: [num_exits] each exit's CE over the global batch.
    step: the global step (traced).
    tau: the contrastive temperature (ACL-CL).
    pairs_global: loss.contrastive_global (ACL-CL pairs over the gathered batch).
  """
  params: Any
  logits: jax.Array
  feats: jax.Array
  labels: jax.Array
  mask: Optional[jax.Array]
  ce: jax.Array
  step: jax.Array
  tau: float
  pairs_global: bool


@dataclasses.dataclass(frozen=True)
class Strategy:
  """One `multi_exit.strategy`.

  Attributes:
    description: one line for logs and docs.
    exit_losses: (MultiExit, ExitInputs) -> ([num_exits] weighted per-exit losses, whose
      sum is the strategy's loss, and metrics).
    check: validates the strategy's own fields of the `multi_exit` block.
    takes_aux: a final-exit auxiliary loss (loss.name) may join it (ACL-CL: SPEC §2.5).
  """
  description: str
  exit_losses: Callable[[MultiExit, ExitInputs], tuple[jax.Array, dict]]
  check: Callable[[Any], None] = lambda me_cfg: None
  takes_aux: bool = False


def _last_only(w):
  return jnp.zeros_like(w).at[-1].set(1.0)


def _jt(me, x):
  return jnp.asarray(me.weights) * x.ce, {}


def _alt(me, x):
  # Even steps: the final exit alone; odd steps: every exit (the optimizer also leaves the
  # lower heads untouched on even steps, see optim.make_optimizer).
  w = jnp.asarray(me.weights)
  return jnp.where(x.step % 2 == 0, _last_only(w), w) * x.ce, {}


def _2st(me, x):
  w = jnp.asarray(me.weights)
  lower_w = w.at[-1].set(0.0) / jnp.sum(w[:-1])
  return jnp.where(x.step < me.stage1_steps, _last_only(w), lower_w) * x.ce, {}


def _check_2st(me_cfg):
  if not 0 < me_cfg.stage1_fraction < 1:
    raise UserError(f"multi_exit.stage1_fraction must be in (0, 1), got "
                    f"{me_cfg.stage1_fraction}.")


def _kd_term(student_logits, teacher_logits, temperature, mask):
  """T^2 * KL(softmax(teacher/T) || softmax(student/T)), mean over the unmasked global batch
  (normalised as `losses.cross_entropy` is)."""
  t = jax.nn.log_softmax(jax.lax.stop_gradient(teacher_logits) / temperature, -1)
  s = jax.nn.log_softmax(student_logits / temperature, -1)
  kl = jnp.sum(jnp.exp(t) * (t - s), -1)
  return temperature ** 2 * losses.weighted_mean(kl, mask, AXIS)


def _kd(me, x):
  kd = jnp.stack([_kd_term(lg, x.logits[-1], me.kd_temperature, x.mask)
                  for lg in x.logits[:-1]])
  ce_share = 1.0 - me.kd_alpha if me.kd_form == "convex" else 1.0
  per_exit = jnp.concatenate([ce_share * x.ce[:-1] + me.kd_alpha * kd, x.ce[-1:]])
  return jnp.asarray(me.weights) * per_exit, {f"kd/exit_{i + 1}": kd[i] for i in range(len(kd))}


def _check_kd(me_cfg):
  if me_cfg.kd_temperature <= 0 or not 0 <= me_cfg.kd_alpha <= 1:
    raise UserError("multi_exit.kd_temperature must be > 0 and kd_alpha in [0, 1].")
  check_known(me_cfg.kd_form, KD_FORMS, "multi_exit.kd_form")


def _acl_cl(me, x):
  """Each lower exit's CE + lambda_cl * cross-layer contrastive loss against the top."""
  layers = me.exit_layers
  feats, labels, mask = x.feats, x.labels, x.mask
  if x.pairs_global:  # loss.contrastive_global: positives and negatives from every device
    feats, (labels, mask) = gather_global(*feats), gather_global(labels, mask)
  t_feat, t_emb = feats[-1], label_embeddings(x.params, layers[-1])
  cl = jnp.stack([losses.acl_cl_loss(feats[i], label_embeddings(x.params, m), t_feat, t_emb,
                                     labels, x.tau, teacher_grad=me.teacher_grad,
                                     example_mask=mask)
                  for i, m in enumerate(layers[:-1])])
  per_exit = jnp.concatenate([x.ce[:-1] + me.lambda_cl * cl, x.ce[-1:]])
  return (jnp.asarray(me.weights) * per_exit,
          {f"acl_cl/exit_{i + 1}": cl[i] for i in range(len(cl))})


def _check_acl_cl(me_cfg):
  if me_cfg.lambda_cl < 0:
    raise UserError(f"multi_exit.lambda_cl must be >= 0, got {me_cfg.lambda_cl}.")
  check_known(me_cfg.gate_ce, GATE_CE, "multi_exit.gate_ce")


STRATEGIES: dict[str, Strategy] = {
    "jt": Strategy("joint: the weighted sum of every exit's CE", _jt),
    "2st": Strategy("two-stage (DeeBERT): backbone + final exit, then the lower exits", _2st,
                    _check_2st),
    "alt": Strategy("alternating (BERxiT): the final exit on even steps, all exits on odd",
                    _alt),
    "kd": Strategy("JT plus KL from the final exit's softened logits", _kd, _check_kd),
    "acl_cl": Strategy("cross-layer contrastive distillation, SPEC §2.5", _acl_cl,
                       _check_acl_cl, takes_aux=True),
}


def exit_weights(kind: str, num_exits: int) -> np.ndarray:
  """`uniform` (1/M each) or `linear` (PABEE: m / sum(m)); both sum to 1."""
  check_known(kind, EXIT_WEIGHTS, "multi_exit.weights")
  w = np.ones(num_exits) if kind == "uniform" else np.arange(1, num_exits + 1, dtype=float)
  return (w / w.sum()).astype(np.float32)


def stage1_length(fraction: float, total_steps: int) -> int:
  """2ST's stage-1 steps: round(fraction * total), kept in [1, total - 1] so both stages run."""
  return max(1, min(int(round(fraction * total_steps)), total_steps - 1))


def multi_exit_from_config(me_cfg, exit_layers, total_steps: int) -> MultiExit | None:
  """Validates the config's `multi_exit` block for a model with exits after `exit_layers`
  (`EncoderConfig.exit_layers`); None for single-exit training."""
  s = me_cfg.strategy.lower()
  if not s:
    return None
  check_known(s, STRATEGIES, "multi_exit.strategy", " (or '' for single-exit training)")
  exit_layers = tuple(exit_layers)
  if len(exit_layers) < 2:
    raise UserError(f"multi_exit.strategy={s!r} needs an exit on every layer: set "
                    "model.exits='all'.")
  STRATEGIES[s].check(me_cfg)
  return MultiExit(s, exit_layers, exit_weights(me_cfg.weights, len(exit_layers)),
                   stage1_length(me_cfg.stage1_fraction, total_steps),
                   float(me_cfg.kd_temperature), float(me_cfg.kd_alpha),
                   float(me_cfg.lambda_cl), bool(me_cfg.teacher_grad), me_cfg.kd_form,
                   me_cfg.gate_ce)


def two_stage_freeze(stage1_steps: int, exit_layers):
  """2ST's gradient mask: (grads, step) -> grads with the frozen groups' gradients zeroed
  (the groups of `optim.param_groups` for a model with exits after `exit_layers`).

  The optimizer already leaves a frozen group's params unchanged; zeroing its gradients too
  keeps them out of the global-norm clipping, so stage 2's lower heads are clipped on their
  own gradients alone, as when the backbone is truly frozen (DeeBERT).
  """
  from acl_jax.train.optim import param_groups  # pylint: disable=import-outside-toplevel

  def freeze(grads, step):
    stage1 = jnp.asarray(step) < stage1_steps
    def mask(g, group):
      on = jnp.logical_not(stage1) if group == "lower_heads" else stage1
      return jnp.where(on, g, jnp.zeros_like(g))  # a select: a frozen inf/NaN stays out
    return jax.tree.map(mask, grads, param_groups(grads, exit_layers))
  return freeze
