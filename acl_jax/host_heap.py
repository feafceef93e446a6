"""Host heap set-up for training on JAX's CPU backend under glibc.

XLA:CPU allocates a step's working memory (its temp block: 647 MiB for MiniLM-L6's CE step at
B32 L64) on every call and frees it after. glibc serves a block that large with a fresh
`mmap` and unmaps it on free, so every step faults all of it in again: about 175k minor page
faults and 0.4-0.6 s of system CPU per step on 2 cores (BENCHMARKS.md, "Page faults").

`keep_step_memory` makes the block reusable from one step to the next:
- glibc serves every allocation from its heap and keeps what is freed there (`mallopt`:
  M_MMAP_MAX 0, M_TRIM_THRESHOLD at its maximum). Memory the compiler frees is still handed
  back after each compile (`acl_jax.train.step.release_compiler_memory`).
- JAX's CPU client runs each computation on the calling thread
  (`jax_cpu_enable_async_dispatch` off). The temp block then comes from the main heap and is
  freed before the next step asks for its own. With asynchronous dispatch the next step could
  allocate its block while the last one was still held, and the heap would keep both.
  The train loop's host work between steps (packing the next batch: about 0.5 ms) no longer
  overlaps the step.
A small allocation between two steps can still split the freed block, and the next step
then maps a new one (its pages faulted in once, the old block kept as free heap). The train
loop trims the heap around each evaluation and save, which hands such memory back.

train.py, eval.py and predict.py call it first. It must run before JAX starts its backends,
and it does nothing (returning False) when they have started, off glibc, where JAX would pick
an accelerator, or with ACL_JAX_KEEP_STEP_MEMORY=0 in the environment. Scripts that use the
library directly can call it first too.
"""
import ctypes
import importlib.metadata
import importlib.util
import logging
import os
import pkgutil
import sys

ENV = "ACL_JAX_KEEP_STEP_MEMORY"
# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_INT_MAX = 2 ** 31 - 1

log = logging.getLogger(__name__)


def glibc():
  """The C library if it is glibc (it has mallopt and gnu_get_libc_version), else None."""
  if not sys.platform.startswith("linux"):
    return None
  try:
    libc = ctypes.CDLL("libc.so.6")
    libc.gnu_get_libc_version  # pylint: disable=pointless-statement
    return libc
  except (OSError, AttributeError):
    return None


def accelerator_expected() -> bool:
  """Whether JAX would start on something other than its CPU backend: JAX_PLATFORMS names
  another platform first, or, with JAX_PLATFORMS unset, a PJRT plugin (CUDA, ROCm, ...) or
  libtpu is installed. Decided without starting a backend."""
  platforms = os.environ.get("JAX_PLATFORMS", "").strip()
  if platforms:
    return platforms.split(",")[0].strip() != "cpu"
  if importlib.util.find_spec("libtpu") is not None:
    return True
  try:
    import jax_plugins  # pylint: disable=import-outside-toplevel
    if any(True for _ in pkgutil.iter_modules(jax_plugins.__path__)):
      return True
  except ImportError:
    pass
  return bool(importlib.metadata.entry_points(group="jax_plugins"))


def keep_step_memory() -> bool:
  """Makes each CPU step reuse the last step's temp block (module docstring). Returns whether
  the settings were applied."""
  if os.environ.get(ENV, "1") == "0":
    return False
  libc = glibc()
  if libc is None or accelerator_expected():
    return False
  import jax  # pylint: disable=import-outside-toplevel
  from jax._src import xla_bridge  # pylint: disable=import-outside-toplevel
  if xla_bridge.backends_are_initialized():
    log.info("JAX's backends have started, so each step's temp memory stays mapped afresh; "
             "call acl_jax.host_heap.keep_step_memory() before the first JAX computation.")
    return False
  jax.config.update("jax_cpu_enable_async_dispatch", False)
  if not (libc.mallopt(_M_MMAP_MAX, 0) and libc.mallopt(_M_TRIM_THRESHOLD, _INT_MAX)):
    raise RuntimeError("glibc's mallopt refused M_MMAP_MAX=0 or M_TRIM_THRESHOLD; set "
                       f"{ENV}=0 to run with the C library's defaults.")
  log.info("CPU steps reuse their working memory (acl_jax.host_heap; %s=0 turns it off).", ENV)
  return True
