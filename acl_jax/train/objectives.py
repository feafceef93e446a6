"""Training objectives: the loss-family registry, and the objective a config builds from it
and a multi-exit strategy (`strategies`).

An objective hands the step its loss terms by role (`Terms`), never by name:
- `main`, the gated main term: the CE that ACL-Grad measures the angle against (single exit:
  the final exit's CE; multi-exit: the strategy's weighted exit losses, or under gated ACL-CL
  the final exit's share alone);
- `aux`, the gated auxiliary term: a loss on the final exit's feature (SCL, ACL-Embed, ...);
- `outside`, terms added outside the gate (gated ACL-CL's lower exits, SPEC §2.5).
The total is `main_weight * main + aux_weight * aux + outside`; the step differentiates it
whole, or with a gate each role on its own (`train.step`).

`LOSSES` holds one `LossFamily` per `loss.name` (SPEC §2), as `strategies.STRATEGIES` holds
one `Strategy` per `multi_exit.strategy` (SPEC §3). Each entry validates its own config
fields, states its SPEC defaults once (`LossFamily.defaults`, which the config presets and
docs read), may calibrate itself on pretrained train features before training
(`LossFamily.calibrate`, `calibrate`) and builds a pure loss function, which may carry state
between steps (`LossFamily.init_state`). Adding a loss is one file in `acl_jax/losses/` and one
`LOSSES` entry (README, "Adding a loss").
"""
import dataclasses
import logging
from typing import Any, Callable, Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np

from acl_jax import losses
from acl_jax.losses import center
from acl_jax.losses.gate import ANGLE_PARAMS
from acl_jax.losses.graph import DEFAULT_W_FLOOR, FLOOR_SHARE_WARN, gloss_floor_share
from acl_jax.losses.prototype import prototype_loss
from acl_jax.errors import UserError
from acl_jax.models import label_embeddings
from acl_jax.names import check_known, lookup
from acl_jax.train.step import AXIS, example_ids, gather_global
from acl_jax.train.strategies import STRATEGIES, ExitInputs, MultiExit, two_stage_freeze

log = logging.getLogger(__name__)

# loss.lam's "unset" value: the loss family's SPEC default (`LossFamily.defaults["lam"]`).
LAM_DEFAULT = -1.0
# loss.gamma_keep / gamma_hide's "unset" value.
GAMMA_UNSET = -1.0
COMBINE_FORMS = ("convex", "additive")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Terms:
  """A step's loss terms by role, scalars; None where the objective has no such term (a
  pytree, so it passes through jax.grad's aux)."""
  main: jax.Array
  aux: Optional[jax.Array] = None
  outside: Optional[jax.Array] = None
  # Not a term: the loss family's state after this step (`TrainState.loss_state`), or None
  # where the family keeps none.
  state: Any = None


ROLES = ("main", "aux", "outside")


@dataclasses.dataclass(frozen=True)
class GateSpec:
  """ACL-Grad (SPEC §2.4): the aux term's gradient is gated against the main term's, the
  angle measured over the `angle_params` partition (`losses.angle_mask`)."""
  threshold_deg: float = 90.0
  mode: str = "drop"
  angle_params: str = "all"


@dataclasses.dataclass(frozen=True)
class Objective:
  """A training objective.

  `terms(params, logits, aux, batch, key, step, loss_state) -> (Terms, metrics)` is pure;
  `roles` names the Terms fields it fills, and `Terms.state` is the new loss state (replicated:
  the family reduces it over the data axis). `init_state(params)` is the state a run starts
  with ({} for a family without one). The total loss is `total(terms)`. With `gate`, the step takes
  one gradient per role and lets `losses.angle_gate` combine main and aux:
  main_weight * g_main + aux_weight * g_aux on agreement, g_main on conflict.
  """
  name: str
  terms: Callable[..., tuple[Terms, dict[str, jax.Array]]]
  roles: tuple[str, ...]
  main_weight: float = 1.0  # 1 - lam in the convex form, else 1
  aux_weight: float = 0.0  # lam
  gate: Optional[GateSpec] = None
  # (grads, step) -> grads: zeroes the gradients of parameters frozen at this step (2ST),
  # after the cross-device mean and before clipping.
  freeze: Optional[Callable[[Any, jax.Array], Any]] = None
  # A constant factor inside main and aux (gated multi-exit: the final exit's weight w_M),
  # divided out of the gate's logged gradient norms.
  main_scale: float = 1.0
  aux_scale: float = 1.0
  init_state: Callable[[Any], Any] = lambda params: {}

  def total(self, t: Terms) -> jax.Array:
    loss = self.main_weight * t.main
    if t.aux is not None:
      loss = loss + self.aux_weight * t.aux
    if t.outside is not None:
      loss = loss + t.outside
    return loss


