"""Early-exit inference: exit policies, a layer-skipping fast path and quality-speed sweeps."""
from acl_jax.exits.fast import default_buckets, early_exit_batches, early_exit_predict
from acl_jax.exits.policies import POLICIES, policy_step, select_exit
from acl_jax.exits.sweep import sweep, write_table

__all__ = ["POLICIES", "select_exit", "policy_step", "early_exit_predict",
           "early_exit_batches", "default_buckets",
           "sweep", "write_table"]
