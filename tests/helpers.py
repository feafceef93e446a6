"""Test utilities shared by the training tests."""
import collections
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The GLUE TSVs and TextGCN corpora live beside the clone, not in it.
SHARED_DATA = os.path.join(os.path.dirname(REPO), "shared", "data")


def tiny_config(model_dir, arg="runlocal", **overrides):
  """The quickstart runlocal config on a tiny model, with dotted-key overrides."""
  from configs import quickstart  # pylint: disable=import-outside-toplevel
  c = quickstart.get_config(arg)
  c.model.name = model_dir
  c.progress = False
  for k, v in overrides.items():
    node = c
    *parents, leaf = k.split(".")
    for p in parents:
      node = node[p]
    node[leaf] = v
  return c


# jax's event after tracing a jitted function (jax._src.dispatch.JAXPR_TRACE_EVENT).
TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"


@contextlib.contextmanager
def count_traces():
  """A Counter of the jit traces inside the block, by the traced function's name.

  Counts top-level traces only (jax records none for a jit traced inside another), from
  jax's trace event, so library code carries no counters of its own.
  """
  import jax  # pylint: disable=import-outside-toplevel
  counts = collections.Counter()

  def listener(event, _duration, fun_name="?", **_):
    if event == TRACE_EVENT:
      counts[fun_name] += 1
  jax.monitoring.register_event_duration_secs_listener(listener)
  try:
    yield counts
  finally:
    jax.monitoring.unregister_event_duration_listener(listener)


@contextlib.contextmanager
def local_ray():
  """A Ray cluster of this machine on loopback (2 CPUs), started and stopped here; yields
  its address. Skips the test where ray is not installed."""
  ray = pytest.importorskip("ray")
  # A short folder: Ray's socket paths under it must stay within the OS's length limit.
  temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
  ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
           _node_ip_address="127.0.0.1", _temp_dir=temp, object_store_memory=100 * 2**20,
           runtime_env={"env_vars": {"PYTHONPATH": REPO}})
  try:
    yield ray.get_runtime_context().gcs_address
  finally:
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)


def env(**extra):
  e = dict(os.environ)
  e.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", JAX_PLATFORMS="cpu",
           PYTHONPATH=REPO + os.pathsep + e.get("PYTHONPATH", ""))
  if "XLA_FLAGS" in extra:  # added to the caller's flags (e.g. alternative kernels), not instead
    extra = {**extra, "XLA_FLAGS": f"{e.get('XLA_FLAGS', '')} {extra['XLA_FLAGS']}".strip()}
  e.update({k: str(v) for k, v in extra.items()})
  return e


# The tools `run_py` runs in a child of a warm parent (tests/cli_server.py): each is a fresh
# process all the same, without its ~1.5 s of imports. ACL_JAX_TEST_CLI_SERVER=0 turns it off.
# The fault workers patch a tool in their own process, then run it.
CLI_SCRIPTS = ("train.py", "eval.py", "predict.py", "export.py", "tests/fault_workers.py")
_cli = {}
_cli_lock = threading.Lock()


def _cli_server(e: dict):
  """This test process's warm parent for environment `e`: what the children import at its
  start is imported under `e`, so a request in another environment starts a new one."""
  # (pytest names the current test in the environment; the child is given the request's)
  e = {k: v for k, v in e.items() if k != "PYTEST_CURRENT_TEST"}
  if "server" not in _cli or _cli["env"] != e or _cli["server"].poll() is not None:
    if "server" in _cli:
      _cli["server"].stdin.close()  # the parent exits at the end of its input
      _cli["server"].wait()
    proc = subprocess.Popen([sys.executable, "-m", "tests.cli_server"], cwd=REPO, env=e,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    _cli.update(server=proc, env=e)
  return _cli


def run_py(args, timeout=300, input_text="", **env_extra):
  """Runs python with args in the repo, `input_text` on its stdin; returns CompletedProcess
  (text)."""
  e = env(**env_extra)
  if not (args and args[0] in CLI_SCRIPTS and os.environ.get("ACL_JAX_TEST_CLI_SERVER") != "0"):
    return subprocess.run([sys.executable, *args], cwd=REPO, env=e, text=True,
                          capture_output=True, timeout=timeout, input=input_text)
  with _cli_lock:
    server = _cli_server(e)["server"]
    server.stdin.write(json.dumps({"argv": list(args), "cwd": REPO, "env": e,
                                   "input": input_text, "timeout": timeout}) + "\n")
    server.stdin.flush()
    line = server.stdout.readline()
  if not line:
    raise RuntimeError(f"tests/cli_server.py exited (code {server.poll()}); its stderr is above")
  r = json.loads(line)
  if r.get("timeout"):
    raise subprocess.TimeoutExpired([sys.executable, *args], timeout)
  return subprocess.CompletedProcess([sys.executable, *args], r["returncode"], r["stdout"],
                                     r["stderr"])


class Crash(Exception):
  """The crash `crash_at_best_save` raises."""


@contextlib.contextmanager
def crash_at_best_save(step: int):
  """Inside the block, the best-checkpoint save of `step` raises `Crash` (after that step's
  latest checkpoint is written); yields the list of every save's metadata, in order."""
  from acl_jax.train import checkpoint as ckpt_lib  # pylint: disable=import-outside-toplevel
  save, metas = ckpt_lib.Checkpoints.save, []

  def crashing_save(self, state, meta, best=False):
    metas.append(meta)
    if best and meta["step"] == step:
      raise Crash
    return save(self, state, meta, best)
  ckpt_lib.Checkpoints.save = crashing_save
  try:
    with pytest.raises(Crash):
      yield metas
  finally:
    ckpt_lib.Checkpoints.save = save