# ---------------------------------------------------------------------------------------------
# Loss families (SPEC §2): an auxiliary loss on the final exit's feature, combined with CE.


@dataclasses.dataclass(frozen=True)
class AuxInputs:
  """What an auxiliary loss reads, inside the per-device step.

  Attributes:
    params: the model params (label embeddings live in the final exit's kernel).
    feats: [batch, d] the final exit's features f^(M) (SPEC notation).
    labels: [batch] int labels.
    key: the step's loss PRNG key (the same on every device).
    mask: [batch] float, 0 for padding rows, or None.
    ids: [batch] global example ids (key per-example randomness by them, not by rows).
    state: the family's loss state before this step (`LossFamily.init_state`), replicated.
  """
  params: Any
  feats: jax.Array
  labels: jax.Array
  key: jax.Array
  mask: Optional[jax.Array]
  ids: jax.Array
  state: Any = None


def gathered(x: AuxInputs) -> AuxInputs:
  """The inputs over the global batch (every device's rows, in global order)."""
  f, y, m, ids = gather_global(x.feats, x.labels, x.mask, x.ids)
  return dataclasses.replace(x, feats=f, labels=y, mask=m, ids=ids)


@dataclasses.dataclass(frozen=True)
class LossContext:
  """What a loss family is built with beyond the config: the task and its data."""
  num_labels: int
  last_exit: int  # 1-based layer of the final exit (its kernel holds the label embeddings)
  class_weights: Optional[jax.Array] = None  # [K] CE class weights
  # The family's `calibrate` result ({} before calibration, e.g. when a config is checked).
  calibration: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  axis_name: str = AXIS  # the data axis, for a family's own cross-device reductions


@dataclasses.dataclass(frozen=True)
class CalibrationInputs:
  """What a family's `calibrate` reads, once, before training starts.

  Attributes:
    features: n -> [<= n, hidden] the pretrained model's features on (up to) n train
      examples; computed on demand, and a call for fewer rows than an earlier one reuses them.
    batch_size: the global batch.
    num_devices: the devices the global batch is split over.
    labels: [N] the train split's labels, or None where the caller has none.
    num_labels: K.
    class_weights: [K] the loss's class weights, or None.
  """
  features: Callable[[int], np.ndarray]
  batch_size: int
  num_devices: int
  labels: Optional[np.ndarray] = None
  num_labels: int = 0
  class_weights: Optional[np.ndarray] = None


AuxFn = Callable[[AuxInputs], Any]  # -> loss, (loss, metrics) or (loss, metrics, new state)


@dataclasses.dataclass(frozen=True)
class LossFamily:
  """One `loss.name`.

  Attributes:
    description: one line for logs and docs.
    combine: "convex" ((1-lam) CE + lam L), "additive" (CE + lam L) or "none" (CE alone).
    defaults: the family's SPEC values of its `loss` fields, stated only here: a method
      preset writes them into its config, and `lam` is also what an unset loss.lam means (a
      family without one needs loss.lam set).
    build: (config's loss block, LossContext) -> AuxFn; validates the block's fields it reads.
    pairwise: the loss pairs batch examples, so loss.contrastive_global gathers its batch.
    calibrate: optional (config's loss block, CalibrationInputs) -> dict of JSON values, run
      once before a fresh run trains; the result reaches `build` as `LossContext.calibration`
      and is kept in the run's checkpoints, so a resume builds the same loss.
    init_state: optional (config's loss block, LossContext, params) -> the pytree the family
      carries between steps (EMA centres, a memory bank), checkpointed with the params; its
      AuxFn reads it as `AuxInputs.state` and returns the next one.
    fields: the `loss` fields `build` reads beyond its `defaults` (and beyond loss.lam and
      loss.combine, which every family that combines reads, and loss.contrastive_global,
      which every pairwise one does). With them, a method's own fields are data
      (configs/common.py `method_fields`): the only ones in which a study's comparison may
      train its two arms differently.
  """
  description: str
  combine: str
  defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  build: Optional[Callable[[Any, LossContext], AuxFn]] = None
  pairwise: bool = False
  calibrate: Optional[Callable[[Any, CalibrationInputs], dict]] = None
  init_state: Optional[Callable[[Any, LossContext, Any], Any]] = None
  fields: tuple[str, ...] = ()

  def own_fields(self) -> set[str]:
    """The `loss` fields this family reads (`fields`), without the section's name."""
    combines = {"lam", "combine"} if self.combine != "none" else set()
    return {*self.defaults, *self.fields, *combines,
            *(("contrastive_global",) if self.pairwise else ())}


