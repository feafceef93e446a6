"""predict.py on a trained workdir: label names and probabilities per input row, the eval
step's predictions, per-example early exit; a run that kept best/ alone (keep_train_state=False)
still evaluates, exports and predicts; eval.py is quiet and names its classes; the learning
rate is in the train metrics."""
import dataclasses
import io
import json
import os

import numpy as np
import pytest

from acl_jax import predict, provenance, run as run_lib
from acl_jax.errors import FileError
from tests import helpers, numerics

WORDS = ["red", "blue", "green", "dark", "light", "small", "large", "old", "new", "round"]


def _rows(n, offset):
  """Premise-hypothesis pairs: "yes" when the hypothesis repeats the premise's first word."""
  rows = []
  for i in range(offset, offset + n):
    a, b = WORDS[i % 10], WORDS[(i * 3 + 1) % 10]
    same = i % 2 == 0
    rows.append({"premise": f"the {a} box is on the {b} table",
                 "hypothesis": f"a {a if same else b} box", "verdict": "yes" if same else "no"})
  return rows


def _csv(path, rows):
  keys = list(rows[0])
  path.write_text("\n".join([",".join(keys)] + [",".join(r[k] for k in keys) for r in rows])
                  + "\n")
  return str(path)


@pytest.fixture(scope="module")
def run_dir(tiny_model_dir, tmp_path_factory):
  """A multi-exit (JT) pair-task run from CSV files that keeps best/ alone."""
  root = tmp_path_factory.mktemp("predict")
  _csv(root / "train.csv", _rows(64, 0))
  dev = _csv(root / "dev.csv", _rows(24, 100))
  wd = str(root / "run")
  p = helpers.run_py(["train.py", "--config", "configs/files.py:csv,jt,runlocal",
                      "--workdir", wd, f"--config.model.name={tiny_model_dir}",
                      f"--config.task.train_file={root / 'train.csv'}",
                      f"--config.task.dev_file={dev}", "--config.task.text_column=premise",
                      "--config.task.text_pair_column=hypothesis",
                      "--config.task.label_column=verdict", "--config.model.head=bert_pooler",
                      "--config.checkpoint.keep_train_state=False", "--config.progress=False"],
                     timeout=600)
  assert p.returncode == 0, p.stderr[-3000:]
  return wd, dev


@pytest.fixture(scope="module")
def run(run_dir):
  return run_lib.open(run_dir[0])


def test_run_keeps_best_alone_and_logs_the_learning_rate(run_dir, run):
  wd, _ = run_dir
  assert not os.path.exists(os.path.join(wd, "ckpt")) and provenance.checkpoint_steps(wd, "best")
  assert provenance.read_labels(wd) == ["no", "yes"]
  from acl_jax.train import optim
  cfg = provenance.run_config(wd)
  groups = optim.lr_groups(lr=cfg["optim"]["lr"], total_steps=6,
                           warmup_ratio=cfg["optim"]["warmup_ratio"], strategy="jt")
  train = [r for r in run.history if r["kind"] == "train"]
  assert [r["step"] for r in train] == [1, 2, 3, 4, 5, 6]
  for r in train:  # the update that made step s used the schedule at s - 1
    want = optim.learning_rates(groups, r["step"] - 1)
    assert {k: r[k] for k in want} == pytest.approx(want)
  assert max(r["lr"] for r in train) == pytest.approx(cfg["optim"]["lr"])
  # Training on in a run without its train state is refused, naming why.
  from acl_jax.train import loop
  from configs import files
  with pytest.raises(ValueError, match="no checkpoint to resume from.*keep_train_state=False"):
    loop.train_and_evaluate(files.get_config("csv,jt,runlocal"), wd)


def test_predict_cli_gives_the_evaluated_predictions(run_dir, tmp_path):
  wd, dev = run_dir
  out = tmp_path / "preds.jsonl"
  p = helpers.run_py(["predict.py", "--workdir", wd, "--input", dev, "--output", str(out),
                      "--batch_size", "8"], timeout=300)
  assert p.returncode == 0, p.stderr[-3000:]
  preds = [json.loads(x) for x in out.read_text().splitlines()]
  rows = _rows(24, 100)
  assert len(preds) == 24
  assert [(r["premise"], r["hypothesis"]) for r in preds] == [
      (r["premise"], r["hypothesis"]) for r in rows]  # input order
  for r in preds:
    assert list(r) == ["premise", "hypothesis", "verdict", "label", "probs"]  # input passes through
    assert list(r["probs"]) == ["no", "yes"] and sum(r["probs"].values()) == pytest.approx(1)
    assert r["label"] == max(r["probs"], key=r["probs"].get)
  assert [p["verdict"] for p in preds] == [r["verdict"] for r in rows]
  acc = np.mean([p["label"] == p["verdict"] for p in preds])
  results = json.load(open(os.path.join(wd, "results.json")))
  assert acc == pytest.approx(results["dev"]["accuracy"])  # the best checkpoint, on dev
  assert "wrote 24 predictions" in p.stderr
  assert not os.path.exists(os.path.join(wd, "ckpt"))  # reading made no empty ckpt/


