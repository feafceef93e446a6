"""acl-jax: ACL and G-Loss fine-tuning for BERT-family classifiers in JAX/Flax."""

__all__ = ["load_pretrained"]


def __getattr__(name):
  # Lazy, so light submodules (acl_jax.provenance, used by the sweep runner and benchmark
  # parents) import without pulling in jax and flax.
  if name == "load_pretrained":
    from acl_jax.models import load_pretrained  # pylint: disable=import-outside-toplevel
    return load_pretrained
  raise AttributeError(f"module 'acl_jax' has no attribute {name!r}")