# The `loss` fields of ACL-Grad's gate (`gate_spec`): a method's own where its preset gates.
GATE_FIELDS = ("gate", "gate_threshold", "gate_mode", "angle_params")


def _scl(cfg, ctx):
  losses.check_tau(cfg.tau)
  return lambda x: losses.scl_loss(x.feats, x.labels, cfg.tau, example_mask=x.mask)


def _acl_embed(cfg, ctx):
  losses.check_tau(cfg.tau)
  losses.check_anchors(cfg.anchors)
  return lambda x: losses.acl_embed_loss(
      x.feats, x.labels, label_embeddings(x.params, ctx.last_exit), cfg.tau,
      anchors=cfg.anchors, example_mask=x.mask)


GAMMA_KEEP = 0.7  # SPEC §2.6
# Above this share of unreachable hidden items (or of their weight), calibration warns.
UNREACHABLE_WARN = 0.25


def _gloss_sigma(cfg, ctx) -> float | None:
  """The kernel width: loss.sigma, or the `sqrt` heuristic's (None until calibrated)."""
  if cfg.sigma_mode == "sqrt":
    return ctx.calibration.get("sigma")
  return float(cfg.sigma)


def _gamma_keep(cfg) -> float:
  """The kept fraction the config's gamma_keep or gamma_hide gives (SPEC's 0.7 when unset)."""
  keep, hide = cfg.gamma_keep, cfg.gamma_hide
  if keep == GAMMA_UNSET and hide == GAMMA_UNSET:
    return GAMMA_KEEP
  return losses.resolve_gamma(None if keep == GAMMA_UNSET else keep,
                              None if hide == GAMMA_UNSET else hide)


def _gloss(cfg, ctx):
  check_known(cfg.sigma_mode, ("fixed", "sqrt"), "loss.sigma_mode")
  sigma = _gloss_sigma(cfg, ctx)
  if sigma is not None:
    losses.check_sigma(sigma)
  gamma_keep = _gamma_keep(cfg)
  check_known(cfg.gloss_form, losses.GLOSS_FORMS, "loss.gloss_form")

  def fn(x):
    if sigma is None:
      raise ValueError("loss.sigma_mode='sqrt' needs the run's calibration (LOSSES['gloss']."
                       "calibrate) before the loss is built.")
    # The split orders examples by a hash of (key, example id): with gloss_global every
    # device builds the same graph over the gathered batch; without it each device's graph
    # orders its own examples the same way the global one would.
    if cfg.gloss_global:
      x = gathered(x)
    return losses.gloss(x.feats, x.labels, x.key, ctx.num_labels, sigma=sigma,
                        gamma_keep=gamma_keep, form=cfg.gloss_form,
                        class_weights=ctx.class_weights, example_mask=x.mask,
                        example_ids=x.ids)
  return fn


def _gloss_calibrate(cfg, x: CalibrationInputs) -> dict:
  """G-Loss before training: with sigma_mode "sqrt" the heuristic's kernel width on
  pretrained train features (<= 2000 examples); and a probe of the batch graph on them: if
  most edges sit at the weight floor (`gloss_floor_share`), G-Loss learns next to nothing,
  and a warning says so."""
  out = {}
  if cfg.sigma_mode == "sqrt":
    out["sigma"] = float(losses.sigma_sqrt_heuristic(x.features(2000)))
    log.info("G-Loss sigma (sqrt heuristic on pretrained train features): %.4f", out["sigma"])
  sigma = _gloss_sigma(cfg, LossContext(0, 0, calibration=out))
  # One graph per device, unless loss.gloss_global gathers the global batch.
  size = x.batch_size // (1 if cfg.gloss_global else x.num_devices)
  share = gloss_floor_share(x.features(4 * size), sigma, size)
  log.info("G-Loss at sigma=%.4g: %.1f%% of batch-graph edges at the weight floor on "
           "pretrained train features.", sigma, 100 * share)
  if share > FLOOR_SHARE_WARN:
    log.warning(
        "G-Loss at sigma=%.4g learns next to nothing: on pretrained train features, %.1f%% "
        "of the edges of a %d-node batch graph (all but the strongest) have a kernel weight "
        "below the weight floor (%g of the strongest edge's), where they carry no gradient; "
        "at 100%% G-Loss is a constant with zero gradient. Raise loss.sigma (SPEC: %g) "
        "or use loss.sigma_mode=sqrt.", sigma, 100 * share, size, DEFAULT_W_FLOOR,
        LOSSES["gloss"].defaults["sigma"])
  if x.labels is not None and x.num_labels:
    _gloss_reach(x, size, _gamma_keep(cfg))
  return out


