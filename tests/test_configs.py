"""The CLI shows itself: train.py --help lists the config files and their words, and
--print_config every field with its value and doc; each field is documented once."""
import importlib
import os

import pytest

from configs import common
from tests import helpers

CONFIG_FILES = sorted(f[:-3] for f in os.listdir(os.path.join(helpers.REPO, "configs"))
                      if f.endswith(".py") and f not in ("__init__.py", "common.py"))


def _leaves(c):
  return common._leaf_paths(c)  # pylint: disable=protected-access


@pytest.mark.parametrize("name", CONFIG_FILES)
def test_every_field_of_every_config_has_a_doc(name):
  mod = importlib.import_module(f"configs.{name}")
  c = mod.get_config()
  missing = [p for p in _leaves(c) if not common.FIELD_DOCS.get(p)]
  assert not missing, f"configs/{name}.py: fields without a doc: {missing}"
  assert mod.__doc__.count("python train.py --config configs/") >= 1  # its run command


def test_print_config_shows_values_after_overrides_with_docs():
  c = common.apply_args(common.base_config(), "acl")
  text = common.print_config(c, "# title")
  lines = text.splitlines()
  assert lines[0] == "# title"
  lam = next(ln for ln in lines if ln.startswith("loss.lam "))
  assert "= 0.5" in lam and "# weight of the auxiliary loss" in lam
  assert "# task: what to train on" in text
  # Every leaf once; the top-level fields come before the first section.
  assert sum(ln.split(" = ")[0] in _leaves(c) for ln in lines if " = " in ln) == len(_leaves(c))
  assert lines.index(next(ln for ln in lines if ln.startswith("progress ="))) < lines.index(
      next(ln for ln in lines if ln.startswith("task.name =")))


def test_train_help_lists_configs_and_presets():
  p = helpers.run_py(["train.py", "--help"], timeout=120)
  out = p.stdout
  for name in CONFIG_FILES:
    assert f"configs/{name}.py: " in out
  assert "TASK: cola, sst2, mrpc, qqp, mnli, qnli, rte (default sst2)" in out
  assert "TASK: csv, tsv, jsonl (default csv)" in out and "imdb" in out
  assert "METHOD: ce, scl, acl_embed, acl," in out and "jt, 2st, alt, kd, acl_cl" in out
  assert "python train.py --config configs/glue.py:rte --print_config" in out
  assert "--[no]print_config" in out


def test_train_print_config_exits_without_training(tmp_path):
  wd = tmp_path / "never"
  p = helpers.run_py(["train.py", "--config", "configs/glue.py:rte", "--print_config",
                      "--config.loss.lam=0.3", "--workdir", str(wd)], timeout=120)
  assert p.returncode == 0, p.stderr[-2000:]
  assert p.stdout.startswith("# configs/glue.py:rte: every field")
  assert any(ln.startswith("task.name = 'rte'") and "# a key of acl_jax.data.TASKS" in ln
             for ln in p.stdout.splitlines())
  assert any(ln.startswith("loss.lam = 0.3 ") for ln in p.stdout.splitlines())
  assert not wd.exists()
  # An unknown field is still one line naming the closest ones; --workdir is still needed.
  p = helpers.run_py(["train.py", "--config", "configs/glue.py:rte", "--print_config",
                      "--config.loss.lamda=0.3"], timeout=120)
  assert p.returncode != 0 and "Did you mean 'loss.lam'?" in p.stderr
  assert "Traceback" not in p.stderr
  p = helpers.run_py(["train.py", "--config", "configs/glue.py:rte"], timeout=120)
  assert p.returncode != 0 and "--workdir is required" in p.stderr


def test_gloss_on_a_file_of_ones_own_weighs_its_classes():
  """configs/files.py gives G-Loss (both sigma modes) class-balanced weights; other methods
  keep the unweighted default."""
  from configs import files  # pylint: disable=import-outside-toplevel
  assert files.get_config("csv,gloss").loss.class_weights == "balanced"
  assert files.get_config("tsv,gloss_sqrt,runlocal").loss.class_weights == "balanced"
  assert files.get_config("csv,ce").loss.class_weights == ""
  assert files.get_config("csv,acl").loss.class_weights == ""
