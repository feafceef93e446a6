"""acl-jax: ACL and G-Loss fine-tuning for BERT-family classifiers in JAX/Flax."""
from acl_jax.models import load_pretrained

__all__ = ["load_pretrained"]
