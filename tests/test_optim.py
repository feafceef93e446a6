"""The learning rates the training loop logs are the ones the optimizer applies."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from acl_jax.train import optim

GROUP_OF = {"lr": "encoder", "lr/head": "exit_2", "lr/lower_heads": "exit_1"}


@pytest.mark.parametrize("strategy,head_lr_mult", [("", 1.0), ("", 3.0), ("jt", 1.0),
                                                   ("2st", 2.0), ("alt", 1.0)])
def test_logged_learning_rates_are_the_applied_ones(strategy, head_lr_mult):
  """With a constant gradient of ones, no decay and no clipping, AdamW's update is -lr / (1 +
  eps) at every step a group updates, and 0 where it skips: the update is the learning rate."""
  total, s1 = 12, 5
  kw = dict(lr=1e-2, total_steps=total, warmup_ratio=0.25, strategy=strategy, stage1_steps=s1,
            head_lr_mult=head_lr_mult)
  params = {"encoder": {"kernel": jnp.zeros(2)}, "exit_1": {"kernel": jnp.zeros(2)},
            "exit_2": {"kernel": jnp.zeros(2)}}
  tx = optim.make_optimizer(weight_decay=0.0, clip_norm=0.0, exit_layers=(1, 2), **kw)
  groups = optim.lr_groups(**kw)
  state = tx.init(params)
  ones = jax.tree.map(jnp.ones_like, params)
  seen = set()
  for step in range(total):
    up, state = tx.update(ones, state, params)
    logged = optim.learning_rates(groups, step)
    expect_keys = {"lr"} if not strategy and head_lr_mult == 1.0 else set(GROUP_OF)
    assert set(logged) == expect_keys
    for key in GROUP_OF if len(logged) > 1 else ("lr",):
      applied = -float(up[GROUP_OF[key]]["kernel"][0]) * (1 + 1e-6)
      want = logged[key if key in logged else "lr"]
      np.testing.assert_allclose(applied, want, rtol=1e-4, atol=1e-9,
                                 err_msg=f"{strategy} {key} step {step}")
      seen.add((key, want > 0))
  assert ("lr", True) in seen
  if strategy in ("2st", "alt"):
    assert ("lr/lower_heads", False) in seen  # the frozen steps log 0


def test_single_group_lr_follows_warmup_and_decay():
  groups = optim.lr_groups(lr=1.0, total_steps=10, warmup_ratio=0.2)
  lrs = [optim.learning_rates(groups, s)["lr"] for s in range(10)]
  np.testing.assert_allclose(lrs, [0.0, 0.5, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125])
