"""Shared pytest set-up: offline hub, CPU only, slow tests opt-in."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402


def pytest_addoption(parser):
  parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


def pytest_configure(config):
  config.addinivalue_line("markers", "slow: long test, skipped unless --runslow is given")


def pytest_collection_modifyitems(config, items):
  if config.getoption("--runslow"):
    return
  skip_slow = pytest.mark.skip(reason="slow: pass --runslow to run")
  for item in items:
    if "slow" in item.keywords:
      item.add_marker(skip_slow)