def _gloss_reach(x: CalibrationInputs, size: int, gamma_keep: float) -> None:
  """Logs how much of G-Loss's hidden items, and of a step's class-weighted loss, has no kept
  item of its class in a batch graph of `size` nodes (`losses.unreachable_share`), with a
  warning where either passes UNREACHABLE_WARN."""
  items, weight = losses.unreachable_share(x.labels, x.num_labels, size, gamma_keep,
                                           x.class_weights)
  weighted = "" if x.class_weights is None else f" ({100 * weight:.1f}% of the weighted loss)"
  log.info("G-Loss: in a %d-node batch graph keeping %d labels, %.1f%% of the hidden items%s "
           "have no kept item of their class (expected, from the train labels).", size,
           losses.check_gamma_keep(gamma_keep, size), 100 * items, weighted)
  if max(items, weight) > UNREACHABLE_WARN:
    log.warning(
        "G-Loss reaches little here: %.1f%% of the hidden items%s have no kept item of their "
        "class in their %d-node batch graph. Propagation gives them no mass on their class "
        "whatever the features; in the clean form (the default) their term is a constant "
        "with no gradient. A larger graph reaches more: a larger batch_size, "
        "loss.gloss_global on several devices, or a higher loss.gamma_keep.", 100 * items,
        weighted, size)


def _triplet(cfg, ctx):
  return lambda x: losses.triplet_loss(x.feats, x.labels, margin=cfg.margin,
                                       example_mask=x.mask)


def _cosine(cfg, ctx):
  return lambda x: losses.cosine_loss(x.feats, x.labels, example_mask=x.mask)


def _proto(cfg, ctx):
  losses.check_tau(cfg.tau)
  return lambda x: prototype_loss(x.feats, x.labels, ctx.num_labels, cfg.tau, x.mask)


LOSSES: dict[str, LossFamily] = {
    "ce": LossFamily("cross-entropy only", "none"),
    "scl": LossFamily("(1-lambda) CE + lambda SCL (Gunel et al. 2021), SPEC §2.2", "convex",
                      {"lam": 0.9, "tau": 0.3}, _scl, pairwise=True),
    "acl_embed": LossFamily("CE + lambda ACL-Embed (label embeddings in the contrastive set), "
                            "SPEC §2.3", "additive", {"lam": 0.5, "tau": 0.3}, _acl_embed,
                            pairwise=True, fields=("anchors",)),
    "gloss": LossFamily("(1-lambda) CE + lambda G-Loss (batch-graph label propagation), "
                        "SPEC §2.6", "convex", {"lam": 0.8, "sigma": 0.667}, _gloss,
                        calibrate=_gloss_calibrate,
                        fields=("sigma_mode", "gamma_keep", "gamma_hide", "gloss_form",
                                "gloss_global")),
    # SPEC §2.7 fixes no lambda for these two; the config must set one.
    "triplet": LossFamily("(1-lambda) CE + lambda batch-all triplet (Euclidean, margin 5), "
                          "SPEC §2.7", "convex", {"margin": 5.0}, _triplet, pairwise=True),
    "cosine": LossFamily("(1-lambda) CE + lambda MSE(cos(x_i, x_j), 1[y_i = y_j]), SPEC §2.7",
                         "convex", {}, _cosine, pairwise=True),
    # Not in the papers: the README's "Adding a loss" example. No SPEC lambda: set loss.lam.
    "proto": LossFamily("CE + lambda prototype-contrastive (batch class prototypes)",
                        "additive", {"tau": 0.3}, _proto, pairwise=True),
    # Not in the papers: the example of a loss with state between steps. Gate it with
    # loss.gate=True as ACL does.
    "center": LossFamily("CE + lambda centre loss (EMA class centres)", "additive",
                         {"lam": 0.1}, center.build, init_state=center.init_state),
}


