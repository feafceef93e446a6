"""Faults and bad input: each fails early with one clear message, or is recovered from."""
import pytest

from tests import helpers


def test_unknown_config_field_is_one_line_with_the_closest_names():
  p = helpers.run_py(["train.py", "--config", "configs/quickstart.py", "--workdir", "/tmp/x",
                      "--config.loss.lamda=0.3"])
  lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
  assert p.returncode != 0 and len(lines) == 1, p.stderr[-3000:]
  assert "Unknown config field 'loss.lamda'" in lines[0]
  assert "Did you mean 'loss.lam'?" in lines[0] and "Fields of section 'loss': anchors," in lines[0]


@pytest.mark.parametrize("path,want", [
    ("los.lam", "Did you mean 'loss'? Fields of the top level: batch_size,"),
    ("lr", "Did you mean 'optim.lr'?"),  # a field of that name in another section
    ("optim.learning_rate", "Fields of section 'optim': clip_norm, head_lr_mult, lr,"),
    ("multi_exit.strategi", "Did you mean 'multi_exit.strategy'?")])
def test_unknown_config_field_message(path, want):
  from configs import common
  msg = common.unknown_field(common.base_config(), path)
  assert msg.startswith(f"Unknown config field {path!r}.") and want in msg, msg
  assert common.unknown_field(common.base_config(), "loss.lam") is None
