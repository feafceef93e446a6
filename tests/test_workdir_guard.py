"""A workdir never describes weights it did not train: one writer at a time, resumes on the
data the run started with, and no empty folder left by a run that failed to start."""
import json
import os

import pytest

from tests import helpers


def _csv_config(model_dir, folder, **over):
  """The tiny model on a CSV task of 48 train and 16 dev rows written under `folder`."""
  os.makedirs(folder, exist_ok=True)
  for name, n in (("train.csv", 48), ("dev.csv", 16)):
    path = os.path.join(folder, name)
    if not os.path.exists(path):
      with open(path, "w") as f:
        f.write("text,label\n" + "".join(
            f"review number {i} is {'good' if i % 2 else 'bad'},{'pos' if i % 2 else 'neg'}\n"
            for i in range(n)))
  c = helpers.tiny_config(model_dir, **over)
  c.task.name = "csv"
  c.task.train_file = os.path.join(folder, "train.csv")
  c.task.dev_file = os.path.join(folder, "dev.csv")
  c.task.test_file = ""
  c.eval_splits = "dev"
  return c


def test_a_second_writer_is_refused_naming_the_holder(tiny_model_dir, tmp_path):
  from acl_jax import provenance
  from acl_jax.train import loop
  wd = str(tmp_path / "run")
  os.makedirs(wd)
  with provenance.workdir_lock(wd):
    with pytest.raises(RuntimeError, match=f"another process \\(pid {os.getpid()}\\)"):
      loop.train_and_evaluate(helpers.tiny_config(tiny_model_dir), wd)
  assert os.listdir(wd) == [provenance.LOCK]  # nothing of the refused run was written
  with provenance.workdir_lock(wd):  # released with its holder
    pass


def test_a_run_that_fails_to_start_leaves_no_folder(tmp_path):
  from acl_jax.train import loop
  bad_config = str(tmp_path / "a")
  with pytest.raises(ValueError, match="batch_size must be >= 1"):
    loop.train_and_evaluate(helpers.tiny_config("no-such-org/no-such-model", batch_size=0),
                            bad_config)
  no_model = str(tmp_path / "b")
  with pytest.raises(Exception):  # noqa: B017  (the hub is offline: the model is missing)
    loop.train_and_evaluate(helpers.tiny_config(str(tmp_path / "no-model")), no_model)
  assert not os.path.exists(bad_config) and not os.path.exists(no_model)
  kept = tmp_path / "c"  # a folder the user made is theirs: it stays
  kept.mkdir()
  with pytest.raises(ValueError):
    loop.train_and_evaluate(helpers.tiny_config("x", batch_size=0), str(kept))
  assert kept.is_dir()


def test_resume_on_edited_data_is_refused(tiny_model_dir, tmp_path, caplog):
  """The data record names each split's counts and hash; a resume on other data fails before
  it trains or rewrites results.json."""
  from acl_jax.train import loop
  data, wd = str(tmp_path / "data"), str(tmp_path / "run")
  origin = {"command": ["python", "train.py", "--config", "configs/files.py"],
            "config": "configs/files.py"}
  res = loop.train_and_evaluate(_csv_config(tiny_model_dir, data, num_steps=3), wd, origin)
  # The workdir explains itself: where it came from, and its log lines.
  from acl_jax import provenance
  assert provenance.run_origin(wd) == origin
  assert provenance.ORIGIN not in provenance.run_config(wd)
  log = open(os.path.join(wd, "train.log")).read()
  assert "48 train examples" in log and "step 3: dev" in log
  rec = res["train"]["data"]
  assert rec["train"]["examples"] == 48 and rec["dev"]["examples"] == 16
  assert rec["train"]["dropped_empty"] == 0 and not rec["train"]["subsampled"]
  assert json.load(open(os.path.join(wd, "data.json"))) == rec
  before = open(os.path.join(wd, "results.json")).read()
  lines = open(os.path.join(data, "train.csv")).read().splitlines()
  lines[5] = lines[5].replace(",pos", ",neg") if ",pos" in lines[5] else (
      lines[5].replace(",neg", ",pos"))
  open(os.path.join(data, "train.csv"), "w").write("\n".join(lines) + "\n")
  with pytest.raises(ValueError, match=r"trained on other data: train: 48 examples now"):
    loop.train_and_evaluate(_csv_config(tiny_model_dir, data, num_steps=6), wd)
  assert open(os.path.join(wd, "results.json")).read() == before
  # Evaluation still scores it, and says the data is not what the run trained on.
  from acl_jax import evaluate
  evaluate.evaluate_workdir(wd, ["dev"])
  assert "differs from what the run trained and selected on: train: 48 examples" in caplog.text
