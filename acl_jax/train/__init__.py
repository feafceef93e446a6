"""acl_jax.train."""
