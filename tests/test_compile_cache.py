"""acl_jax.compile_cache: the persistent compilation cache is on by default, per CPU kind, and
can be switched off or moved."""
import os
import subprocess
import sys

from acl_jax import compile_cache, cpuinfo

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(monkeypatch, tmp_path, **set_):
  for k in (compile_cache.ENV, compile_cache.JAX_ENV):
    monkeypatch.delenv(k, raising=False)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  for k, v in set_.items():
    monkeypatch.setenv(k, v)


def test_on_by_default_under_the_user_cache(monkeypatch, tmp_path):
  _env(monkeypatch, tmp_path)
  path = compile_cache.chosen_dir()
  assert path == os.path.join(str(tmp_path / "xdg"), "acl-jax", "xla", compile_cache.host_tag())
  assert compile_cache.host_tag().startswith(cpuinfo.kind() + "_")


def test_switched_off_or_moved(monkeypatch, tmp_path):
  _env(monkeypatch, tmp_path, ACL_JAX_COMPILE_CACHE="0")
  assert compile_cache.chosen_dir() is None
  _env(monkeypatch, tmp_path, ACL_JAX_COMPILE_CACHE=str(tmp_path / "mine"))
  assert compile_cache.chosen_dir() == str(tmp_path / "mine")
  # jax's own variable wins over both (the sweep and the test suite set it).
  _env(monkeypatch, tmp_path, ACL_JAX_COMPILE_CACHE="0", JAX_COMPILATION_CACHE_DIR="/elsewhere")
  assert compile_cache.chosen_dir() == "/elsewhere"


def test_cpu_kinds_never_share_a_folder(monkeypatch):
  """XLA:CPU compiles for the host's ISA and jax's cache key does not name it."""
  avx512 = {"name": "AMD EPYC", "vendor": "AuthenticAMD", "family": "25", "model": "17",
            "isa": ["AVX-512", "AVX2", "FMA"]}
  tags = set()
  for info in (avx512, {**avx512, "isa": ["AVX2", "FMA"]}, {**avx512, "model": "1"}):
    monkeypatch.setattr(cpuinfo, "cpu", lambda info=info: info)
    tags.add(compile_cache.host_tag())
  assert len(tags) == 3


def _run_jit(env: dict) -> subprocess.CompletedProcess:
  """A fresh process that enables the cache as train.py does and compiles one function."""
  code = ("import jax, jax.numpy as jnp\n"
          "from acl_jax import compile_cache\n"
          "hits = []\n"
          "jax.monitoring.register_event_listener(\n"
          "    lambda e, **kw: hits.append(e) if e.endswith('/cache_hits') else None)\n"
          "print(compile_cache.enable())\n"
          "print(jax.config.jax_compilation_cache_dir)\n"
          "print(float(jax.jit(lambda x: jnp.sin(x) @ x)(jnp.ones((8, 8))).sum()))\n"
          "print(len(hits))\n")
  return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                        text=True, timeout=120, check=True)


def test_a_second_process_finds_the_first_ones_compile(tmp_path):
  env = {k: v for k, v in os.environ.items()
         if k not in (compile_cache.ENV, compile_cache.JAX_ENV)}
  env.update(XDG_CACHE_HOME=str(tmp_path / "xdg"), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
  first = _run_jit(env).stdout.split("\n")
  folder = first[0]
  assert folder.startswith(str(tmp_path / "xdg")) and first[1] == folder
  assert first[3] == "0"
  entries = sorted(f for f in os.listdir(folder) if f.endswith("-cache"))
  assert entries, os.listdir(folder)
  second = _run_jit(env).stdout.split("\n")
  assert second[2] == first[2] and int(second[3]) >= 1  # read from the folder
  off = _run_jit({**env, compile_cache.ENV: "0"}).stdout.split("\n")
  assert off[0] == "None" and off[1] in ("None", "") and off[3] == "0"
