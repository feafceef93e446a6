"""Losses: pure functions of features, labels and parameters (SPEC §2).

The trainer's registry of loss families, with how each combines with CE and its SPEC
defaults, is `acl_jax.train.objectives.LOSSES`.
"""
from acl_jax.losses.ce import balanced_class_weights, cross_entropy, weighted_mean
from acl_jax.losses.contrastive import (
    ANCHOR_MODES, acl_cl_loss, acl_embed_loss, check_anchors, check_tau, masked_supcon,
    safe_normalize, scl_loss)
from acl_jax.losses.gate import (
    ANGLE_PARAMS, GATE_MODES, AngleStats, angle, angle_gate, angle_mask, angle_stats,
    check_gate_args, encoder_angle_mask, sq_norm, top_angle_mask)
from acl_jax.losses.graph import (
    GLOSS_FORMS, check_gamma_keep, check_labels, check_sigma, gloss, propagate, resolve_gamma,
    sigma_sqrt_heuristic, transition_matrix, unreachable_share)
from acl_jax.losses.metric_learning import cosine_loss, triplet_loss
from acl_jax.losses.silhouette import silhouette_defined, silhouette_scores

__all__ = [
    "ANCHOR_MODES", "ANGLE_PARAMS", "AngleStats", "GATE_MODES", "GLOSS_FORMS", "acl_cl_loss",
    "acl_embed_loss", "angle", "angle_gate", "angle_mask", "angle_stats", "balanced_class_weights",
    "check_anchors", "check_gamma_keep", "check_gate_args", "check_labels", "check_sigma",
    "check_tau", "cosine_loss", "cross_entropy", "encoder_angle_mask", "gloss", "masked_supcon",
    "propagate", "resolve_gamma", "safe_normalize", "scl_loss", "sigma_sqrt_heuristic",
    "silhouette_defined", "silhouette_scores", "sq_norm", "top_angle_mask", "transition_matrix",
    "triplet_loss", "unreachable_share", "weighted_mean",
]
