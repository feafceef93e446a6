"""JAX's persistent compilation cache, on by default for train.py, eval.py and predict.py.

A run compiles its train step for every batch shape, and its eval step too: on 2 CPU cores the
MiniLM-L6 CE step alone takes seconds to compile (BENCHMARKS.md, "Compile time and the
persistent cache"), and BERT-base's tens of seconds on a GPU. The same command run again, a
resume, or a second seed compiles the very same programs; with the cache they are read from
disk instead. A cached executable is the program a fresh compile would give (jax keys an entry
by the computation, the jax and XLA versions, the compile options, XLA_FLAGS and the devices),
so results do not change.

`enable()` picks the folder, in this order:
- `JAX_COMPILATION_CACHE_DIR` in the environment: jax reads it itself, and it is left alone
  (the sweep and the test suite set it for their runs);
- `ACL_JAX_COMPILE_CACHE=0`: no cache;
- `ACL_JAX_COMPILE_CACHE=PATH`: that folder;
- otherwise `$XDG_CACHE_HOME/acl-jax/xla/<host>` (`~/.cache` without XDG_CACHE_HOME).

Why it is safe by default:
- `<host>` names the CPU's vendor, family and model and a hash of its vector ISA
  (`acl_jax.cpuinfo`): XLA:CPU compiles for the host's instruction set, and jax's key does not
  name it, so a home folder shared by machines of different CPU kinds must not hand an
  AVX-512 program to an AVX2-only CPU.
- The folder is capped at `MAX_BYTES`, least recently used entries evicted first. The cap
  makes jax take a file lock around every read and write, so runs sharing the folder (a
  sweep's workers) never read a half-written entry.
- A folder that cannot be made leaves the cache off, with a warning: the run goes on.
"""
import hashlib
import importlib.util
import logging
import os

from acl_jax import cpuinfo

ENV = "ACL_JAX_COMPILE_CACHE"
JAX_ENV = "JAX_COMPILATION_CACHE_DIR"
MAX_BYTES = 4 * 2 ** 30

log = logging.getLogger(__name__)


def host_tag() -> str:
  """This host's CPU kind and ISA as a folder name, e.g. "amd_f25m17_3f2a9c1d"."""
  info = cpuinfo.cpu()
  isa = hashlib.sha256(" ".join(sorted(info.get("isa") or [])).encode()).hexdigest()[:8]
  return f"{cpuinfo.kind(info)}_{isa}"


def default_dir() -> str:
  """`$XDG_CACHE_HOME/acl-jax/xla/<host_tag()>`, `~/.cache` without XDG_CACHE_HOME."""
  root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(root, "acl-jax", "xla", host_tag())


def chosen_dir() -> str | None:
  """The folder `enable()` would use (module docstring), None for no cache."""
  if os.environ.get(JAX_ENV):
    return os.environ[JAX_ENV]
  setting = os.environ.get(ENV, "").strip()
  if setting == "0":
    return None
  return os.path.abspath(os.path.expanduser(setting)) if setting else default_dir()


def enable() -> str | None:
  """Turns the persistent compilation cache on for this process (module docstring); call it
  before the first compile. Returns the folder, or None when the cache stays off."""
  import jax  # pylint: disable=import-outside-toplevel
  path = chosen_dir()
  if path is None or os.environ.get(JAX_ENV):
    return path
  try:
    os.makedirs(path, exist_ok=True)
  except OSError as e:
    log.warning("No compilation cache: %s cannot be made (%s). Set %s=0 to silence this.",
                path, e.strerror, ENV)
    return None
  jax.config.update("jax_compilation_cache_dir", path)
  if importlib.util.find_spec("filelock") is not None:  # jax's eviction and locks need it
    jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
  return path
