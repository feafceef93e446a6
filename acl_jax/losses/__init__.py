"""Losses: pure functions of features, labels and parameters (SPEC §2).

`LOSSES` maps each trainer objective to its auxiliary loss function, how it combines
with CE, and the SPEC defaults of its hyperparameters:

- "convex":   (1 - lambda) CE + lambda L   (SCL, G-Loss, triplet, cosine)
- "additive": CE + lambda L                (ACL-Embed)
- "none":     CE alone
"""
import dataclasses
from typing import Any, Callable, Mapping, Optional

from acl_jax.losses.ce import balanced_class_weights, cross_entropy, weighted_mean
from acl_jax.losses.contrastive import (
    ANCHOR_MODES, acl_cl_loss, acl_embed_loss, check_anchors, check_tau, masked_supcon,
    safe_normalize, scl_loss)
from acl_jax.losses.gate import GATE_MODES, angle_gate, check_gate_args, encoder_angle_mask
from acl_jax.losses.graph import (
    GLOSS_FORMS, check_gamma_keep, check_labels, check_sigma, gloss, propagate, resolve_gamma,
    sigma_sqrt_heuristic, transition_matrix)
from acl_jax.losses.metric_learning import cosine_loss, triplet_loss
from acl_jax.losses.silhouette import silhouette_defined, silhouette_scores

COMBINE_MODES = ("none", "convex", "additive")


@dataclasses.dataclass(frozen=True)
class LossEntry:
  """One trainer objective.

  Attributes:
    fn: the auxiliary loss (None for plain CE).
    combine: "none", "convex" or "additive" (see the module docstring).
    defaults: SPEC default hyperparameters, keyword names as `fn` takes them, plus "lam".
    description: one line for logs and --help.
  """
  fn: Optional[Callable[..., Any]]
  combine: str
  defaults: Mapping[str, Any]
  description: str


def combine_with_ce(entry: LossEntry, ce, aux, lam):
  """The total objective for `entry` given the CE and auxiliary loss values."""
  if entry.combine == "none":
    return ce
  if entry.combine == "convex":
    return (1.0 - lam) * ce + lam * aux
  return ce + lam * aux


LOSSES: dict[str, LossEntry] = {
    "ce": LossEntry(None, "none", {}, "cross-entropy only"),
    "scl": LossEntry(
        scl_loss, "convex", {"lam": 0.9, "tau": 0.3},
        "(1-lambda) CE + lambda SCL (Gunel et al. 2021), SPEC §2.2"),
    "acl_embed": LossEntry(
        acl_embed_loss, "additive", {"lam": 0.5, "tau": 0.3, "anchors": "all"},
        "CE + lambda ACL-Embed (label embeddings in the contrastive set), SPEC §2.3"),
    "gloss": LossEntry(
        gloss, "convex", {"lam": 0.8, "gamma_keep": 0.7, "sigma": 0.667, "form": "clean"},
        "(1-lambda) CE + lambda G-Loss (batch-graph label propagation), SPEC §2.6"),
    # SPEC §2.7 fixes no lambda for these two; the config must set one.
    "triplet": LossEntry(
        triplet_loss, "convex", {"margin": 5.0},
        "(1-lambda) CE + lambda batch-all triplet (Euclidean, margin 5), SPEC §2.7"),
    "cosine": LossEntry(
        cosine_loss, "convex", {},
        "(1-lambda) CE + lambda MSE(cos(x_i, x_j), 1[y_i = y_j]), SPEC §2.7"),
}


def get_loss(name: str) -> LossEntry:
  """Looks up a trainer objective; unknown names raise ValueError listing the known ones."""
  if name not in LOSSES:
    raise ValueError(f"unknown loss {name!r}; known losses: {sorted(LOSSES)}.")
  return LOSSES[name]


__all__ = [
    "ANCHOR_MODES", "COMBINE_MODES", "GATE_MODES", "GLOSS_FORMS", "LOSSES", "LossEntry",
    "acl_cl_loss", "acl_embed_loss", "angle_gate", "balanced_class_weights", "check_anchors",
    "check_gamma_keep", "check_gate_args", "check_labels", "check_sigma", "check_tau",
    "combine_with_ce", "cosine_loss", "cross_entropy", "encoder_angle_mask", "get_loss",
    "gloss", "masked_supcon", "propagate", "resolve_gamma", "safe_normalize", "scl_loss",
    "sigma_sqrt_heuristic", "silhouette_defined", "silhouette_scores", "transition_matrix",
    "triplet_loss", "weighted_mean",
]
