"""SIGTERM while a block runs: one handler shape for the training loop (`train/preempt.py`,
which checkpoints the step) and a sweep's driver (`study/runner.py`, which passes the signal
on to its runs). Imports nothing heavy.

Python runs signal handlers in the main thread only, so elsewhere nothing is installed (the
block runs, and SIGTERM does what it did before). The previous handler comes back when the
block ends, however it ends.
"""
import contextlib
import signal
import threading


@contextlib.contextmanager
def on_sigterm(callback, enabled: bool = True):
  """Calls `callback(name)` (the signal's name, "SIGTERM") on each SIGTERM while the block
  runs; yields whether the handler is installed (not where `enabled` is false, nor outside the
  main thread). The callback runs in the main thread between two bytecodes: it should set a
  flag or start a thread, not take a lock the interrupted code may hold."""
  if not enabled or threading.current_thread() is not threading.main_thread():
    yield False
    return

  def handler(signum, frame):  # pylint: disable=unused-argument
    callback(signal.Signals(signum).name)
  previous = signal.signal(signal.SIGTERM, handler)
  try:
    yield True
  finally:
    signal.signal(signal.SIGTERM, previous)
