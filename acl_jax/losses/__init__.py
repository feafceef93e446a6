"""acl_jax.losses."""