def test_early_exit_from_stdin_jsonl_writes_exit_layers(run, monkeypatch, capsys):
  lines = "".join(json.dumps({"premise": r["premise"], "hypothesis": r["hypothesis"]}) + "\n"
                  for r in _rows(5, 7))
  monkeypatch.setattr("sys.stdin", io.StringIO(lines))
  n = predict.predict_file(run, "-", "-", policy="confidence", threshold=0.5)
  preds = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
  assert n == len(preds) == 5 and set(preds[0]) == {"premise", "hypothesis", "label", "probs",
                                                    "exit_layer"}
  # Confidence >= 0.5 holds for any two-class softmax: every example leaves at layer 1.
  assert [r["exit_layer"] for r in preds] == [1] * 5


def test_header_less_file_by_position_or_names_gives_the_same_predictions(run_dir, run,
                                                                          tmp_path):
  wd, _ = run_dir
  rows = _rows(24, 100)
  # AG News' layout: no header row, the class first, commas inside quoted texts.
  body = "".join(f'{r["verdict"]},"{r["premise"]}, indeed",{r["hypothesis"]}\n' for r in rows)
  bare = tmp_path / "bare.csv"
  bare.write_text(body)
  p = helpers.run_py(["predict.py", "--workdir", wd, "--input", str(bare), "--output",
                      str(tmp_path / "by_position.jsonl"), "--no_header", "--text_column", "1",
                      "--text_pair_column", "2"], timeout=300)
  assert p.returncode == 0, p.stderr[-3000:]
  by_position = [json.loads(x) for x in (tmp_path / "by_position.jsonl").read_text().splitlines()]
  assert [list(r) for r in by_position] == [["0", "1", "2", "label", "probs"]] * 24
  assert [(r["0"], r["1"], r["2"]) for r in by_position] == [
      (r["verdict"], r["premise"] + ", indeed", r["hypothesis"]) for r in rows]
  # --columns names them: the run's own columns are found, or picked by name or position.
  names = predict.Layout(names=["verdict", "premise", "hypothesis"])
  for layout in (names, dataclasses.replace(names, text_column="premise",
                                            text_pair_column="hypothesis"),
                 predict.Layout(text_column=1, text_pair_column="2", header=False)):
    got = _read(_predict(run, str(bare), tmp_path / "p.jsonl", layout=layout))
    assert [r["probs"] for r in got] == [r["probs"] for r in by_position], layout
    if layout.names:
      assert [list(r)[:3] for r in got] == [layout.names] * 24
      assert [r["verdict"] for r in got] == [r["verdict"] for r in rows]
  # The same texts under a header: positions pick the header's columns.
  headed = tmp_path / "headed.csv"
  headed.write_text("class,premise,hypothesis\n" + body)
  got = _read(_predict(run, str(headed), tmp_path / "h.jsonl",
                       layout=predict.Layout(text_column=1, text_pair_column=2)))
  assert [r["probs"] for r in got] == [r["probs"] for r in by_position]


def _predict(run, path, out, **kwargs):
  """predict_file's output lines."""
  assert predict.predict_file(run, path, str(out), **kwargs) > 0
  return out.read_text().splitlines()


def _read(lines):
  return [json.loads(x) for x in lines]


