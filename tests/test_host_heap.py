"""acl_jax.host_heap: a CPU step reuses its temp block instead of faulting it in afresh, and
the heap is trimmed after compiles."""
import json

import numpy as np
import pytest

from acl_jax import host_heap
from tests import helpers

# A program whose temp block holds three 36 MiB arrays, counted by its minor page faults per
# call once warm. Prints JSON. (Elementwise ops and a scan: XLA:CPU's dot kernels fault in
# their own scratch memory, which no heap setting reaches.)
_PROBE = r"""
import json, os, resource, sys
from acl_jax import host_heap
with host_heap.managed() as heap:
  import jax, jax.numpy as jnp
  f = jax.jit(lambda x: (jnp.cumsum(jnp.sin(x), axis=0) * jnp.cos(x)[::-1]).sum())
  x = jnp.ones((3072, 3072), jnp.float32)
  temp = f.lower(x).compile().memory_analysis().temp_size_in_bytes
  for _ in range(2):
    f(x).block_until_ready()
  faults = []
  for _ in range(5):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    f(x).block_until_ready()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"kept": heap.kept, "temp_pages": temp // os.sysconf("SC_PAGE_SIZE"),
                  "faults": faults}))
"""


def _probe(**env):
  out = helpers.run_py(["-c", _PROBE], timeout=180, **env)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


def _thp_always() -> bool:
  try:
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
      return "[always]" in f.read()
  except OSError:
    return False


@pytest.mark.skipif(host_heap.glibc() is None, reason="needs glibc (mallopt)")
def test_a_warm_step_does_not_fault_its_temp_block_in_again():
  """With the settings, a warm call faults in under a tenth of its temp block's pages (it
  reuses the last call's memory): the median of 5 calls, since a small allocation between
  calls can split the freed block, and the next call then maps a new one. Without them
  (ACL_JAX_KEEP_STEP_MEMORY=0), every call faults in at least half of them again, unless
  the kernel backs every mapping with huge pages anyway (transparent_hugepage=always),
  where that half is not checked."""
  kept = _probe()
  assert kept["kept"] is True
  assert kept["temp_pages"] >= (64 << 20) // 4096, kept  # the probe's block is large
  assert sorted(kept["faults"])[2] < kept["temp_pages"] / 10, kept
  default = _probe(ACL_JAX_KEEP_STEP_MEMORY="0")
  assert default["kept"] is False
  if not _thp_always():
    assert min(default["faults"]) > default["temp_pages"] / 2, default


def test_nothing_changes_once_the_backends_have_started(monkeypatch):
  """Entered after JAX's first computation, it applies no step setting: the dispatch mode
  is fixed by then, and the heap settings alone would not make the block reusable."""
  import jax
  jax.devices()
  calls = []

  class FakeLibc:
    def mallopt(self, *args):
      calls.append(args)
      return 1

    def malloc_trim(self, pad):
      return 0
  monkeypatch.setattr(host_heap, "glibc", FakeLibc)
  monkeypatch.setattr(host_heap, "accelerator_expected", lambda: False)
  with host_heap.managed() as heap:
    assert heap.kept is False
  assert not calls


def test_every_compile_inside_hands_the_compilers_freed_memory_back(monkeypatch):
  """Inside `managed()` the heap is trimmed after each XLA compile, and after it no more.
  The listener keys on jax's compile event by name, so a renamed event, which would keep
  the memory silently, fails here."""
  import jax
  import jax.numpy as jnp
  if host_heap.glibc() is None:
    pytest.skip("no glibc malloc_trim in this C library")
  calls = []
  monkeypatch.setattr(host_heap.Heap, "trim", lambda self: calls.append(self))

  def compile_new():  # a program no cache holds
    token = float(np.random.default_rng().integers(1 << 20))
    jax.jit(lambda x: jnp.sin(x) * token)(jnp.ones(3)).block_until_ready()
  with host_heap.managed() as heap:
    compile_new()
  assert calls and all(c is heap for c in calls)
  calls.clear()
  compile_new()
  assert not calls


@pytest.mark.parametrize("platforms,expected", [("cpu", False), ("cuda,cpu", True),
                                                ("tpu", True), (" cpu , cuda", False)])
def test_accelerator_expected_follows_jax_platforms(monkeypatch, platforms, expected):
  monkeypatch.setenv("JAX_PLATFORMS", platforms)
  assert host_heap.accelerator_expected() is expected


_FOOTPRINT = """
import os, sys
from acl_jax import host_heap
with host_heap.managed():
  from transformers import AutoTokenizer
  with host_heap.torch_hidden():
    import tensorboardX
  print("torch" in sys.modules, os.environ.get("XLA_FLAGS", ""))
  import torch  # a PyTorch checkpoint still loads
  print(torch.ones(1).item())
"""


@pytest.mark.parametrize("keep_torch", ["", "1"])
def test_the_tools_keep_torch_out_and_ask_for_the_memory_scheduler(keep_torch):
  """Entering managed() keeps transformers and tensorboardX from importing torch (about 200
  MiB resident), and asks XLA:CPU for the memory-optimized scheduler; torch still imports on
  demand. ACL_JAX_TRANSFORMERS_TORCH=1 leaves transformers to import it."""
  pytest.importorskip("torch")
  proc = helpers.run_py(["-c", _FOOTPRINT], ACL_JAX_TRANSFORMERS_TORCH=keep_torch,
                        JAX_PLATFORMS="cpu")
  assert proc.returncode == 0, proc.stderr[-2000:]
  out = proc.stdout.split("\n")
  torch_in, flags = out[0].split(" ", 1)
  assert torch_in == str(bool(keep_torch)) and flags.endswith(host_heap.SCHEDULER_FLAG), out
  assert out[1] == "1.0"
