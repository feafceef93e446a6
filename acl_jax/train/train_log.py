"""The train log: metrics summed on device between fetches, and written on process 0.

The step's metrics stay on device: `DeviceSums.add` folds each step into running sums (a small
jitted update, no host transfer) and keeps a snapshot of the first step whose loss or gradient
was not finite. The loop fetches them at log, eval and checkpoint steps only (`fetch`), so a
NaN is named with its own step and terms and never reaches a checkpoint.
"""
import json
import logging
import math
import os

import jax
import jax.numpy as jnp

from acl_jax import host_heap
from acl_jax.errors import Diverged
from acl_jax.provenance import write_atomic

log = logging.getLogger(__name__)


def _checked(k: str) -> bool:
  """The metrics a NaN/Inf must stop the run on: losses, gradient norms."""
  return k.startswith(("loss", "gate/norm")) or k == "grad_norm"


def check_finite(step: int, m: dict) -> None:
  """Raises Diverged on a NaN/Inf loss or gradient, naming the step and the bad terms.

  The gradient norm is checked too: a non-finite gradient under finite losses would corrupt
  the parameters and surface one step later, under the wrong term.
  """
  bad = sorted(k for k, v in m.items() if _checked(k) and not math.isfinite(float(v)))
  if bad:
    raise Diverged(
        f"Non-finite loss or gradient at step {step}: " +
        ", ".join(f"{k}={float(m[k])}" for k in bad) +
        ". Lower optim.lr, check the loss hyperparameters, or try model.dtype=float32.")


@jax.jit
def _add(acc, m, step):
  finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for k, v in m.items() if _checked(k)]))
  first_bad = jnp.logical_and(acc["bad_step"] < 0, jnp.logical_not(finite))
  return {"sum": jax.tree.map(jnp.add, acc["sum"], m), "count": acc["count"] + 1,
          "bad_step": jnp.where(first_bad, step, acc["bad_step"]),
          "bad": jax.tree.map(lambda b, v: jnp.where(first_bad, v, b), acc["bad"], m)}


class DeviceSums:
  """Running on-device sums of the train step's metrics since the last fetch."""

  def __init__(self):
    self.acc = None

  def add(self, m: dict, step: int) -> None:
    """Folds in the metrics of global step `step` (1-based: the steps done)."""
    if self.acc is None:
      zeros = jax.tree.map(jnp.zeros_like, m)
      self.acc = {"sum": zeros, "count": jnp.zeros((), jnp.int32),
                  "bad_step": jnp.full((), -1, jnp.int32), "bad": zeros}
    self.acc = _add(self.acc, m, jnp.int32(step))

  def fetch(self) -> tuple[dict, int]:
    """(sums, steps) since the last fetch, on the host; raises Diverged, naming the
    step and its terms, if any of those steps had a non-finite loss or gradient."""
    if self.acc is None:
      return {}, 0
    acc, self.acc = jax.device_get(self.acc), None
    if int(acc["bad_step"]) >= 0:
      check_finite(int(acc["bad_step"]), acc["bad"])
    return {k: float(v) for k, v in acc["sum"].items()}, int(acc["count"])


def _jsonl_step(line: str):
  """The step of one metrics.jsonl line; None for a blank or half-written (crashed) line."""
  try:
    return json.loads(line).get("step", 0) if line.strip() else None
  except ValueError:
    return None


class MetricWriter:
  """JSONL + TensorBoard on process 0. On resume, drops records past the restored step."""

  def __init__(self, workdir: str, resume_step: int):
    self.on = jax.process_index() == 0
    self.path = os.path.join(workdir, "metrics.jsonl")
    self.tb = None
    if not self.on:
      return
    if os.path.exists(self.path):
      with open(self.path) as f:
        kept = [ln for ln in f if (st := _jsonl_step(ln)) is not None and st <= resume_step]
      write_atomic(self.path, "".join(kept))
    try:
      with host_heap.torch_hidden():  # it takes torch.Tensor for an array type where it finds it
        from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
      self.tb = SummaryWriter(os.path.join(workdir, "tb"))
    except ImportError:
      log.warning("tensorboardX not installed; writing JSONL only.")

  def write(self, step: int, kind: str, values: dict) -> None:
    if not self.on:
      return
    rec = {"step": int(step), "kind": kind, **{k: float(v) for k, v in values.items()}}
    with open(self.path, "a") as f:
      f.write(json.dumps(rec) + "\n")
    if self.tb is not None:
      for k, v in values.items():
        self.tb.add_scalar(f"{kind}/{k}", float(v), int(step))
      self.tb.flush()

  def close(self):
    if self.tb is not None:
      self.tb.close()
