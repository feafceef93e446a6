"""Atomic Orbax checkpoints: the latest (for resume) and the best (for evaluation).

The latest holds the whole TrainState; the best holds the params and step alone, since only
evaluation reads it (Adam's two moments would double its size for nothing).

Orbax writes each step into a temporary folder and renames it when complete, so a crash or
SIGKILL mid-save leaves the previous checkpoint intact; the next manager removes the temporary
folder. The training loop saves the latest checkpoint before the best one at the same step, so
the best is never ahead of the latest, and `sync_best` mends a crash between the two on resume.
Restores go against an abstract target built from the live state, so optax states come back
as their own types (not plain dicts) and arrays come back with the live shardings.

Two latest checkpoints are kept: one that cannot be read (a shard truncated by a full disk, a
bad copy) is moved to `ckpt_corrupt/` and the run resumes from the one before it. A finished
run is read (`restore_selected`) at its best or latest step alone: an unreadable one is an
error naming the step, never replaced by an earlier step, which holds other weights. With
checkpoint.keep_train_state=False a finished run deletes `ckpt/` (`drop_train_state`) and keeps
the best params alone, a third of a latest checkpoint's size (params, no Adam moments).
"""
import logging
import os
import re
import shutil
import sys
from typing import Any

import jax
import orbax.checkpoint as ocp
from etils import epath

from acl_jax import provenance
from acl_jax.errors import FileError, UserError
from acl_jax.names import check_known, path_names

log = logging.getLogger(__name__)
CORRUPT_DIR = "ckpt_corrupt"
# What a finished run is read by: the dev-selected params, or the final weights.
CHECKPOINTS = ("best", "latest")


# What Orbax appends to a failed array read's message: the whole TensorStore spec, dozens of
# lines, whose first line is a bound method's repr ("<bound method pybind11_detail_... of
# TensorStore({"); and the checkpoint's folder again in TensorStore's own message.
_SPEC_DUMP = re.compile(r"[\s.]*(See full TensorStore details:|<bound method ).*$")
_LOCAL_FILE = re.compile(r' at local file "[^"]*"')


def _first_line(error: BaseException, limit: int) -> str:
  """An error's type and the first line of its message, without Orbax's TensorStore spec: its
  messages run to hundreds of lines."""
  first = _SPEC_DUMP.sub("", (str(error).strip().splitlines() or [""])[0])
  return f"{type(error).__name__}: {_LOCAL_FILE.sub('', first)[:limit]}"


def _root_cause(error: BaseException) -> BaseException:
  """The error at the bottom of `error`'s chain of causes: Orbax wraps TensorStore's own
  (e.g. "OUT_OF_RANGE: Error reading ... is not valid for value of size ...", which says what
  is wrong with the file) in a generic Exception naming the array's slice."""
  while isinstance(error.__cause__, Exception):
    error = error.__cause__
  return error


class UnreadableCheckpoint(FileError):
  """A checkpoint step whose files cannot be read back (as opposed to one that does not fit);
  a FileError, as the files are at fault: the tools report it in one line."""

  def __init__(self, folder: str, step: int, error: BaseException):
    super().__init__(f"checkpoint {folder} (step {step}) cannot be read "
                     f"({_first_line(_root_cause(error), 300)})")
    self.folder, self.step = folder, step


def _aborted_read(error: BaseException | None) -> bool:
  """Whether `error` comes from an array read that a failed restore left behind: the event
  loop it ran on is closed, its TensorStore read failed, or Orbax wrapped the GeneratorExit
  that closed its coroutine ("Encountered error while reading array index ...")."""
  text = str(error)
  if type(error) is Exception:  # pylint: disable=unidiomatic-typecheck
    return text.startswith("Encountered error while reading")
  return isinstance(error, (ValueError, RuntimeError, OSError)) and (
      "Error reading" in text or "Error opening" in text or text == "Event loop is closed")


def _ignore_aborted_reads() -> None:
  """Keeps a failed restore to one error instead of hundreds of tracebacks.

  When a read fails, Orbax closes its event loop while tensorstore reads of the other arrays
  are still in flight; each of them then reports its end as an unraisable error ("Event loop
  is closed", or its coroutine's GeneratorExit wrapped by Orbax), from its own thread and
  possibly after the restore returned or at exit. This hook (installed for the rest of the
  process) drops exactly those; any other unraisable error goes on to the previous hook.
  """
  prev = sys.unraisablehook
  if getattr(prev, "drops_aborted_reads", False):
    return

  def hook(unraisable):
    if not _aborted_read(unraisable.exc_value):
      prev(unraisable)
  hook.drops_aborted_reads = True
  sys.unraisablehook = hook
  # The sibling reads' own failures reach asyncio's exception handler as "... exception was
  # never retrieved" log records with a traceback each; drop those of failed array reads.
  logging.getLogger("asyncio").addFilter(_drop_orphaned_read_errors)