def test_every_input_field_passes_through_beside_the_predictions(run, tmp_path, monkeypatch,
                                                                capsys):
  records = [{"id": 7 + i, "premise": r["premise"], "hypothesis": r["hypothesis"],
              "label": r["verdict"], "input.label": "kept", "probs": None,
              "exit_layer": [i], "meta": {"source": "test", "n": i}}
             for i, r in enumerate(_rows(5, 7))]
  monkeypatch.setattr("sys.stdin", io.StringIO("".join(json.dumps(r) + "\n" for r in records)))
  assert predict.predict_file(run, "-", "-", policy="confidence", threshold=0.5) == 5
  preds = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
  for rec, pred in zip(records, preds):
    # Input fields first, as read (numbers, lists and objects too); those named like an output
    # key get "input." before their name, as often as it takes to be unique.
    assert list(pred) == ["id", "premise", "hypothesis", "input.input.label", "input.label",
                          "input.probs", "input.exit_layer", "meta", "label", "probs",
                          "exit_layer"]
    assert (pred["id"], pred["meta"], pred["input.exit_layer"]) == (
        rec["id"], rec["meta"], rec["exit_layer"])
    assert (pred["input.input.label"], pred["input.label"], pred["input.probs"]) == (
        rec["label"], "kept", None)
    assert pred["label"] in ("no", "yes") and pred["exit_layer"] == 1
    assert list(pred["probs"]) == ["no", "yes"]
  # A CSV file's extra columns come back as strings, in the header's order.
  csv_file = tmp_path / "in.csv"
  csv_file.write_text("id,hypothesis,label,premise,note\n"
                      + "".join(f"0{i},{r['hypothesis']},{r['verdict']},{r['premise']},\n"
                                for i, r in enumerate(_rows(3, 0))))
  got = _read(_predict(run, str(csv_file), tmp_path / "out.jsonl"))
  assert [list(r) for r in got] == [["id", "hypothesis", "input.label", "premise", "note",
                                     "label", "probs"]] * 3
  assert [(r["id"], r["note"], r["input.label"]) for r in got] == [
      ("00", "", "yes"), ("01", "", "no"), ("02", "", "yes")]


def test_inputs_cut_to_max_length_are_counted_in_one_warning(run, caplog):
  import logging
  n = int(run.config.task.max_length)
  # "red" and "blue" are one token each; a pair has 3 special tokens ([CLS] a [SEP] b [SEP]).
  exact = {"premise": " ".join(["red"] * (n - 4)), "hypothesis": "blue"}  # n tokens: whole
  over = {"premise": " ".join(["red"] * (n - 3)), "hypothesis": "blue"}  # n + 1: cut
  huge = {"premise": " ".join(["red"] * 60_000), "hypothesis": "blue"}
  short = {"premise": "the red box", "hypothesis": "a box"}
  records = [short, exact, over, short, huge]
  cols = ("premise", "hypothesis")
  for pred, policy in ((predict.Predictor(run), None),
                       (predict.Predictor(run, packed=False), None),
                       (predict.Predictor(run), "entropy")):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="acl_jax.predict"):
      out = list(pred.predict_records(records, cols, policy, 0.1 if policy else None, chunk=2))
    assert len(out) == 5
    warnings = [r.getMessage() for r in caplog.records if r.name == "acl_jax.predict"]
    assert warnings == [f"2 of 5 inputs were longer than the run's max_length of {n} tokens "
                        "and were cut to it, as in training."], (pred.packed, policy)
  caplog.clear()
  with caplog.at_level(logging.WARNING, logger="acl_jax.predict"):
    list(predict.Predictor(run).predict_records([short, exact], cols))
  assert not [r for r in caplog.records if r.name == "acl_jax.predict"]


def test_output_into_a_missing_folder_fails_before_predicting(run, run_dir, tmp_path):
  _, dev = run_dir
  out = tmp_path / "missing" / "preds.jsonl"
  with pytest.raises(FileError, match=r"--output .*missing/preds.jsonl: the folder "
                                      r".*missing does not exist; create it first") as e:
    predict.predict_file(run, dev, str(out))
  assert ".tmp" not in str(e.value)
  with pytest.raises(FileError, match="is a folder; name a file in it"):
    predict.predict_file(run, dev, str(tmp_path))
  assert os.listdir(tmp_path) == []


