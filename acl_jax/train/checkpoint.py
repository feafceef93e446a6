"""Atomic Orbax checkpoints: the latest (for resume) and the best (for evaluation).

The latest holds the whole TrainState; the best holds the params and step alone, since only
evaluation reads it (Adam's two moments would double its size for nothing).

Orbax writes each step into a temporary folder and renames it when complete, so a crash or
SIGKILL mid-save leaves the previous checkpoint intact. The training loop saves the latest
checkpoint before the best one at the same step, so the best is never ahead of the latest, and
`sync_best` mends a crash between the two on resume. Restores go against an abstract target
built from the live state, so optax states come back as their own types (not plain dicts) and
arrays come back with the live shardings.
"""
import dataclasses
import logging
import os
from typing import Any

import jax
import orbax.checkpoint as ocp

log = logging.getLogger(__name__)


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
    self.workdir = workdir
    self.latest = _manager(os.path.join(workdir, "ckpt"), keep_latest)
    self.best = _manager(os.path.join(workdir, "best"), 1)

  def save(self, state, meta: dict, best: bool = False) -> None:
    mngr = self.best if best else self.latest
    step = int(meta["step"])
    if mngr.latest_step() == step:
      return
    if best:  # read by restore_params only (best checkpoints of older code hold it all)
      state = {"params": state.params, "step": state.step}
    if not mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                   meta=ocp.args.JsonSave(meta))):
      raise RuntimeError(f"Orbax refused to save step {step} in {mngr.directory} (it holds "
                         f"steps {mngr.all_steps()}); a checkpoint would have been lost.")
    mngr.wait_until_finished()

  def sync_best(self, state, meta: dict) -> dict:
    """Makes the best checkpoint agree with `meta`, read with `state` from the latest one.

    A crash after the latest save but before the best save of the same step leaves meta's
    best_step == state.step with no best checkpoint there: it is written from `state` (exactly
    that step's weights). A best checkpoint ahead of `state` (left by a crash in older code,
    which saved the best first, or by a deleted `ckpt/`) belongs to a trajectory this run will
    not retrace: it is moved aside to `best_stale/` (never deleted: it may be the only trained
    weights), and as the best checkpoint it replaced is gone too, selection restarts here.
    Returns the (possibly reset) meta.
    """
    step, have = int(state.step), self.best.latest_step()
    if have is not None and have > step:
      aside = os.path.join(self.workdir, "best_stale")
      os.makedirs(aside, exist_ok=True)
      for s in self.best.all_steps():
        if s > step:
          src = os.path.join(str(self.best.directory), str(s))
          dst = os.path.join(aside, str(s))
          if os.path.exists(dst):
            dst = f"{dst}.{os.getpid()}"
          os.replace(src, dst)
      self.best.reload()
      log.warning("Best checkpoint at step %d is ahead of the latest (%d): moved to %s; "
                  "checkpoint selection restarts from step %d.", have, step, aside, step)
      return {**meta, "best_metric": None, "best_step": None, "evals_since_best": 0}
    if meta.get("best_step") == step and have != step:
      self.save(state, {**meta, "step": step}, best=True)
    return meta

  def read_meta(self, best: bool = False) -> dict | None:
    mngr = self.best if best else self.latest
    step = mngr.latest_step()
    if step is None:
      return None
    return mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]

  def _fitting(self, target_params, best: bool):
    """(manager, step, meta) of the checkpoint if one exists and fits `target_params`."""
    mngr = self.best if best else self.latest
    step = mngr.latest_step()
    if step is None:
      return None
    meta = self.read_meta(best)
    want = meta.get("param_shapes", {})
    have = param_shapes(target_params)
    diff = {k: (want[k], have.get(k)) for k in want if want[k] != have.get(k)}
    if diff:
      k = next(iter(diff))
      raise ValueError(
          f"The checkpoint in {mngr.directory} does not fit this model: {k} is {diff[k][0]} "
          f"there but {diff[k][1]} here ({len(diff)} tensors differ). A classifier head "
          "mismatch means num_labels differs from the run that wrote it; use a new --workdir "
          "or the same task and model.")
    return mngr, step, meta

  def restore(self, target_state) -> tuple[Any, dict] | None:
    """Restores the latest checkpoint onto `target_state`'s structure, dtypes and shardings;
    None if absent."""
    found = self._fitting(target_state.params, best=False)
    if found is None:
      return None
    mngr, step, meta = found
    try:
      out = mngr.restore(step, args=ocp.args.Composite(
          state=ocp.args.StandardRestore(_abstract(target_state)), meta=ocp.args.JsonRestore()))
    except (ValueError, KeyError, TypeError) as e:
      rest = {f.name: getattr(target_state, f.name) for f in dataclasses.fields(target_state)
              if f.name != "opt_state"}
      try:  # everything but the optimizer state: if that loads, the optimizer is what changed
        _restore_items(mngr, step, rest)
      except Exception:  # pylint: disable=broad-except
        raise e from None  # not an optimizer-state mismatch: Orbax's own error says what it is
      raise ValueError(
          f"The checkpoint in {mngr.directory} (step {step}) fits this model but not this "
          f"optimizer's state (the optimizer or its settings changed since; it was trained by "
          f"code {meta.get('code_versions', ['unknown'])}). Resume it with that code, or "
          "start a new --workdir; eval.py still reads its params. Orbax said: "
          f"{str(e)[:300]}") from e
    return out["state"], out["meta"]

  def restore_params(self, target_params, best: bool = False) -> tuple[Any, dict] | None:
    """Restores the params alone (for evaluation), onto `target_params`' structure and
    shardings: a checkpoint whose optimizer state this code no longer builds still loads.
    None if absent."""
    found = self._fitting(target_params, best)
    if found is None:
      return None
    mngr, step, meta = found
    return _restore_items(mngr, step, {"params": target_params})["params"], meta

  def close(self):
    self.latest.close()
    self.best.close()


def _restore_items(mngr, step: int, items: dict) -> dict:
  """A partial restore of some of the saved state's top-level fields, onto `items`' live
  structures and shardings."""
  item = _abstract(items)
  # A checkpointer of its own: the manager's "state" item is bound to the standard handler.
  path = os.path.join(str(mngr.directory), str(step), "state")
  with ocp.PyTreeCheckpointer() as c:
    return c.restore(path, args=ocp.args.PyTreeRestore(
        item=item, partial_restore=True,
        restore_args=ocp.checkpoint_utils.construct_restore_args(item)))


def param_shapes(params) -> dict[str, list[int]]:
  return {jax.tree_util.keystr(p): list(x.shape)
          for p, x in jax.tree_util.tree_leaves_with_path(params)}
