"""Atomic Orbax checkpoints: the latest (for resume) and the best (for evaluation).

Orbax writes each step into a temporary folder and renames it when complete, so a crash or
SIGKILL mid-save leaves the previous checkpoint intact. Restores go against an abstract target
built from the live state, so optax states come back as their own types (not plain dicts) and
arrays come back with the live shardings.
"""
import os
from typing import Any

import jax
import orbax.checkpoint as ocp


def _manager(path: str, keep: int) -> ocp.CheckpointManager:
  opts = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                      enable_async_checkpointing=False,
                                      cleanup_tmp_directories=True)
  return ocp.CheckpointManager(os.path.abspath(path), options=opts)


def _abstract(state: Any) -> Any:
  return jax.tree.map(ocp.utils.to_shape_dtype_struct, state)


class Checkpoints:
  """The latest and best checkpoints of one workdir, each a TrainState plus a JSON `meta`."""

  def __init__(self, workdir: str, keep_latest: int = 1):
    self.latest = _manager(os.path.join(workdir, "ckpt"), keep_latest)
    self.best = _manager(os.path.join(workdir, "best"), 1)

  def save(self, state, meta: dict, best: bool = False) -> None:
    mngr = self.best if best else self.latest
    step = int(meta["step"])
    if mngr.latest_step() == step:
      return
    mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                            meta=ocp.args.JsonSave(meta)))
    mngr.wait_until_finished()

  def read_meta(self, best: bool = False) -> dict | None:
    mngr = self.best if best else self.latest
    step = mngr.latest_step()
    if step is None:
      return None
    return mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]

  def restore(self, target_state, best: bool = False) -> tuple[Any, dict] | None:
    """Restores onto `target_state`'s structure, dtypes and shardings; None if absent."""
    mngr = self.best if best else self.latest
    step = mngr.latest_step()
    if step is None:
      return None
    meta = self.read_meta(best)
    want = meta.get("param_shapes", {})
    have = param_shapes(target_state.params)
    diff = {k: (want[k], have.get(k)) for k in want if want[k] != have.get(k)}
    if diff:
      k = next(iter(diff))
      raise ValueError(
          f"The checkpoint in {mngr.directory} does not fit this model: {k} is {diff[k][0]} "
          f"there but {diff[k][1]} here ({len(diff)} tensors differ). A classifier head "
          "mismatch means num_labels differs from the run that wrote it; use a new --workdir "
          "or the same task and model.")
    out = mngr.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(_abstract(target_state)), meta=ocp.args.JsonRestore()))
    return out["state"], out["meta"]

  def close(self):
    self.latest.close()
    self.best.close()


def param_shapes(params) -> dict[str, list[int]]:
  return {jax.tree_util.keystr(p): list(x.shape)
          for p, x in jax.tree_util.tree_leaves_with_path(params)}