def test_header_less_and_positional_columns_are_read_or_refused_by_name(tmp_path):
  alts = [("text",)]
  bare = tmp_path / "ag.csv"
  bare.write_text('3,"Wall St. Bears, again",Short sellers\n\n4,Carlyle,"Private, equity"\n')
  records, cols = predict.read_inputs(str(bare), "auto", alts, predict.Layout(2, header=False))
  assert cols == ("2",) and list(records) == [
      {"0": "3", "1": "Wall St. Bears, again", "2": "Short sellers"},
      {"0": "4", "1": "Carlyle", "2": "Private, equity"}]  # the blank line is no row
  records, cols = predict.read_inputs(str(bare), "auto", alts,
                                      predict.Layout(names=["class", "title", "text"]))
  assert cols == ("text",) and [r["class"] for r in records] == ["3", "4"]
  # Without a layout, a header-less file's first row is no header: the message names the flags.
  with pytest.raises(ValueError, match=r"has columns \['3', 'Wall St. Bears, again', 'Short "
                                       r"sellers'\]; .* --text_column .* --no_header"):
    predict.read_inputs(str(bare), "auto", alts)
  for layout, message in (
      (predict.Layout(3, header=False), r"--text_column 3 is out of range: .*ag.csv has 3 "
                                        r"columns, at positions 0 to 2"),
      (predict.Layout("title", header=False), r"--text_column 'title' is not a column of "
                                              r".*ag.csv; its columns are \['0', '1', '2'\]"),
      (predict.Layout(header=False), r"--text_column \(a name, or a 0-based position\)\. "),
      (predict.Layout(names=["class", "text"]), r"line 1 has 3 fields where --columns has 2"),
      (predict.Layout(names=["a", "text", "a"]), r"names the column\(s\) \['a'\] more than once"),
      (predict.Layout(None, "2", header=False), "--text_pair_column comes with --text_column"),
      (predict.Layout(1, 2, header=False), "classifies single texts"),
  ):
    with pytest.raises(ValueError, match=message):
      records, _ = predict.read_inputs(str(bare), "auto", alts, layout)
      list(records)
  with pytest.raises(ValueError, match="classifies text pairs"):
    predict.read_inputs(str(bare), "auto", [("a", "b")], predict.Layout(1, header=False))
  jl = tmp_path / "x.jsonl"
  jl.write_text('{"id": 1, "body": "a"}\n')
  with pytest.raises(ValueError, match="JSONL, whose fields go by name"):
    predict.read_inputs(str(jl), "auto", alts, predict.Layout(1))
  with pytest.raises(ValueError, match="--no_header and --columns describe CSV or TSV"):
    predict.read_inputs(str(jl), "auto", alts, predict.Layout("body", header=False))
  records, cols = predict.read_inputs(str(jl), "auto", alts, predict.Layout("body"))
  assert cols == ("body",) and list(records) == [{"id": 1, "body": "a"}]
  # A row whose text holds an unquoted separator is refused, naming its line.
  tsv = tmp_path / "x.tsv"
  tsv.write_text("id\ttext\n1\tfine\n2\ta\ttab\n")
  records, _ = predict.read_inputs(str(tsv), "auto", alts)
  with pytest.raises(ValueError, match=r"x.tsv line 3 has 3 fields where the header has 2"):
    list(records)


def test_early_exit_matches_the_full_forward_reference(run):
  from acl_jax.exits import policies
  pred = predict.Predictor(run, batch_size=4)
  rows = _rows(10, 40)
  texts, pairs = [r["premise"] for r in rows], [r["hypothesis"] for r in rows]
  full = pred.logits(texts, pairs)  # [exits, n, K]
  assert full.shape == (2, 10, 2)
  for policy, t in (("entropy", 0.0), ("entropy", 10.0), ("confidence", 1.0),
                    ("patience", 1)):
    layer, logits = pred.early_exit(texts, pairs, policy, t)
    ref_layer, _ = policies.select_exit(full, policy, t)
    np.testing.assert_array_equal(layer, np.asarray(ref_layer), err_msg=f"{policy} {t}")
    np.testing.assert_allclose(logits, full[layer - 1, np.arange(10)], rtol=1e-4, atol=1e-5)
  assert set(pred.early_exit(texts, pairs, "entropy", 10.0)[0]) == {1}
  assert set(pred.early_exit(texts, pairs, "entropy", 0.0)[0]) == {2}
  # Out of order batching: one text alone gets the logits it gets among others.
  np.testing.assert_allclose(pred.logits(texts[3:4], pairs[3:4])[:, 0], full[:, 3], rtol=1e-4,
                             atol=1e-5)


