"""acl_jax.exits."""
