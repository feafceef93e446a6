"""The processes a study's runs start: started so that they die with their starter, timed in
CPU seconds, and signalled without reaping them.

A run's command is killed with the process that started it (Linux), so a killed driver or
Ray worker leaves no run behind that would write its workdir beside a successor's.
"""
import ctypes
import functools
import os
import signal
import subprocess

try:
  _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
  _prctl = None
_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int):
  """Run in the child before exec: SIGKILL it when the thread that started it ends, so a run
  does not outlive a killed driver or worker (a no-op outside Linux). `parent`: the pid of
  the process that forked, which may have died before the child asked."""
  if _prctl is not None:
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
      os._exit(1)  # pylint: disable=protected-access


def call(cmd, on_start=None, **kw) -> tuple[int, float]:
  """subprocess.call, also returning the child's CPU seconds (user + system, from wait4's
  rusage); `on_start(proc)` is called once it runs."""
  # pylint: disable-next=consider-using-with,subprocess-popen-preexec-fn
  proc = subprocess.Popen(cmd, preexec_fn=functools.partial(_die_with_parent, os.getpid()), **kw)
  if on_start is not None:
    on_start(proc)
  _, status, usage = os.wait4(proc.pid, 0)
  proc.returncode = os.waitstatus_to_exitcode(status)
  return proc.returncode, usage.ru_utime + usage.ru_stime


def send(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> bool:
  """Sends `sig` unless `call` reaped the process (not Popen.send_signal: its poll would reap
  the child under `call`'s wait4); whether it was sent."""
  if proc.returncode is None:
    try:
      os.kill(proc.pid, sig)
      return True
    except ProcessLookupError:
      pass
  return False
