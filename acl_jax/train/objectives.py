"""Training objectives built from the config.

Single exit: CE plus at most one auxiliary loss on the final exit's feature (SPEC §2).
Multi-exit (SPEC §3): the strategies JT, 2ST, ALT, KD and ACL-CL weight the exits' losses.

Every objective returns named terms, "ce" (the CE the ACL-Grad gate measures against) and,
when there is one, "aux" (the gated auxiliary loss), plus logging metrics. Gated ACL-CL also
returns "rest", the lower exits' losses, which stay outside the gate (SPEC §2.5).
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from acl_jax import losses
from acl_jax.losses.graph import DEFAULT_W_FLOOR
from acl_jax.models import label_embeddings
from acl_jax.train.step import AXIS, GateSpec, Objective, example_ids

# loss.lam's "unset" value: the loss's SPEC default (SCL 0.9, ACL-Embed 0.5, G-Loss 0.8).
LAM_DEFAULT = -1.0
# What the ACL-Grad angle is measured over: every parameter, the encoder without heads,
# LayerNorm and biases (RomeBERT), or the top layer and heads only (fast mode).
ANGLE_PARAMS = ("all", "encoder", "top")
STRATEGIES = ("", "jt", "2st", "alt", "kd", "acl_cl")
EXIT_WEIGHTS = ("uniform", "linear")
KD_FORMS = ("add", "convex")
# Gated ACL-CL: the CE the angle is measured against. "last" is SPEC §2.5 (the final exit's
# CE; the lower exits' losses are added ungated, a third backward pass); "all" measures against
# the gradient of every exit's loss (two backward passes; what ran before the field existed).
GATE_CE = ("last", "all")
# Fields added to the config after runs were made with it, and the value those runs used: a
# workdir's config.json without the field reads as this (and resuming it with another value
# is refused, see loop.check_same_run); a hand-built config block without the
# field gets it too.
LEGACY_DEFAULTS = {"multi_exit.kd_form": "convex", "multi_exit.gate_ce": "all",
                   "loss.combine": "", "loss.contrastive_global": False}
# Losses computed on pairs of batch examples (loss.contrastive_global gathers their batch).
PAIRWISE_LOSSES = ("scl", "acl_embed", "triplet", "cosine")


def _legacy_get(cfg, block: str, field: str):
  return cfg.get(field, LEGACY_DEFAULTS[f"{block}.{field}"])


def legacy_fields_in_use(flat_cfg: dict) -> list[str]:
  """The LEGACY_DEFAULTS fields that change what a (flattened) config trains."""
  strategy, name = flat_cfg.get("multi_exit.strategy", ""), flat_cfg.get("loss.name", "ce")
  used = {"multi_exit.kd_form": strategy == "kd",
          "multi_exit.gate_ce": strategy == "acl_cl",
          "loss.combine": name != "ce",
          "loss.contrastive_global": name in PAIRWISE_LOSSES or strategy == "acl_cl"}
  return [k for k in LEGACY_DEFAULTS if used[k]]


# A G-Loss run warns when more than this share of its batch graph's edges sit at the weight
# floor on the pretrained features (`gloss_floor_share`).
FLOOR_SHARE_WARN = 0.9


def gloss_floor_share(feats: np.ndarray, sigma: float, graph_size: int,
                      w_floor: float = DEFAULT_W_FLOOR) -> float:
  """The share of G-Loss graph edges whose kernel weight is below the weight floor.

  `losses.transition_matrix` divides the weights by the strongest edge's and adds `w_floor`;
  an edge below the floor carries (almost) no gradient. The strongest edge (both directions)
  is never there, so the share counts the other edges: at 1, G-Loss is a constant with exactly
  zero gradient, whatever the graph size.

  Args:
    feats: [n, hidden] features, e.g. the pretrained model's on a sample of train examples.
    sigma: the kernel width.
    graph_size: nodes per graph (the batch each device builds one on); `feats` is cut into
      consecutive graphs of this size (fewer rows make one graph of them all).
    w_floor: the floor, relative to the strongest edge.

  Returns:
    The mean share over the graphs, in [0, 1].
  """
  x = np.asarray(feats, np.float64)
  x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
  g = min(graph_size, len(x))
  if g < 2:
    return 0.0
  off = ~np.eye(g, dtype=bool)
  shares = []
  for i in range(0, len(x) - g + 1, g):
    b = x[i:i + g]
    log_w = -np.maximum(2.0 - 2.0 * (b @ b.T), 0.0)[off] / (2.0 * sigma * sigma)
    # In log space: the relative weights themselves underflow at small sigma.
    below = np.sum(log_w - log_w.max() < np.log(w_floor))
    shares.append(below / max(log_w.size - 2, 1))
  return float(np.mean(shares))


@dataclasses.dataclass(frozen=True)
class MultiExit:
  """Static description of a multi-exit strategy (from the config's `multi_exit` block)."""
  strategy: str
  weights: np.ndarray  # [num_exits], sums to 1
  stage1_steps: int = 0  # 2ST: steps of stage 1
  kd_temperature: float = 2.0
  kd_alpha: float = 0.5
  lambda_cl: float = 0.5
  teacher_grad: bool = False
  kd_form: str = "add"  # "add": CE_m + alpha T^2 KL (SPEC §3, JT plus KL); "convex": Hinton
  gate_ce: str = "last"  # see GATE_CE


def exit_weights(kind: str, num_exits: int) -> np.ndarray:
  """`uniform` (1/M each) or `linear` (PABEE: m / sum(m)); both sum to 1."""
  if kind not in EXIT_WEIGHTS:
    raise ValueError(f"multi_exit.weights must be one of {EXIT_WEIGHTS}, got {kind!r}.")
  w = np.ones(num_exits) if kind == "uniform" else np.arange(1, num_exits + 1, dtype=float)
  return (w / w.sum()).astype(np.float32)


def multi_exit_from_config(me_cfg, num_exits: int, total_steps: int) -> MultiExit | None:
  """Validates the config's `multi_exit` block; None for single-exit training."""
  s = me_cfg.strategy.lower()
  if s not in STRATEGIES:
    raise ValueError(f"Unknown multi_exit.strategy {me_cfg.strategy!r}; known: "
                     f"{[x for x in STRATEGIES if x]} (or '' for single-exit training).")
  if not s:
    return None
  if num_exits < 2:
    raise ValueError(f"multi_exit.strategy={s!r} needs an exit on every layer: set "
                     "model.exits='all'.")
  if not 0 < me_cfg.stage1_fraction < 1:
    raise ValueError(f"multi_exit.stage1_fraction must be in (0, 1), got {me_cfg.stage1_fraction}.")
  if me_cfg.kd_temperature <= 0 or not 0 <= me_cfg.kd_alpha <= 1:
    raise ValueError("multi_exit.kd_temperature must be > 0 and kd_alpha in [0, 1].")
  kd_form = _legacy_get(me_cfg, "multi_exit", "kd_form")
  if kd_form not in KD_FORMS:
    raise ValueError(f"multi_exit.kd_form must be one of {KD_FORMS}, got {kd_form!r}.")
  if me_cfg.lambda_cl < 0:
    raise ValueError(f"multi_exit.lambda_cl must be >= 0, got {me_cfg.lambda_cl}.")
  gate_ce = _legacy_get(me_cfg, "multi_exit", "gate_ce")
  if gate_ce not in GATE_CE:
    raise ValueError(f"multi_exit.gate_ce must be one of {GATE_CE}, got {gate_ce!r}.")
  return MultiExit(s, exit_weights(me_cfg.weights, num_exits),
                   stage1_length(me_cfg.stage1_fraction, total_steps), float(me_cfg.kd_temperature),
                   float(me_cfg.kd_alpha), float(me_cfg.lambda_cl), bool(me_cfg.teacher_grad),
                   kd_form, gate_ce)


def stage1_length(fraction: float, total_steps: int) -> int:
  """2ST's stage-1 steps: round(fraction * total), kept in [1, total - 1] so both stages run."""
  return max(1, min(int(round(fraction * total_steps)), total_steps - 1))


def two_stage_freeze(stage1_steps: int):
  """2ST's gradient mask: (grads, step) -> grads with the frozen groups' gradients zeroed.

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
    return jax.tree.map(mask, grads, param_groups(grads))
  return freeze


def _weights(entry: losses.LossEntry, lam: float) -> dict[str, float]:
  if entry.combine == "none":
    return {"ce": 1.0}
  if entry.combine == "convex":
    return {"ce": 1.0 - lam, "aux": lam}
  return {"ce": 1.0, "aux": lam}


def gather_global(*xs):
  """Each array (None passes through) gathered over the data axis into the global batch.

  A loss computed on the gathered batch is the same on every device; its gradient is still
  exact after the step's pmean: all_gather's transpose sums every device's cotangent of a
  device's rows back onto that device (N times its share), and the pmean divides by N.
  """
  return tuple(None if x is None else jax.lax.all_gather(x, AXIS, tiled=True) for x in xs)


def _pairwise(loss_cfg, fn):
  """`fn(p, f, y, k, m, ids)` over the global batch when loss.contrastive_global is set."""
  if not _legacy_get(loss_cfg, "loss", "contrastive_global"):
    return fn

  def gathered(p, f, y, k, m, ids):
    f, y, m, ids = gather_global(f, y, m, ids)
    return fn(p, f, y, k, m, ids)
  return gathered


def _aux_fn(loss_cfg, num_labels, last_exit, class_weights, sigma):
  """The auxiliary loss of the final exit: (params, feats, labels, key, mask, example ids)
  -> loss."""
  name = loss_cfg.name
  if name in ("scl", "acl_embed"):
    losses.check_tau(loss_cfg.tau)
  if name == "scl":
    return _pairwise(loss_cfg, lambda p, f, y, k, m, ids: losses.scl_loss(f, y, loss_cfg.tau,
                                                                     example_mask=m))
  if name == "acl_embed":
    losses.check_anchors(loss_cfg.anchors)
    return _pairwise(loss_cfg, lambda p, f, y, k, m, ids: losses.acl_embed_loss(
        f, y, label_embeddings(p, last_exit), loss_cfg.tau, anchors=loss_cfg.anchors,
        example_mask=m))
  if name == "gloss":
    sigma = float(loss_cfg.sigma if sigma is None else sigma)
    losses.check_sigma(sigma)
    keep, hide = loss_cfg.gamma_keep, loss_cfg.gamma_hide
    gamma_keep = 0.7 if keep < 0 and hide < 0 else losses.resolve_gamma(
        keep if keep >= 0 else None, hide if hide >= 0 else None)
    def gloss_fn(p, f, y, k, m, ids):
      # The split orders examples by a hash of (key, example id): with gloss_global every
      # device builds the same graph over the gathered batch; without it each device's graph
      # orders its own examples the same way the global one would.
      if loss_cfg.gloss_global:
        f, y, m, ids = gather_global(f, y, m, ids)
      return losses.gloss(f, y, k, num_labels, sigma=sigma, gamma_keep=gamma_keep,
                          form=loss_cfg.gloss_form, class_weights=class_weights,
                          example_mask=m, example_ids=ids)
    return gloss_fn
  if name == "triplet":
    return _pairwise(loss_cfg, lambda p, f, y, k, m, ids: losses.triplet_loss(
        f, y, margin=loss_cfg.margin, example_mask=m))
  if name == "cosine":
    return _pairwise(loss_cfg, lambda p, f, y, k, m, ids: losses.cosine_loss(f, y, example_mask=m))
  return None


def _kd(student_logits, teacher_logits, temperature, mask):
  """T^2 * KL(softmax(teacher/T) || softmax(student/T)), mean over the unmasked global batch
  (normalised as `losses.cross_entropy` is)."""
  t = jax.nn.log_softmax(jax.lax.stop_gradient(teacher_logits) / temperature, -1)
  s = jax.nn.log_softmax(student_logits / temperature, -1)
  kl = jnp.sum(jnp.exp(t) * (t - s), -1)
  return temperature ** 2 * losses.weighted_mean(kl, mask, AXIS)


def _multi_exit_ce(me: MultiExit, params, logits, aux, batch, cw, step, tau, pairs_global):
  """The non-gated part of a multi-exit objective, SPEC §2.5 and §3: ([M] per-exit weighted
  losses, whose sum is the loss, and metrics)."""
  labels, mask = batch["labels"], batch.get("example_mask")
  ce = jnp.stack([losses.cross_entropy(lg, labels, cw, mask, axis_name=AXIS) for lg in logits])
  w = jnp.asarray(me.weights)
  metrics = {f"ce/exit_{i + 1}": ce[i] for i in range(len(ce))}
  last_only = jnp.zeros_like(w).at[-1].set(1.0)
  if me.strategy == "jt":
    return w * ce, metrics
  if me.strategy == "alt":
    # Even steps: the final exit alone; odd steps: every exit (the optimizer also leaves the
    # lower heads untouched on even steps, see optim.make_optimizer).
    return jnp.where(step % 2 == 0, last_only, w) * ce, metrics
  if me.strategy == "2st":
    lower_w = w.at[-1].set(0.0) / jnp.sum(w[:-1])
    return jnp.where(step < me.stage1_steps, last_only, lower_w) * ce, metrics
  if me.strategy == "kd":
    kd = jnp.stack([_kd(lg, logits[-1], me.kd_temperature, mask) for lg in logits[:-1]])
    ce_share = 1.0 - me.kd_alpha if me.kd_form == "convex" else 1.0
    per_exit = jnp.concatenate([ce_share * ce[:-1] + me.kd_alpha * kd, ce[-1:]])
    metrics.update({f"kd/exit_{i + 1}": kd[i] for i in range(len(kd))})
    return w * per_exit, metrics
  # ACL-CL: each lower exit's CE + lambda_cl * cross-layer contrastive loss against the top.
  layers = sorted(int(k.split("_")[1]) for k in params if k.startswith("exit_"))
  feats = aux["feats"]
  if pairs_global:  # loss.contrastive_global: positives and negatives from every device
    feats, (labels, mask) = gather_global(*feats), gather_global(labels, mask)
  t_feat, t_emb = feats[-1], label_embeddings(params, layers[-1])
  cl = jnp.stack([losses.acl_cl_loss(feats[i], label_embeddings(params, m), t_feat, t_emb,
                                     labels, tau, teacher_grad=me.teacher_grad, example_mask=mask)
                  for i, m in enumerate(layers[:-1])])
  per_exit = jnp.concatenate([ce[:-1] + me.lambda_cl * cl, ce[-1:]])
  metrics.update({f"acl_cl/exit_{i + 1}": cl[i] for i in range(len(cl))})
  return w * per_exit, metrics


def build_objective(loss_cfg, *, num_labels: int, last_exit: int, class_weights=None,
                    sigma: float | None = None, multi_exit: MultiExit | None = None) -> Objective:
  """Builds the objective named by `loss_cfg.name` (a key of `acl_jax.losses.LOSSES`).

  Args:
    loss_cfg: the config's `loss` block.
    num_labels: K.
    last_exit: 1-based layer of the final exit (its kernel gives the label embeddings).
    class_weights: optional [K] CE class weights.
    sigma: G-Loss kernel width overriding loss_cfg.sigma (the `sqrt` heuristic's value).
    multi_exit: a multi-exit strategy (`multi_exit_from_config`), or None for one exit.
  """
  entry = losses.get_loss(loss_cfg.name)
  combine = _legacy_get(loss_cfg, "loss", "combine")  # "": the loss's own
  if combine:
    if combine not in ("convex", "additive"):
      raise ValueError(f"loss.combine must be '', 'convex' or 'additive', got {combine!r}.")
    if entry.combine == "none":
      raise ValueError(f"loss.combine={combine!r} with loss.name={loss_cfg.name!r}: plain CE "
                       "has no auxiliary term to combine; leave loss.combine=''.")
    entry = dataclasses.replace(entry, combine=combine)
  lam = float(loss_cfg.lam)
  if lam == LAM_DEFAULT and entry.combine != "none":
    if "lam" not in entry.defaults:
      raise ValueError(f"loss {loss_cfg.name!r} has no default lambda (SPEC fixes none): set "
                       f"one, e.g. --config.loss.lam=0.5, or use its method preset.")
    lam = float(entry.defaults["lam"])
  if entry.combine != "none" and lam < 0:
    raise ValueError(f"loss.lam must be >= 0, got {lam}.")
  if entry.combine == "convex" and lam > 1:
    raise ValueError(f"loss.lam must be in [0, 1] for {loss_cfg.name} ((1-lam) CE + lam L), "
                     f"got {lam}.")
  name = loss_cfg.name
  cw = None if class_weights is None else jnp.asarray(class_weights, jnp.float32)
  aux_fn = _aux_fn(loss_cfg, num_labels, last_exit, cw, sigma)
  weights = _weights(entry, lam)
  if multi_exit is not None and combine:
    raise ValueError(f"loss.combine={combine!r} with multi_exit.strategy="
                     f"{multi_exit.strategy!r}: multi-exit training adds the final exit's "
                     "auxiliary loss to the exits' CE (SPEC §2.5); leave loss.combine=''.")
  if multi_exit is not None:
    if multi_exit.strategy == "acl_cl":
      losses.check_tau(loss_cfg.tau)
    if aux_fn is not None and multi_exit.strategy != "acl_cl":
      raise ValueError(f"loss.name={name!r} with multi_exit.strategy={multi_exit.strategy!r}: "
                       "only ACL-CL adds a contrastive loss to multi-exit training; use "
                       "loss.name='ce' (or 'acl_embed' with acl_cl).")
    # Multi-exit weights are already inside the terms; the final exit's aux loss is additive
    # (SPEC §2.5: the last exit trains with CE + lambda * L_ACL, gated by ACL-Grad). Gated
    # with gate_ce="last", "ce" is the final exit's w_M CE_M and "rest" the lower exits'
    # losses, added outside the gate; with "all", "ce" holds both.
    weights = {"ce": 1.0, "aux": lam} if aux_fn is not None else {"ce": 1.0}
    if aux_fn is not None and loss_cfg.gate and multi_exit.gate_ce == "last":
      weights = {"rest": 1.0, **weights}

  def terms(params, logits, aux, batch, key, step):
    labels = batch["labels"]
    mask = batch.get("example_mask")
    hit = (jnp.argmax(logits[-1], -1) == labels).astype(jnp.float32)
    metrics = {"train_acc": losses.weighted_mean(hit, mask, AXIS)}
    if multi_exit is None:
      out = {"ce": losses.cross_entropy(logits[-1], labels, cw, mask, axis_name=AXIS)}
    else:
      per_exit, extra = _multi_exit_ce(multi_exit, params, logits, aux, batch, cw, step,
                                       loss_cfg.tau,
                                       _legacy_get(loss_cfg, "loss", "contrastive_global"))
      out = ({"rest": jnp.sum(per_exit[:-1]), "ce": per_exit[-1]} if "rest" in weights
             else {"ce": jnp.sum(per_exit)})
      metrics.update(extra)
    if aux_fn is not None:
      val = aux_fn(params, aux["feats"][-1], labels, key, mask, example_ids(batch))
      if isinstance(val, tuple):
        val, extra = val
        metrics.update(extra)
      if multi_exit is not None:
        val = multi_exit.weights[-1] * val  # the final exit's share of sum_m w_m L_m
      out["aux"] = val
    return out, metrics

  gate = None
  if loss_cfg.gate:
    if aux_fn is None:
      raise ValueError("loss.gate=True needs an auxiliary loss (scl, acl_embed, ...), not "
                       f"{name!r}.")
    losses.check_gate_args(lam, loss_cfg.gate_threshold, loss_cfg.gate_mode)
    if loss_cfg.angle_params not in ANGLE_PARAMS:
      raise ValueError(f"loss.angle_params must be one of {ANGLE_PARAMS}, got "
                       f"{loss_cfg.angle_params!r}.")
    gate = GateSpec(float(loss_cfg.gate_threshold), loss_cfg.gate_mode, loss_cfg.angle_params)
  label = (multi_exit.strategy + ":" if multi_exit else "") + name + ("+grad" if gate else "")
  freeze = (two_stage_freeze(multi_exit.stage1_steps)
            if multi_exit is not None and multi_exit.strategy == "2st" else None)
  scales = {}
  if multi_exit is not None and aux_fn is not None:  # "aux" is w_M L_ACL; so is "ce" w_M CE_M
    w_last = float(multi_exit.weights[-1])
    scales = {"aux": w_last, **({"ce": w_last} if "rest" in weights else {})}
  return Objective(label, terms, weights, gate, freeze, scales)
