"""A warm parent for the tests' command-line runs (`helpers.run_py` of train.py, eval.py,
predict.py and export.py).

Each such run used to be a fresh `python train.py ...`, and about 1.5 s of each went to
importing jax, flax, optax and the package before the first line of the tool ran. This
process imports that once and forks a child per run. The child is a fresh copy of that state
(no run sees another's), takes the request's environment, working folder, argv and stdin,
runs the script as `__main__` with its stdout and stderr in files, runs the exit handlers and
exits with the tool's code: what the tests check (code, stdout, stderr) is what the process
would give. jax's backends are not started here, so the fork happens before XLA has threads.

Protocol: one JSON request a line on stdin ({argv, cwd, env, input, timeout}); one JSON reply
a line ({returncode, stdout, stderr} or {timeout: true}) on the original stdout.
"""
import atexit
import io
import json
import os
import runpy
import shutil
import signal
import sys
import tempfile
import threading
import time

# What `import train` imports, less the tools' own absl flags (defined once per process).
import absl.app  # noqa: F401  pylint: disable=unused-import
import jax  # noqa: F401  pylint: disable=unused-import
from ml_collections import config_flags  # noqa: F401  pylint: disable=unused-import

from acl_jax import cli, errors  # noqa: F401  pylint: disable=unused-import
from configs import common  # noqa: F401  pylint: disable=unused-import


def _child(req: dict, out: str, err: str, stdin: str) -> None:
  """Runs in the forked child; never returns."""
  code = 1
  try:
    for fd, path, flags in ((0, stdin, os.O_RDONLY), (1, out, os.O_WRONLY),
                            (2, err, os.O_WRONLY)):
      f = os.open(path, flags)
      os.dup2(f, fd)
      os.close(f)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])
    script = req["argv"][0]
    sys.argv = list(req["argv"])
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
      runpy.run_path(script, run_name="__main__")
      code = 0
    except SystemExit as e:
      if e.code is None or isinstance(e.code, int):
        code = e.code or 0
      else:
        print(e.code, file=sys.stderr)
    except BaseException:  # pylint: disable=broad-except
      sys.excepthook(*sys.exc_info())
    threading._shutdown()  # pylint: disable=protected-access  # as the interpreter's exit:
    atexit._run_exitfuncs()  # pylint: disable=protected-access  # threads, then handlers
    sys.stdout.flush()
    sys.stderr.flush()
  finally:
    os._exit(code)


def serve() -> None:
  reply = os.fdopen(os.dup(1), "w", buffering=1)
  os.dup2(2, 1)  # stray prints cannot reach the protocol
  for line in sys.stdin:
    req = json.loads(line)
    # mkdtemp, not TemporaryDirectory: a child's exit handlers would run the latter's cleanup.
    tmp = tempfile.mkdtemp(prefix="acl-jax-cli-")
    try:
      out, err, stdin = (os.path.join(tmp, n) for n in ("out", "err", "in"))
      for path, text in ((out, ""), (err, ""), (stdin, req.get("input") or "")):
        with open(path, "w") as f:
          f.write(text)
      sys.stdout.flush()
      sys.stderr.flush()
      pid = os.fork()
      if pid == 0:
        _child(req, out, err, stdin)
      deadline = time.monotonic() + req.get("timeout", 300)
      while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
          break
        if time.monotonic() > deadline:
          os.kill(pid, signal.SIGKILL)
          os.waitpid(pid, 0)
          status = None
          break
        time.sleep(0.02)
      if status is None:
        reply.write(json.dumps({"timeout": True}) + "\n")
        continue
      with open(out, errors="replace") as fo, open(err, errors="replace") as fe:
        reply.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status),
                                "stdout": fo.read(), "stderr": fe.read()}) + "\n")
    finally:
      shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
  serve()