def get_loss(name: str) -> LossFamily:
  """The loss family `name`; an unknown name raises ValueError listing the known ones."""
  return lookup(LOSSES, name, "loss.name")


def spec_default(field: str):
  """The SPEC default of loss.<field>, which every family stating one agrees on (the shared
  `loss` block has one value for it)."""
  values = {f.defaults[field] for f in LOSSES.values() if field in f.defaults}
  if len(values) != 1:
    raise ValueError(f"loss.{field}: the loss families state {sorted(values)} as its default.")
  return values.pop()


def calibrate(loss_cfg, features: Callable[[int], np.ndarray], batch_size: int,
              num_devices: int, labels: Optional[np.ndarray] = None, num_labels: int = 0,
              class_weights: Optional[np.ndarray] = None) -> dict:
  """The loss family's calibration ({} for a family without one), before a fresh run trains.

  Args:
    loss_cfg: the config's `loss` block.
    features: n -> [n, hidden] pretrained features on n train examples.
    batch_size: the global batch.
    num_devices: devices the batch is split over.
    labels, num_labels, class_weights: the train labels, K and the loss's class weights
      (`CalibrationInputs`), for what a family reads off the label counts.
  """
  family = get_loss(loss_cfg.name)
  if family.calibrate is None:
    return {}
  cache = []

  def cached(n):
    # The larger of two requests serves both (the first rows of the same sample).
    if not cache or len(cache[0]) < n:
      cache[:] = [features(n)]
    return cache[0][:n]
  return family.calibrate(loss_cfg, CalibrationInputs(
      cached, batch_size, num_devices,
      None if labels is None else np.asarray(labels), num_labels,
      None if class_weights is None else np.asarray(class_weights)))


# ---------------------------------------------------------------------------------------------
# The objective of a config.


def _lambda(loss_cfg, family: LossFamily, combine: str) -> float:
  lam = float(loss_cfg.lam)
  if combine == "none":
    return 0.0
  if lam == LAM_DEFAULT:
    if "lam" not in family.defaults:
      raise UserError(f"loss {loss_cfg.name!r} has no default lambda (SPEC fixes none): set "
                      f"one, e.g. --config.loss.lam=0.5, or use its method preset.")
    lam = family.defaults["lam"]
  if lam < 0:
    raise UserError(f"loss.lam must be >= 0, got {lam}.")
  if combine == "convex" and lam > 1:
    raise UserError(f"loss.lam must be in [0, 1] for {loss_cfg.name} ((1-lam) CE + lam L), "
                    f"got {lam}.")
  return lam


def _gate(loss_cfg, lam: float) -> GateSpec | None:
  if not loss_cfg.gate:
    return None
  losses.check_gate_args(lam, loss_cfg.gate_threshold, loss_cfg.gate_mode)
  check_known(loss_cfg.angle_params, ANGLE_PARAMS, "loss.angle_params")
  return GateSpec(float(loss_cfg.gate_threshold), loss_cfg.gate_mode, loss_cfg.angle_params)


