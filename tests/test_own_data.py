"""Bring your own data: configs/files.py over CSV/TSV/JSONL files, configs/hub.py over any
datasets dataset (tested offline on local folders, through the calls that run online)."""
import json
import time

import datasets
import pytest

from acl_jax import data
from acl_jax.data import readers, tasks
from acl_jax.errors import UserError
from configs import files as files_config
from configs import hub as hub_config

CLASSES = ["neg", "pos"]


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch):
  """load_dataset writes Arrow caches; keep them out of the user's cache."""
  monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


def _dataset_dict(n_train=20):
  label = datasets.ClassLabel(names=CLASSES)
  feats = datasets.Features({"review": datasets.Value("string"), "label": label})

  def split(n, offset, unlabelled=False):
    return datasets.Dataset.from_dict(
        {"review": [f"review {offset + i}" for i in range(n)],
         "label": [-1 if unlabelled else i % 2 for i in range(n)]}, features=feats)
  return datasets.DatasetDict(train=split(n_train, 0), validation=split(4, 100),
                              test=split(3, 200, unlabelled=True))


def test_hub_task_reads_a_saved_dataset_dict(tmp_path, caplog):
  folder = str(tmp_path / "saved")
  _dataset_dict().save_to_disk(folder)
  td = data.load_task("hub", hub_id=folder, text_column="review",
                      hub_splits={"train": "train", "dev": "validation", "test": "test"})
  assert td.label_names == CLASSES  # the ClassLabel's names and order
  assert td.splits["dev"][:] == {"text": [f"review {100 + i}" for i in range(4)],
                                 "label": [0, 1, 0, 1]}
  assert len(td.splits["train"]) == 20
  # ClassLabel -1 (unlabelled, as GLUE's test splits) is an empty label: dropped and counted.
  assert len(td.splits["test"]) == 0 and td.num_dropped["test"] == 3
  # A single saved Dataset is the train split; dev is then held out of it.
  single = str(tmp_path / "single")
  _dataset_dict()["train"].save_to_disk(single)
  td = data.load_task("hub", hub_id=single, text_column="review",
                      hub_splits={"train": "train", "dev": "", "test": ""})
  assert (len(td.splits["train"]), len(td.splits["dev"])) == (18, 2)


def test_hub_task_reads_a_folder_of_data_files_through_load_dataset(tmp_path):
  """A folder of CSV files goes through datasets.load_dataset, the online call."""
  folder = tmp_path / "files"
  folder.mkdir()
  for split, n in (("train", 20), ("test", 4)):
    rows = ["premise,hypothesis,verdict"] + [f"p {split} {i},h {i},{['yes', 'no'][i % 2]}"
                                             for i in range(n)]
    (folder / f"{split}.csv").write_text("\n".join(rows) + "\n")
  td = data.load_task("hub", hub_id=str(folder), text_column="premise",
                      text_pair_column="hypothesis", label_column="verdict",
                      hub_splits={"train": "train", "dev": "", "test": "test"}, val_fraction=0.25)
  assert td.label_names == ["no", "yes"]  # plain string labels: sorted
  assert (len(td.splits["train"]), len(td.splits["dev"]), len(td.splits["test"])) == (15, 5, 4)
  assert td.splits["test"][0] == {"text": "p test 0", "text_pair": "h 0", "label": 1}


def test_hub_task_errors_name_the_fix(tmp_path, monkeypatch):
  folder = str(tmp_path / "saved")
  _dataset_dict().save_to_disk(folder)
  with pytest.raises(ValueError, match=r"no split 'dev'.*'test', 'train', 'validation'.*"
                                       r"task.splits.dev=NAME"):
    data.load_task("hub", hub_id=folder, text_column="review",
                   hub_splits={"train": "train", "dev": "dev"})
  with pytest.raises(ValueError, match=r"no column\(s\) \['text'\].*'review'"):
    data.load_task("hub", hub_id=folder, hub_splits={"train": "train"})
  with pytest.raises(ValueError, match="set --config.task.hub_id"):
    data.load_task("hub")
  # Offline, a hub id fails at once, before datasets touches the network.
  monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
  called = []
  monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: called.append(a))
  start = time.time()
  with pytest.raises(UserError, match=r"'stanfordnlp/imdb'.*offline.*save_to_disk"):
    data.load_task("hub", hub_id="stanfordnlp/imdb")
  assert not called and time.time() - start < 5


