"""Stopping at a step boundary when the process is asked to (SIGTERM).

Preemptible machines (spot VMs, TPU pods, a batch scheduler's time limit) send SIGTERM and
kill the process a little later. The training loop asks `Watch.requested(step)` after every
step; once it says yes, the loop checkpoints that step and stops (errors.Preempted), so the
same command resumes the run there instead of at its last scheduled checkpoint.

One process: a Python SIGTERM handler sets a flag (`signals.on_sigterm`: only in the main
thread; the previous handler comes back when the watch ends). Several processes (`jax.distributed`): JAX's
preemption service catches SIGTERM on any host and agrees on one step for all of them
(`multihost_utils.reached_preemption_sync_point`), so every host saves the same step.
"""
import contextlib

import jax
from jax._src import distributed
from jax.experimental import multihost_utils

from acl_jax import signals


class Watch:
  """Whether the run should stop after the step it just took.

  Attributes:
    multi: several processes, told by JAX's preemption service (its sync manager, a private
      name of jax; where `jax_enable_preemption_service` is off there is none, and nothing
      stops them).
    signal: the signal's name once one asked.
  """

  def __init__(self):
    self.signal: str | None = None
    self.multi = jax.process_count() > 1
    self._service = distributed.global_state.preemption_sync_manager if self.multi else None

  def requested(self, step: int) -> bool:
    """`step`: the number of steps done; every process calls this after every step."""
    if self._service is not None and multihost_utils.reached_preemption_sync_point(step):
      self.signal = "SIGTERM"
    return self.signal is not None


@contextlib.contextmanager
def watch():
  """A `Watch`; in one process, SIGTERM sets its flag meanwhile (in the main thread)."""
  w = Watch()
  with signals.on_sigterm(lambda name: setattr(w, "signal", name), enabled=not w.multi):
    yield w