def build_objective(loss_cfg, *, num_labels: int, last_exit: int, class_weights=None,
                    calibration: Mapping[str, Any] | None = None,
                    multi_exit: MultiExit | None = None) -> Objective:
  """The objective of the config's `loss` block (and multi-exit strategy), validated.

  Args:
    loss_cfg: the config's `loss` block; `loss.name` is a key of `LOSSES`.
    num_labels: K.
    last_exit: 1-based layer of the final exit (its kernel gives the label embeddings).
    class_weights: optional [K] CE class weights.
    calibration: the family's `calibrate` result for this run (None: not calibrated, as when
      a config is only checked).
    multi_exit: a multi-exit strategy (`multi_exit_from_config`), or None for one exit.
  """
  name = loss_cfg.name
  family = get_loss(name)
  combine = family.combine
  if loss_cfg.combine:  # "": the family's own form
    check_known(loss_cfg.combine, COMBINE_FORMS, "loss.combine", " (or '': the loss's own)")
    if combine == "none":
      raise UserError(f"loss.combine={loss_cfg.combine!r} with loss.name={name!r}: plain CE "
                      "has no auxiliary term to combine; leave loss.combine=''.")
    if multi_exit is not None:
      raise UserError(f"loss.combine={loss_cfg.combine!r} with multi_exit.strategy="
                      f"{multi_exit.strategy!r}: multi-exit training adds the final exit's "
                      "auxiliary loss to the exits' CE (SPEC §2.5); leave loss.combine=''.")
    combine = loss_cfg.combine
  check_known(loss_cfg.class_weights, ("", "balanced"), "loss.class_weights")
  lam = _lambda(loss_cfg, family, combine)
  cw = None if class_weights is None else jnp.asarray(class_weights, jnp.float32)
  aux_fn = None
  ctx = LossContext(num_labels, last_exit, cw, dict(calibration or {}))
  if family.build is not None:
    aux_fn = family.build(loss_cfg, ctx)
    if family.pairwise and loss_cfg.contrastive_global:
      aux_fn = (lambda fn: lambda x: fn(gathered(x)))(aux_fn)
  strategy = None
  if multi_exit is not None:
    strategy = STRATEGIES[multi_exit.strategy]
    if strategy.takes_aux:
      losses.check_tau(loss_cfg.tau)
    if aux_fn is not None and not strategy.takes_aux:
      raise UserError(f"loss.name={name!r} with multi_exit.strategy={multi_exit.strategy!r}: "
                      "only ACL-CL adds a contrastive loss to multi-exit training; use "
                      "loss.name='ce' (or 'acl_embed' with acl_cl).")
  gate = _gate(loss_cfg, lam)
  if gate is not None and aux_fn is None:
    raise UserError(f"loss.gate=True needs an auxiliary loss (scl, acl_embed, ...), not "
                    f"{name!r}.")
  # Multi-exit: the final exit's aux loss is additive (SPEC §2.5: the last exit trains with
  # CE + lambda * L_ACL, gated by ACL-Grad), and inside the strategy's weighted sum, so the
  # main and aux terms carry the final exit's weight w_M.
  main_weight = 1.0 - lam if combine == "convex" and multi_exit is None else 1.0
  w_last = 1.0 if multi_exit is None else float(multi_exit.weights[-1])
  # Gated ACL-CL with gate_ce="last": the angle is against the final exit's CE alone; the
  # lower exits' losses are added outside the gate.
  split_last = gate is not None and multi_exit is not None and multi_exit.gate_ce == "last"

  def terms(params, logits, aux, batch, key, step, loss_state=None):
    labels, mask = batch["labels"], batch.get("example_mask")
    hit = (jnp.argmax(logits[-1], -1) == labels).astype(jnp.float32)
    metrics = {"train_acc": losses.weighted_mean(hit, mask, AXIS)}
    outside = None
    if multi_exit is None:
      main = losses.cross_entropy(logits[-1], labels, cw, mask, axis_name=AXIS)
    else:
      ce = jnp.stack([losses.cross_entropy(lg, labels, cw, mask, axis_name=AXIS)
                      for lg in logits])
      metrics.update({f"ce/exit_{i + 1}": ce[i] for i in range(len(ce))})
      per_exit, extra = strategy.exit_losses(multi_exit, ExitInputs(
          params, logits, aux["feats"], labels, mask, ce, step, loss_cfg.tau,
          bool(loss_cfg.contrastive_global)))
      metrics.update(extra)
      if split_last:
        main, outside = per_exit[-1], jnp.sum(per_exit[:-1])
      else:
        main = jnp.sum(per_exit)
    aux_term = new_state = None
    if aux_fn is not None:
      aux_term = aux_fn(AuxInputs(params, aux["feats"][-1], labels, key, mask,
                                  example_ids(batch), loss_state))
      if isinstance(aux_term, tuple):
        aux_term, extra, *rest = aux_term
        metrics.update(extra)
        new_state = rest[0] if rest else None
      if multi_exit is not None:
        aux_term = w_last * aux_term  # the final exit's share of sum_m w_m L_m
    return Terms(main, aux_term, outside, new_state), metrics

  roles = ("main",) + (("aux",) if aux_fn is not None else ()) + (
      ("outside",) if split_last else ())
  label = (multi_exit.strategy + ":" if multi_exit else "") + name + ("+grad" if gate else "")
  freeze = (two_stage_freeze(multi_exit.stage1_steps, multi_exit.exit_layers)
            if multi_exit is not None and multi_exit.strategy == "2st" else None)
  scaled = multi_exit is not None and aux_fn is not None
  init_state = lambda params: {}
  if family.init_state is not None:
    init_state = lambda params: family.init_state(loss_cfg, ctx, params)
  return Objective(label, terms, roles, main_weight, lam if aux_fn is not None else 0.0, gate,
                   freeze, main_scale=w_last if split_last else 1.0,
                   aux_scale=w_last if scaled else 1.0, init_state=init_state)
