"""The host heap of a JAX process on its CPU backend under glibc: `managed()`.

XLA:CPU allocates a step's working memory (its temp block) on every call and frees it after.
glibc serves a block that large with a fresh `mmap` and unmaps it on free, so every step
faults all of it in again and spends system CPU time doing so (BENCHMARKS.md, "Page faults,
and the temp block reused").

`managed()` is the one place that tunes the heap for the process. On entry it:
- makes the block reusable from one step to the next (`keep_step_memory` below): glibc
  serves every allocation from its heap and keeps what is freed there (`mallopt`:
  M_MMAP_MAX 0, M_TRIM_THRESHOLD at its maximum), and JAX's CPU client runs each
  computation on the calling thread (`jax_cpu_enable_async_dispatch` off). The temp block
  then comes from the main heap and is freed before the next step asks for its own. With
  asynchronous dispatch the next step could allocate its block while the last one was still
  held, and the heap would keep both. The host work between steps (packing the next batch)
  no longer overlaps the step.
- hands the heap's free memory back to the operating system after every XLA compile
  (glibc's `malloc_trim`): the compiler's freed memory would otherwise stay resident beside
  the step's temp block (BENCHMARKS.md, "Where the memory goes").
- asks XLA:CPU for its memory-optimized scheduler (`memory_scheduler`), unless XLA_FLAGS
  names a scheduler: it orders each step's ops to lower the temp block's peak (BENCHMARKS.md,
  "XLA:CPU options"), at a step time within the noise of the default's.
- keeps torch out of the process (`transformers_without_torch`): transformers, when torch is
  installed, imports it with its first configuration class (about 200 MiB resident) although
  acl-jax uses only its tokenizers. Reading a `pytorch_model.bin` still imports torch then.
It yields a `Heap`, whose `trim()` does the same on demand: train.py calls it where the loop
turns from training to evaluating or saving and back. A small allocation between two steps
can still split the freed block, and the next step then maps a new one (its pages faulted in
once, the old block kept as free heap); and an evaluation's or a save's buffers would
otherwise be allocated beside the free temp block (BENCHMARKS.md, "Memory in the real job").

The step settings must be applied before JAX starts its backends; they are skipped (and
`Heap.kept` is False) when the backends have started, off glibc, where JAX would pick an
accelerator, or with ACL_JAX_KEEP_STEP_MEMORY=0 in the environment. They last for the
process; the compile trims end with the context. train.py, eval.py and predict.py enter it
first; a script that uses the library directly can too.
"""
import contextlib
import ctypes
import dataclasses
import importlib.metadata
import importlib.util
import logging
import os
import pkgutil
import sys
from typing import Callable, Iterator

ENV = "ACL_JAX_KEEP_STEP_MEMORY"
TORCH_ENV = "ACL_JAX_TRANSFORMERS_TORCH"  # "1": let transformers import torch as it would
# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_INT_MAX = 2 ** 31 - 1
# jax's event after each XLA backend compile (jax._src.dispatch.BACKEND_COMPILE_EVENT).
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"

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
             "enter acl_jax.host_heap.managed() before the first JAX computation.")
    return False
  jax.config.update("jax_cpu_enable_async_dispatch", False)
  if not (libc.mallopt(_M_MMAP_MAX, 0) and libc.mallopt(_M_TRIM_THRESHOLD, _INT_MAX)):
    raise RuntimeError("glibc's mallopt refused M_MMAP_MAX=0 or M_TRIM_THRESHOLD; set "
                       f"{ENV}=0 to run with the C library's defaults.")
  log.info("CPU steps reuse their working memory (acl_jax.host_heap; %s=0 turns it off).", ENV)
  return True


SCHEDULER_FLAG = "--xla_cpu_scheduler_type=CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"


def memory_scheduler() -> bool:
  """Adds SCHEDULER_FLAG to XLA_FLAGS for the CPU backend, before it starts; not where
  XLA_FLAGS names a scheduler already, JAX would start an accelerator, or the backends have
  started. Returns whether it did."""
  flags = os.environ.get("XLA_FLAGS", "")
  if "--xla_cpu_scheduler_type" in flags or accelerator_expected():
    return False
  from jax._src import xla_bridge  # pylint: disable=import-outside-toplevel
  if xla_bridge.backends_are_initialized():
    return False
  os.environ["XLA_FLAGS"] = f"{flags} {SCHEDULER_FLAG}".strip()
  return True


def transformers_without_torch() -> bool:
  """Imports transformers with its torch integration off, where neither is imported yet:
  transformers asks once whether torch is installed (`is_torch_available`, cached for the
  process) and imports it at module level where it is. torch is hidden for that one question,
  so tokenizers and configs load without it, and a later `import torch` (a PyTorch
  checkpoint) still works. Returns whether it did; TORCH_ENV=1 leaves transformers alone."""
  if "transformers" in sys.modules or importlib.util.find_spec("transformers") is None:
    return False
  quiet = "TRANSFORMERS_NO_ADVISORY_WARNINGS" not in os.environ
  with torch_hidden() as hidden:
    if hidden:
      if quiet:  # its import would advise that models need PyTorch: acl-jax's do not
        os.environ["TRANSFORMERS_NO_ADVISORY_WARNINGS"] = "1"
      try:
        from transformers.utils import import_utils  # pylint: disable=import-outside-toplevel
        import transformers  # pylint: disable=import-outside-toplevel,unused-import
        import_utils.is_torch_available()  # cached False from here on
      finally:
        if quiet:
          del os.environ["TRANSFORMERS_NO_ADVISORY_WARNINGS"]
  return hidden


@contextlib.contextmanager
def torch_hidden() -> Iterator[bool]:
  """Inside, `import torch` fails and `find_spec("torch")` is None, for a library that uses
  torch only when it finds it (transformers, tensorboardX); yields whether it hid it (not once
  torch is imported, nor with TORCH_ENV=1)."""
  if os.environ.get(TORCH_ENV) == "1" or "torch" in sys.modules:
    yield False
    return
  sys.modules["torch"] = None
  try:
    yield True
  finally:
    if sys.modules.get("torch", 0) is None:
      del sys.modules["torch"]


@dataclasses.dataclass(frozen=True)
class Heap:
  """What `managed()` set up.

  Attributes:
    kept: whether each CPU step reuses the last one's temp block (`keep_step_memory`).
    malloc_trim: glibc's `malloc_trim`, or None without glibc.
  """
  kept: bool
  malloc_trim: Callable[[int], int] | None

  def trim(self) -> None:
    """Hands the heap's free memory back to the operating system now (a no-op without
    glibc)."""
    if self.malloc_trim is not None:
      self.malloc_trim(0)


@contextlib.contextmanager
def managed() -> Iterator[Heap]:
  """The process's heap tuned for JAX's CPU steps (module docstring), the heap trimmed after
  every XLA compile while inside. Enter it before any JAX computation."""
  transformers_without_torch()
  memory_scheduler()
  kept = keep_step_memory()
  heap = Heap(kept=kept, malloc_trim=getattr(glibc(), "malloc_trim", None))
  if heap.malloc_trim is None:
    yield heap
    return
  import jax  # pylint: disable=import-outside-toplevel

  def after_compile(event, _duration, **_):
    if event == COMPILE_EVENT:
      heap.trim()
  jax.monitoring.register_event_duration_secs_listener(after_compile)
  try:
    yield heap
  finally:
    jax.monitoring.unregister_event_duration_listener(after_compile)
