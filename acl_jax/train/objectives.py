"""Training objectives built from the config: CE plus one auxiliary loss on exit features."""
import jax.numpy as jnp

from acl_jax import losses
from acl_jax.models import label_embeddings
from acl_jax.train.step import AXIS, GateSpec, Objective


# What the ACL-Grad angle is measured over: every parameter, the encoder without heads,
# LayerNorm and biases (RomeBERT), or the top layer and heads only (fast mode).
ANGLE_PARAMS = ("all", "encoder", "top")


def _weights(entry: losses.LossEntry, lam: float) -> dict[str, float]:
  if entry.combine == "none":
    return {"ce": 1.0}
  if entry.combine == "convex":
    return {"ce": 1.0 - lam, "aux": lam}
  return {"ce": 1.0, "aux": lam}


def build_objective(loss_cfg, *, num_labels: int, last_exit: int, class_weights=None,
                    sigma: float | None = None) -> Objective:
  """Builds the objective named by `loss_cfg.name` (a key of `acl_jax.losses.LOSSES`).

  Args:
    loss_cfg: the config's `loss` block.
    num_labels: K.
    last_exit: 1-based layer of the final exit (its kernel gives the label embeddings).
    class_weights: optional [K] CE class weights.
    sigma: G-Loss kernel width overriding loss_cfg.sigma (the `sqrt` heuristic's value).
  """
  entry = losses.get_loss(loss_cfg.name)
  lam = float(loss_cfg.lam)
  if entry.combine != "none" and lam < 0:
    raise ValueError(f"loss.lam must be >= 0, got {lam}.")
  if entry.combine == "convex" and lam > 1:
    raise ValueError(f"loss.lam must be in [0, 1] for {loss_cfg.name} ((1-lam) CE + lam L), "
                     f"got {lam}.")
  name = loss_cfg.name
  cw = None if class_weights is None else jnp.asarray(class_weights, jnp.float32)
  aux_fn = None
  if name in ("scl", "acl_embed"):
    losses.check_tau(loss_cfg.tau)
  if name == "acl_embed":
    losses.check_anchors(loss_cfg.anchors)
  if name == "gloss":
    sigma = float(loss_cfg.sigma if sigma is None else sigma)
    losses.check_sigma(sigma)
    keep, hide = loss_cfg.gamma_keep, loss_cfg.gamma_hide
    gamma_keep = 0.7 if keep < 0 and hide < 0 else losses.resolve_gamma(
        keep if keep >= 0 else None, hide if hide >= 0 else None)
  if name == "scl":
    aux_fn = lambda p, f, y, k, m: losses.scl_loss(f, y, loss_cfg.tau, example_mask=m)
  elif name == "acl_embed":
    aux_fn = lambda p, f, y, k, m: losses.acl_embed_loss(
        f, y, label_embeddings(p, last_exit), loss_cfg.tau, anchors=loss_cfg.anchors,
        example_mask=m)
  elif name == "gloss":
    aux_fn = lambda p, f, y, k, m: losses.gloss(
        f, y, k, num_labels, sigma=sigma, gamma_keep=gamma_keep,
        form=loss_cfg.gloss_form, class_weights=cw)
  elif name == "triplet":
    aux_fn = lambda p, f, y, k, m: losses.triplet_loss(f, y, margin=loss_cfg.margin)
  elif name == "cosine":
    aux_fn = lambda p, f, y, k, m: losses.cosine_loss(f, y)

  def terms(params, logits, aux, batch, key):
    labels = batch["labels"]
    mask = batch.get("example_mask")
    out = {"ce": losses.cross_entropy(logits[-1], labels, cw, mask, axis_name=AXIS)}
    metrics = {"train_acc": jnp.mean((jnp.argmax(logits[-1], -1) == labels).astype(jnp.float32))}
    if aux_fn is not None:
      val = aux_fn(params, aux["feats"][-1], labels, key, mask)
      if isinstance(val, tuple):
        val, extra = val
        metrics.update(extra)
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
    if loss_cfg.angle_params == "top" and loss_cfg.gate_mode != "drop":
      raise ValueError("loss.angle_params='top' supports gate_mode='drop' only: 'project' "
                       "needs the full-parameter gradients; use angle_params='all'.")
    gate = GateSpec(float(loss_cfg.gate_threshold), loss_cfg.gate_mode, loss_cfg.angle_params)
  label = name + ("+grad" if gate else "")
  return Objective(label, terms, _weights(entry, lam), gate)

