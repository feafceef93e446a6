"""Studies run with acl_jax.study: each module defines one Protocol."""