def _drop_orphaned_read_errors(record: logging.LogRecord) -> bool:
  exc = record.exc_info[1] if record.exc_info else None
  orphaned = "never retrieved" in record.getMessage() or "Exception in callback" in \
      record.getMessage()
  return not (orphaned and _aborted_read(exc))


def _leaf_paths(tree) -> set[str]:
  """The leaves' paths as "a/0/b", alike for a live TrainState (attribute and sequence keys)
  and its saved tree metadata (dict keys)."""
  return {"/".join(path_names(path)) for path, _ in jax.tree_util.tree_leaves_with_path(tree)}


def _manager(path: str, keep: int, create: bool = True) -> ocp.CheckpointManager:
  opts = ocp.CheckpointManagerOptions(max_to_keep=keep, create=create,
                                      enable_async_checkpointing=False,
                                      cleanup_tmp_directories=True)
  return ocp.CheckpointManager(os.path.abspath(path), options=opts)


def _abstract(state: Any) -> Any:
  return jax.tree.map(ocp.utils.to_shape_dtype_struct, state)


class Checkpoints:
  """The latest and best checkpoints of one workdir, each a TrainState plus a JSON `meta`."""

  def __init__(self, workdir: str, keep_latest: int = 2, create: bool = True):
    """create=False opens the checkpoints of a finished run for reading: a run that kept best/
    alone (checkpoint.keep_train_state=False) gets no empty ckpt/ back."""
    if keep_latest < 2:
      raise ValueError(f"keep_latest must be >= 2 (a checkpoint to fall back to), got "
                       f"{keep_latest}.")
    self.workdir = workdir
    self.latest = _manager(os.path.join(workdir, "ckpt"), keep_latest, create)
    self.best = _manager(os.path.join(workdir, "best"), 1, create)

  def save(self, state, meta: dict, best: bool = False) -> None:
    mngr = self.best if best else self.latest
    step = int(meta["step"])
    if mngr.latest_step() == step:
      return
    if best:  # read by restore_params only
      state = {"params": state.params, "step": state.step}
    try:
      saved = mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                      meta=ocp.args.JsonSave(meta)))
      mngr.wait_until_finished()
    except Exception as e:  # pylint: disable=broad-except
      # Orbax's own error (a full disk: RESOURCE_EXHAUSTED ... No space left on device) in one
      # line; the previous checkpoints are intact (a save is atomic), so a re-run resumes.
      raise FileError(f"Saving the checkpoint of step {step} in {mngr.directory} failed "
                      f"({_first_line(e, 300)}). The earlier checkpoints are intact: "
                      "free space (or fix the folder) and re-run the same command to resume "
                      f"from step {mngr.latest_step() or 0}.") from e
    if not saved:
      raise RuntimeError(f"Orbax refused to save step {step} in {mngr.directory} (it holds "
                         f"steps {mngr.all_steps()}); a checkpoint would have been lost.")

  def sync_best(self, state, meta: dict) -> dict:
    """Makes the best checkpoint agree with `meta`, read with `state` from the latest one.

    A crash after the latest save but before the best save of the same step leaves meta's
    best_step == state.step with no best checkpoint there: it is written from `state` (exactly
    that step's weights). A best checkpoint ahead of `state` (left by a deleted `ckpt/`, or by
    a resume that fell back past an unreadable latest checkpoint) belongs to a trajectory this
    run will not retrace: it is moved aside to `best_stale/` (never deleted: it may be the only trained
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
    if meta["best_step"] == step and have != step:
      self.save(state, {**meta, "step": step}, best=True)
    return meta

  def _step_dir(self, mngr, step: int) -> str:
    return os.path.join(str(mngr.directory), str(step))

  def _read_meta(self, mngr, step: int) -> dict:
    try:
      return mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
    except Exception as e:  # pylint: disable=broad-except
      raise UnreadableCheckpoint(self._step_dir(mngr, step), step, e) from e

  def _check_fits(self, mngr, step: int, meta: dict, target_params) -> None:
    """Raises UserError if the checkpoint's params do not fit `target_params`' shapes."""
    want = meta["param_shapes"]
    have = param_shapes(target_params)
    diff = {k: (want[k], have.get(k)) for k in want if want[k] != have.get(k)}
    if diff:
      k = next(iter(diff))
      raise UserError(
          f"The checkpoint in {mngr.directory} does not fit this model: {k} is {diff[k][0]} "
          f"there but {diff[k][1]} here ({len(diff)} tensors differ). A classifier head "
          "mismatch means num_labels differs from the run that wrote it; use a new --workdir "
          "or the same task and model.")

  def _check_tree(self, mngr, step: int, meta: dict, target_state) -> None:
    """Raises UserError if the saved state has other leaves than `target_state` (an optimizer
    or TrainState change since it was written), read from its metadata alone."""
    path = os.path.join(self._step_dir(mngr, step), "state")
    try:
      saved = _leaf_paths(ocp.StandardCheckpointHandler().metadata(epath.Path(path)))
    except Exception as e:  # pylint: disable=broad-except
      raise UnreadableCheckpoint(self._step_dir(mngr, step), step, e) from e
    live = _leaf_paths(target_state)
    if saved == live:
      return
    diff = sorted(saved ^ live)
    if all(p.startswith("opt_state/") for p in diff):
      raise UserError(
          f"The checkpoint in {mngr.directory} (step {step}) fits this model but not this "
          f"optimizer's state (the optimizer or its settings changed since; it was trained by "
          f"code {meta['code_versions']}). Resume it with that code, or "
          f"start a new --workdir; eval.py still reads its params. First differing leaf: "
          f"{diff[0]}.")
    raise UserError(
        f"The checkpoint in {mngr.directory} (step {step}) holds another train state than "
        f"this code builds ({len(diff)} leaves differ, e.g. {diff[0]}); resume it with the "
        "code that wrote it, or start a new --workdir.")

  def _newest_intact(self, mngr, read):
    """(step, read(step), [UnreadableCheckpoint of newer steps]) of the newest step `read`
    can read back; None without a checkpoint. Errors other than an unreadable checkpoint
    (a checkpoint that does not fit) propagate at once: older steps would not fit either."""
    bad = []
    for step in sorted(mngr.all_steps(), reverse=True):
      try:
        return step, read(step), bad
      except UnreadableCheckpoint as e:
        bad.append(e)
    if not bad:
      return None
    raise FileError(
        f"No checkpoint in {mngr.directory} can be read: the " + "; the ".join(map(str, bad)) +
        f". If they are damaged (e.g. a full disk truncated them), delete {mngr.directory} "
        "to retrain this run from step 0 (its records and best/ stay), or use a new --workdir.")

  def _set_aside(self, bad: list, good_step: int) -> None:
    """Moves unreadable checkpoints newer than `good_step` to ckpt_corrupt/ (kept for a look;
    Orbax would not save a step below them)."""
    aside = os.path.join(self.workdir, CORRUPT_DIR)
    if jax.process_index() == 0:  # the workdir is one folder for every host
      os.makedirs(aside, exist_ok=True)
      for e in bad:
        dst = os.path.join(aside, str(e.step))
        if os.path.exists(dst):
          dst = f"{dst}.{os.getpid()}"
        os.replace(e.folder, dst)
    ocp.multihost.sync_global_processes("acl_jax_set_aside_unreadable")
    self.latest.reload()
    log.warning("The %s; moved to %s. Resuming from step %d, the previous intact "
                "checkpoint.", "; the ".join(map(str, bad)), aside, good_step)

  def restore(self, target_state) -> tuple[Any, dict] | None:
    """Restores the newest intact latest checkpoint onto `target_state`'s structure, dtypes and
    shardings; None if there is none. Unreadable newer ones are set aside (logged)."""
    _ignore_aborted_reads()

    def read(step):
      meta = self._read_meta(self.latest, step)
      self._check_fits(self.latest, step, meta, target_state.params)
      self._check_tree(self.latest, step, meta, target_state)
      try:
        out = self.latest.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(_abstract(target_state)),
            meta=ocp.args.JsonRestore()))
      except Exception as e:  # pylint: disable=broad-except
        raise UnreadableCheckpoint(self._step_dir(self.latest, step), step, e) from e
      return out["state"], out["meta"]
    found = self._newest_intact(self.latest, read)
    if found is None:
      return None
    step, out, bad = found
    if bad:
      self._set_aside(bad, step)
    return out

  def restore_params(self, target_params, best: bool = False) -> tuple[Any, dict] | None:
    """Restores the params alone of the newest best (or latest) checkpoint, onto
    `target_params`' structure and shardings: a checkpoint whose optimizer state this code no
    longer builds still loads. None if absent; UnreadableCheckpoint, naming the step, if its
    files cannot be read (no earlier step is read in its place)."""
    _ignore_aborted_reads()
    mngr = self.best if best else self.latest
    step = mngr.latest_step()
    if step is None:
      return None
    meta = self._read_meta(mngr, step)
    self._check_fits(mngr, step, meta, target_params)
    try:
      return _restore_items(mngr, step, {"params": target_params})["params"], meta
    except Exception as e:  # pylint: disable=broad-except
      raise UnreadableCheckpoint(self._step_dir(mngr, step), step, e) from e

  def restore_selected(self, target_params, checkpoint: str = "best") -> tuple[Any, dict]:
    """The params a finished run is read by, and their meta: checkpoint="best" the
    dev-selected ones (the latest when none is marked best), "latest" the run's final weights.

    Exactly that step is read. One that cannot be read raises, naming it: an earlier step
    would be another model under the same name (the fallback to the previous intact step is
    for resuming training alone, `restore`).
    """
    check_selected(self.workdir, checkpoint)
    best = checkpoint == "best" and self.best.latest_step() is not None
    try:
      return self.restore_params(target_params, best=best)
    except UnreadableCheckpoint as e:
      raise FileError(
          f"The {'best' if best else 'latest'} {e}. A finished run is read at that step "
          "alone, never at an earlier one in its place; if its files are damaged, retrain the "
          "run.") from e

  def latest_meta(self) -> dict | None:
    """The JSON meta of the newest latest checkpoint whose meta can be read (what `restore`
    resumes, unless its arrays turn out unreadable); None without one. Moves nothing."""
    found = self._newest_intact(self.latest, lambda step: self._read_meta(self.latest, step))
    return None if found is None else found[1]

  def read_meta(self, best: bool = False) -> dict | None:
    """The JSON meta of the newest best (or latest) checkpoint, without its arrays."""
    mngr = self.best if best else self.latest
    step = mngr.latest_step()
    return None if step is None else self._read_meta(mngr, step)

  def close(self):
    self.latest.close()
    self.best.close()


def check_selected(workdir: str, checkpoint: str) -> None:
  """Raises, saying what to do, when `workdir` holds no checkpoint that `checkpoint` ("best"
  or "latest") is read from. Reads the folder names alone, so it runs before any model loads.
  """
  check_known(checkpoint, CHECKPOINTS, "checkpoint")
  latest = provenance.checkpoint_steps(workdir)
  if not (latest or provenance.checkpoint_steps(workdir, "best")):
    raise FileError(
        f"No checkpoint in {workdir}: train it first (a run restored from a records archive, "
        "or pruned, keeps its results but not its weights).")
  if checkpoint == "latest" and not latest:
    dropped = provenance.run_finished(workdir) and _config_keeps_no_state(workdir)
    why = ("the run deleted it after training (checkpoint.keep_train_state=False)" if dropped
           else "it is missing or empty")
    raise FileError(
        f"{workdir} has no latest checkpoint: {os.path.join(workdir, 'ckpt')}, the final "
        f"weights, holds none ({why}); use --checkpoint best.")


def _config_keeps_no_state(workdir: str) -> bool:
  cfg = provenance.run_config(workdir) or {}
  return cfg.get("checkpoint", {}).get("keep_train_state") is False


def drop_train_state(workdir: str) -> bool:
  """Deletes the workdir's ckpt/ (the whole train state, for resuming) and keeps best/ (the
  params evaluation, export and prediction read), once every process is past its last read.
  Returns whether it deleted (a run without a best checkpoint keeps ckpt/, with a warning)."""
  ocp.multihost.sync_global_processes("acl_jax_drop_train_state")
  best = os.path.join(workdir, "best")
  if not any(d.isdigit() for d in (os.listdir(best) if os.path.isdir(best) else [])):
    log.warning("%s has no best checkpoint; ckpt/ is kept.", workdir)
    return False
  if jax.process_index() == 0:  # the workdir is one folder for every host
    shutil.rmtree(os.path.join(workdir, "ckpt"), ignore_errors=True)
  ocp.multihost.sync_global_processes("acl_jax_dropped_train_state")
  return True


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
