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


def test_max_length_beyond_the_position_table_fails_before_reading_data(tiny_model_dir,
                                                                        tmp_path, monkeypatch):
  """The tiny model has 128 positions: 256-token inputs would index past the table (NaN at
  step 1). The run fails naming both numbers before any data is read."""
  from acl_jax import data as data_lib
  from acl_jax.train import loop

  def no_data(*a, **k):
    raise AssertionError("data was read before the max_length check")
  monkeypatch.setattr(data_lib, "load_task", no_data)
  with pytest.raises(ValueError, match=r"task.max_length=256 .*max_position_embeddings=128"):
    loop.train_and_evaluate(helpers.tiny_config(tiny_model_dir, **{"task.max_length": 256}),
                            str(tmp_path / "run"))


def test_roberta_covers_two_positions_fewer_than_its_table():
  from acl_jax.models.config import EncoderConfig
  assert EncoderConfig(family="roberta", max_position_embeddings=514, pad_token_id=1,
                       hidden_size=32, num_heads=4).max_length == 512
  assert EncoderConfig(max_position_embeddings=512, hidden_size=32, num_heads=4).max_length == 512


def test_unsupported_activation_fails_at_load_naming_the_supported_ones(tiny_model_dir,
                                                                         tmp_path):
  import json
  import shutil
  from acl_jax.models import hf
  folder = tmp_path / "model"
  shutil.copytree(tiny_model_dir, folder)
  cfg = json.loads((folder / "config.json").read_text())
  cfg["hidden_act"] = "swishy"
  (folder / "config.json").write_text(json.dumps(cfg))
  with pytest.raises(ValueError, match=r"'swishy'.*supported: \['gelu', 'gelu_new'"):
    hf.load_pretrained(str(folder), num_labels=2, with_tokenizer=False)
  with pytest.raises(ValueError, match="'swishy'"):  # the early check of train.py's runs too
    hf.check_max_length(str(folder), 32)
