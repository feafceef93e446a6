"""acl_jax.data."""