def test_packed_prediction_equals_unpacked(run):
  rows = _rows(13, 60)
  texts, pairs = [r["premise"] for r in rows], [r["hypothesis"] for r in rows]
  packed = predict.Predictor(run, batch_size=8)
  assert packed.packed
  unpacked = predict.Predictor(run, batch_size=8, packed=False)
  got, want = packed.logits(texts, pairs), unpacked.logits(texts, pairs)
  assert got.shape == want.shape == (2, 13, 2)
  # Input order both ways; float32 round-off of reductions over a row (max_length tokens).
  numerics.assert_trees_close_f32(got, want, n=int(run.config.task.max_length))
  one = packed.logits(texts[5:6], pairs[5:6])
  numerics.assert_trees_close_f32(one[:, 0], want[:, 5], n=int(run.config.task.max_length))


def test_single_exit_runs_refuse_early_exit(run):
  from acl_jax.train import setup as setup_lib
  cfg = run.config.copy_and_resolve_references()
  cfg.model.exits = "last"
  model, _, _ = setup_lib.load_model(cfg, 2, with_tokenizer=False)
  pred = predict.Predictor(dataclasses.replace(run, model=model))
  with pytest.raises(ValueError, match="exits='all'.*predict without --exit_policy"):
    pred.early_exit(["a"], ["b"], "entropy", 0.1)
  with pytest.raises(ValueError, match="multiple of the device count"):
    predict.Predictor(run, batch_size=-1)
  with pytest.raises(ValueError, match="patience threshold must be an int"):
    predict.predict_file(run, "-", "-", policy="patience", threshold=0.5)


def test_inputs_are_read_by_extension_or_sniffed(tmp_path, monkeypatch):
  alts = [("sentence1", "sentence2"), ("#1 String", "#2 String")]
  tsv = tmp_path / "dev.tsv"
  tsv.write_text("Quality\t#1 String\t#2 String\n1\ta \"quoted\" one\tb\n")
  records, cols = predict.read_inputs(str(tsv), "auto", alts)
  assert cols == ("#1 String", "#2 String")  # MRPC's own TSV header
  assert [r["#1 String"] for r in records] == ['a "quoted" one']
  for text, fmt in (('{"sentence1": "x", "sentence2": "y"}\n', "jsonl"),
                    ("sentence1\tsentence2\nx\ty\n", "tsv"), ("sentence1,sentence2\nx,y\n", "csv")):
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    records, cols = predict.read_inputs("-", "auto", alts)
    assert cols == alts[0] and [dict(r) for r in records] == [{"sentence1": "x",
                                                               "sentence2": "y"}], fmt
  bad = tmp_path / "bad.csv"
  bad.write_text("text,label\nhello,1\n")
  with pytest.raises(ValueError, match=r"columns \['text', 'label'\]; this run reads the text "
                                       r"column\(s\) 'sentence1'\+'sentence2' or"):
    predict.read_inputs(str(bad), "auto", alts)
  jl = tmp_path / "x.jsonl"
  jl.write_text('{"sentence1": "a", "sentence2": "b"}\n{"sentence1": "c"}\n')
  records, _ = predict.read_inputs(str(jl), "auto", alts)
  with pytest.raises(ValueError, match=r"record 2 has no column\(s\) \['sentence2'\]"):
    list(records)


def test_eval_and_export_from_best_alone(run_dir, tmp_path):
  wd, _ = run_dir
  p = helpers.run_py(["eval.py", "--workdir", wd, "--split", "dev"], timeout=300)
  assert p.returncode == 0, p.stderr[-3000:]
  out = p.stdout + p.stderr
  # Orbax's INFO lines (a manager per folder, every restore) are gone.
  assert "checkpoint_manager" not in out and "CheckpointManager" not in out
  assert "[dev] per class" in p.stdout
  table = p.stdout.split("[dev] per class")[1].splitlines()
  assert [ln.split()[0] for ln in table[2:4]] == ["no", "yes"]  # labels.json's names
  res = json.load(open(os.path.join(wd, "results.json")))
  assert list(res["dev"]["per_class"]) == ["no", "yes"]
  assert sum(v["support"] for v in res["dev"]["per_class"].values()) == 24
  assert "train" in res  # the training record stays
  from acl_jax import evaluate
  with pytest.raises(FileError, match="keep_train_state=False.*use --checkpoint best"):
    evaluate.evaluate_workdir(wd, ["dev"], checkpoint="latest")
  from acl_jax import export
  hf_dir = export.export_workdir(wd, str(tmp_path / "hf"))
  config = json.load(open(os.path.join(hf_dir, "config.json")))
  assert config["id2label"] == {"0": "no", "1": "yes"}
  assert os.path.isfile(os.path.join(hf_dir, "exits.safetensors"))  # the lower exit's head