def test_hub_config_presets_and_build(tmp_path, tiny_model_dir):
  c = hub_config.get_config("imdb,acl,runlocal")
  assert (c.task.name, c.task.hub_id, c.loss.name) == ("hub", "stanfordnlp/imdb", "acl_embed")
  assert dict(c.task.splits) == {"train": "train", "dev": "", "test": "test"}
  assert hub_config.get_config("ce").task.hub_id == ""  # no preset: the fields say the dataset
  # The config fields reach the loader (train.py's path up to the first step).
  from acl_jax.train import setup as setup_lib
  folder = str(tmp_path / "saved")
  _dataset_dict().save_to_disk(folder)
  c = hub_config.get_config("runlocal")
  c.unlock()
  c.task.update(hub_id=folder, text_column="review")
  c.model.name = tiny_model_dir
  setup = setup_lib.build(c)
  assert setup.task.label_names == CLASSES and sorted(setup.tok) == ["dev", "test", "train"]


def _rows(path, fmt, rows):
  if fmt == "jsonl":
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  else:
    sep = "," if fmt == "csv" else "\t"
    path.write_text("\n".join([sep.join(rows[0])] + [sep.join(r.values()) for r in rows]) + "\n")


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl"])
def test_files_config_reads_each_format(tmp_path, fmt):
  rows = [{"review": f"text {i}", "stars": ["1", "5"][i % 2]} for i in range(20)]
  _rows(tmp_path / f"train.{fmt}", fmt, rows)
  c = files_config.get_config(f"{fmt},acl")
  assert (c.task.name, c.loss.name) == (fmt, "acl_embed")
  td = data.load_task(c.task.name, str(tmp_path), files={"train": f"train.{fmt}"},
                      text_column="review", label_column="stars")
  assert td.label_names == ["1", "5"] and len(td.splits["dev"]) == 2


def test_files_config_defaults_to_csv_and_names_a_mismatched_format(tmp_path):
  assert files_config.get_config().task.name == "csv"
  assert files_config.get_config("acl,runlocal").task.name == "csv"  # a method, not a format
  assert files_config.TASKS == readers.GENERIC_FORMATS
  _rows(tmp_path / "train.tsv", "tsv", [{"text": "a", "label": "x"}, {"text": "b", "label": "y"}])
  with pytest.raises(ValueError, match=r"train.tsv is a tsv file.*configs/files.py:tsv"):
    data.load_task("csv", files={"train": str(tmp_path / "train.tsv")})


def test_input_columns_of_a_run():
  assert tasks.input_columns("rte") == [("sentence1", "sentence2")]
  assert tasks.input_columns("mrpc") == [("sentence1", "sentence2"), ("#1 String", "#2 String")]
  assert tasks.input_columns("mnli") == [("premise", "hypothesis"), ("sentence1", "sentence2")]
  assert tasks.input_columns("cola") == [("sentence",)]  # its TSV has no header
  assert tasks.input_columns("quickstart") == [("text",)]
  assert tasks.input_columns("csv", "review", "") == [("review",)]
  assert tasks.input_columns("hub", "q", "a") == [("q", "a")]


def test_numeric_labels_are_classes_only_when_spelt_one_way_and_repeated(tmp_path):
  """Labels inferred from the data: a number spelt two ways across a train and a dev file is
  named with its lines in each; a hub dataset's float column is a regression target, named by
  its split; numbers spelt one way that repeat (0.5, 1.0, 1.5) are classes."""
  _rows(tmp_path / "train.csv", "csv", [{"text": f"t {i}", "label": str(i % 2)}
                                        for i in range(10)])
  _rows(tmp_path / "dev.csv", "csv", [{"text": "d 0", "label": "0"},
                                      {"text": "d 1", "label": "+1"}])
  with pytest.raises(UserError, match=r"Labels '1' and '\+1' are one number spelt two ways.*"
                     r"'1' on .*train.csv lines 3, 5, 7, \.\.\.; '\+1' on .*dev.csv line 3\."):
    data.load_task("csv", str(tmp_path), files={"train": "train.csv", "dev": "dev.csv"})
  folder = str(tmp_path / "stsb")
  datasets.Dataset.from_dict({"text": [f"s {i}" for i in range(40)],
                              "label": [i / 8 for i in range(40)]}).save_to_disk(folder)
  with pytest.raises(UserError, match=r"split 'train': the labels are real numbers .*40 "
                     r"distinct values in 40 rows\), so this is a regression file"):
    data.load_task("hub", hub_id=folder, hub_splits={"train": "train", "dev": ""})
  _rows(tmp_path / "half.csv", "csv", [{"text": f"t {i}", "label": ["0.5", "1.0", "1.5"][i % 3]}
                                       for i in range(30)])
  td = data.load_task("csv", str(tmp_path), files={"train": "half.csv"})
  assert td.label_names == ["0.5", "1.0", "1.5"]
