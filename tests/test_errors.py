"""Bad input gets one message: each row is an input, the exit code it must give, the words its
message must hold, and how many lines stderr may have. No user error prints a traceback; a bug
does (exit status 1), and train.py keeps it in train.log."""
import os

import pytest

from tests import helpers


def _write(path, data: bytes):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "wb") as f:
    f.write(data)
  return path


ROWS = b"text,label\n" + b"".join(b"film %d,%s\n" % (i, b"pos" if i % 2 else b"neg")
                                   for i in range(20))


def _csv(tmp, name="train.csv", data=ROWS):
  return _write(os.path.join(tmp, name), data)


# "0"/"1", with "0.0"/"1.0" on every third row (the label of film i is on line i + 2).
TWO_SPELLINGS = b"text,label\n" + b"".join(
    b"film %d,%d%s\n" % (i, i % 2, b".0" if i % 3 == 2 else b"") for i in range(30))
# A regression target: a real number a row.
REAL_LABELS = b"text,label\n" + b"".join(b"film %d,%.2f\n" % (i, 0.13 + 0.37 * i)
                                          for i in range(30))


# (id, args (given tmp), expected exit code, words the message holds, most stderr lines)
CASES = [
    ("missing config file", lambda t: ["train.py", "--config", "configs/nope.py"], 2,
     ["configs/nope.py", "No such file"], 3),
    ("unknown file format word", lambda t: ["train.py", "--config", "configs/files.py:xlsx"], 2,
     ["Unknown file format 'xlsx'", "csv, tsv, jsonl"], 2),
    ("misspelt config field", lambda t: ["train.py", "--config", "configs/quickstart.py",
                                         "--config.loss.lamda=0.3"], 2, ["Did you mean 'loss.lam'"], 2),
    ("unknown flag", lambda t: ["train.py", "--config", "configs/quickstart.py", "--bogus"], 2,
     ["Unknown command line flag 'bogus'", "--help"], 2),
    ("own files without a train file", lambda t: ["train.py", "--config", "configs/files.py"], 2,
     ["--config.task.train_file"], 3),
    ("empty CSV", lambda t: ["train.py", "--config", "configs/files.py",
                             f"--config.task.train_file={_csv(t, data=b'')}"], 2,
     ["holds no records", "header row"], 3),
    ("header-only CSV", lambda t: ["train.py", "--config", "configs/files.py",
                                   f"--config.task.train_file={_csv(t, data=b'text,label')}"],
     2, ["holds no records"], 3),
    ("non-UTF-8 CSV", lambda t: ["train.py", "--config", "configs/files.py",
                                 "--config.task.train_file=" + _csv(
                                     t, data=b"text,label\nok,pos\ncaf\xe9,neg\n")], 2,
     ["not UTF-8", "train.csv", "byte b'\\xe9' on line 3", "Save the file as UTF-8"], 3),
    ("numeric labels spelt two ways", lambda t: ["train.py", "--config", "configs/files.py",
                                                 "--config.task.train_file=" + _csv(
                                                     t, data=TWO_SPELLINGS)], 2,
     ["Labels '0' and '0.0' are one number spelt two ways", "train.csv lines 2, 6, 8, ...",
      "'0.0' on ", "train.csv lines 4, 10, 16, ...", "Write each label one way"], 3),
    ("real-number labels", lambda t: ["train.py", "--config", "configs/files.py",
                                      "--config.task.train_file=" + _csv(
                                          t, data=REAL_LABELS)], 2,
     ["train.csv: the labels are real numbers", "30 distinct values in 30 rows",
      "this is a regression file", "--config.task.label_column"], 3),
    ("misspelt eval split", lambda t: ["train.py", "--config", "configs/files.py",
                                       f"--config.task.train_file={_csv(t)}",
                                       "--config.eval_splits=dev,tset"], 2,
     ["Split 'tset' not in task", "eval_splits"], 3),
    ("zero batch size", lambda t: ["train.py", "--config", "configs/quickstart.py",
                                   "--config.batch_size=0"], 2, ["batch_size must be >= 1"], 3),
    # Before the model loads: the model named here does not exist.
    ("negative seed", lambda t: ["train.py", "--config", "configs/quickstart.py",
                                 "--config.seed=-1", "--config.model.name=no-such-org/model"],
     2, ["seed must be >= 0, got -1", "--config.seed"], 3),
    # Before the model loads, as the seed's row.
    ("max_length too short for a text", lambda t: ["train.py", "--config",
                                                   "configs/quickstart.py",
                                                   "--config.task.max_length=1",
                                                   "--config.model.name=no-such-org/model"],
     2, ["task.max_length must be >= 3", "[CLS], [SEP]", "got 1", "--config.task.max_length"],
     3),
    ("missing data file", lambda t: ["train.py", "--config", "configs/files.py",
                                     f"--config.task.train_file={t}/nope.csv"], 2,
     ["Missing csv file", "nope.csv"], 3),
    ("data file is a folder", lambda t: ["train.py", "--config", "configs/files.py",
                                         f"--config.task.train_file={t}"], 2,
     ["is a folder, not a file"], 3),
]


def _one_message(argv, code, words, max_lines):
  """Runs the tool; checks its exit code, that stderr has no traceback and at most
  `max_lines` lines, and that the last one holds `words`. Returns the CompletedProcess."""
  p = helpers.run_py(argv)
  err = [line for line in p.stderr.splitlines() if line.strip()]
  assert p.returncode == code, p.stderr[-2000:]
  assert "Traceback" not in p.stderr, p.stderr[-2000:]
  assert len(err) <= max_lines, p.stderr
  for w in words:
    assert w in err[-1], err[-1]
  return p


@pytest.mark.parametrize("name,args,code,words,max_lines", CASES, ids=[c[0] for c in CASES])
def test_bad_input_prints_one_message(tmp_path, name, args, code, words, max_lines):
  del name
  argv = args(str(tmp_path))
  if argv[0] == "train.py":
    argv += ["--workdir", str(tmp_path / "run")]
  p = _one_message(argv, code, words, max_lines)
  assert not os.path.exists(tmp_path / "run")  # a run that never started leaves no folder


@pytest.fixture(scope="module")
def csv_trained(tiny_model_dir, tmp_path_factory):
  """A tiny run trained on ROWS' "text" column, which keeps best/ alone."""
  root = str(tmp_path_factory.mktemp("errors_run"))
  wd = os.path.join(root, "run")
  p = helpers.run_py(["train.py", "--config", "configs/files.py:csv,runlocal", "--workdir", wd,
                      f"--config.model.name={tiny_model_dir}",
                      f"--config.task.train_file={_csv(root)}",
                      "--config.checkpoint.keep_train_state=False", "--config.progress=False"],
                     timeout=600)
  assert p.returncode == 0, p.stderr[-3000:]
  return wd


AG_NEWS = b'3,"Wall St. Bears Claw Back, Again",Short-sellers are seeing green again.\n'

# predict.py's rows, as CASES: args are given tmp and `wd`, a function that returns the trained
# workdir (training it on first use). Before the message, stderr holds host_heap's INFO line.
PREDICT_CASES = [
    ("missing workdir", lambda t, wd: ["predict.py", "--workdir", f"{t}/nope", "--input",
                                       _csv(t)], 2, ["--workdir", "nope does not exist"], 2),
    ("workdir without checkpoints",
     lambda t, wd: ["predict.py", "--workdir", os.path.dirname(_write(f"{t}/run/config.json",
                                                                      b"{}")),
                    "--input", _csv(t)], 2, ["No checkpoint in", "train it first"], 2),
    ("header-less file without a column flag",
     lambda t, wd: ["predict.py", "--workdir", wd(), "--input", _csv(t, "ag.csv", AG_NEWS)], 2,
     ["has columns ['3', 'Wall St. Bears Claw Back, Again',", "reads the text column(s) 'text'",
      "--text_column", "--no_header"], 2),
    ("text column name not in the file",
     lambda t, wd: ["predict.py", "--workdir", wd(), "--input", _csv(t),
                    "--text_column", "review"], 2,
     ["--text_column 'review' is not a column of", "its columns are ['text', 'label']"], 2),
    ("column position out of range",
     lambda t, wd: ["predict.py", "--workdir", wd(), "--input", _csv(t, "ag.csv", AG_NEWS),
                    "--no_header", "--text_column", "3"], 2,
     ["--text_column 3 is out of range", "3 columns, at positions 0 to 2"], 2),
    ("output into a missing folder",
     lambda t, wd: ["predict.py", "--workdir", wd(), "--input", _csv(t), "--output",
                    f"{t}/out/preds.jsonl"], 2,
     ["--output", "the folder", "/out does not exist; create it first"], 2),
    ("empty input", lambda t, wd: ["predict.py", "--workdir", wd(), "--input",
                                   _csv(t, "empty.csv", b"")], 2,
     ["empty.csv holds no records", "header row"], 2),
    ("header-only input", lambda t, wd: ["predict.py", "--workdir", wd(), "--input",
                                         _csv(t, "head.csv", b"text,label\n")], 2,
     ["head.csv holds a header row and no records"], 2),
    ("input is a folder", lambda t, wd: ["predict.py", "--workdir", wd(), "--input",
                                         os.path.dirname(_csv(t, "in/a.csv"))], 2,
     ["--input", "/in is a folder, not a file"], 2),
    ("input not UTF-8", lambda t, wd: ["predict.py", "--workdir", wd(), "--input",
                                       _csv(t, "latin.csv", b"text\ncaf\xe9\n")], 2,
     ["latin.csv is not UTF-8 text", "byte b'\\xe9' on line 2"], 2),
]


@pytest.mark.parametrize("name,args,code,words,max_lines", PREDICT_CASES,
                         ids=[c[0] for c in PREDICT_CASES])
def test_bad_predict_input_prints_one_message(request, tmp_path, name, args, code, words,
                                              max_lines):
  del name
  before = set(os.listdir(tmp_path))
  argv = args(str(tmp_path), lambda: request.getfixturevalue("csv_trained"))
  made = set(os.listdir(tmp_path)) - before
  p = _one_message(argv, code, words, max_lines)
  assert set(os.listdir(tmp_path)) - before == made  # no output, no temp file
  assert not p.stdout


def test_predict_names_the_line_of_a_latin1_byte_on_stdin(csv_trained):
  """Latin-1 text on stdin, past the first read buffer: one line naming stdin, the byte and
  its line (stdin cannot be read again to find it), no traceback and no prediction."""
  import subprocess
  import sys
  data = b"text\n" + b"".join(b"film %d\n" % i for i in range(3000)) + b"caf\xe9\n"
  p = subprocess.run([sys.executable, "predict.py", "--workdir", csv_trained, "--input", "-"],
                     cwd=helpers.REPO, env=helpers.env(), input=data, capture_output=True,
                     timeout=300)
  err = [line for line in p.stderr.decode().splitlines() if line.strip()]
  assert p.returncode == 2 and "Traceback" not in p.stderr.decode(), p.stderr[-2000:]
  assert "<stdin> is not UTF-8 text: byte b'\\xe9' on line 3002" in err[-1], err[-1]
  assert len(err) <= 2 and not p.stdout


def test_a_class_never_predicted_is_a_warning_in_results_json(csv_trained, tmp_path):
  """The tiny CSV run's model predicts one class on dev: train.py logged one warning naming
  the other class, its dev examples and the fix, and results.json keeps it with dev's scores;
  eval.py (on a copy) says it again."""
  import json
  res = json.load(open(os.path.join(csv_trained, "results.json")))["dev"]
  log = open(os.path.join(csv_trained, "train.log")).read()
  wd = _copy(csv_trained, str(tmp_path))
  p = helpers.run_py(["eval.py", "--workdir", wd, "--json"])
  assert p.returncode == 0, p.stderr[-3000:]
  per_class = json.loads(p.stdout)["dev"]["per_class"]
  # With two classes, a class all of whose examples are missed while the other's are all
  # found is never predicted.
  missed = [c for c, r in per_class.items() if r["support"] and r["recall"] == 0.0]
  assert len(missed) == 1 and all(r["recall"] == 1.0 for c, r in per_class.items()
                                  if c not in missed), per_class  # what this test needs
  (name,) = missed
  assert len(res["warnings"]) == 1, res
  want = (f"The model never predicts class {name!r} ({per_class[name]['support']} example")
  for text in (res["warnings"][0], p.stderr):
    assert want in text and "on dev" in text and "--config.loss.class_weights=balanced" in text
  assert log.count("The model never predicts") == 1, log
  assert json.loads(p.stdout)["dev"]["warnings"] == res["warnings"]


def test_eval_beside_a_run_still_training_prints_and_writes_nothing(trained, tmp_path):
  """eval.py on a workdir whose lock a run holds: the metrics on stdout, one line on stderr
  saying the run is still training, status 0, and the workdir as it was."""
  from acl_jax import provenance
  wd = _copy(trained, str(tmp_path))

  def files():
    return {os.path.join(r, f): open(os.path.join(r, f), "rb").read()
            for r, _, fs in os.walk(wd) for f in fs if f != provenance.LOCK}
  before = files()
  with provenance.workdir_lock(wd):
    p = helpers.run_py(["eval.py", "--workdir", wd])
  assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
  assert '"accuracy"' in p.stdout and "[dev] per class" in p.stdout
  assert (f"{wd} is still training (pid {os.getpid()}): the metrics above, of its checkpoint "
          "of step") in p.stderr, p.stderr[-3000:]
  assert "are not written into it" in p.stderr and "wrote" not in p.stderr
  assert files() == before
  # What writes into the workdir is refused before anything loads.
  with provenance.workdir_lock(wd):
    for more in (["--dump_features"], ["--exit_policy", "entropy", "--thresholds", "0.1"]):
      _one_message(["eval.py", "--workdir", wd, *more], 2,
                   [f"{wd} is still training (pid {os.getpid()})", "writes", "into it",
                    "when training has finished"], 3)
  assert files() == before


def test_results_json_names_the_data_each_split_was_scored_on(trained, tmp_path):
  """Each split's scores in results.json carry the hash of the data they are of: train.py's
  (the data the run trained on) and eval.py's, which stay equal while the data does; eval.py
  on changed data warns and writes its scores, with the new hash, beside results.json, which
  keeps the trained data's."""
  import json
  wd = _copy(trained, str(tmp_path))
  res = json.load(open(os.path.join(wd, "results.json")))
  assert res["dev"]["data_sha256"] == res["train"]["data"]["dev"]["sha256"]
  p = helpers.run_py(["eval.py", "--workdir", wd])
  assert p.returncode == 0, p.stderr[-3000:]
  again = json.load(open(os.path.join(wd, "results.json")))
  assert again["dev"]["data_sha256"] == res["dev"]["data_sha256"]
  assert "differs from what the run trained" not in p.stderr
  # The same run on other data: the dev split held out of another train file.
  cfg_path = os.path.join(wd, "config.json")
  cfg = json.load(open(cfg_path))
  cfg["task"]["split_seed"] = cfg["task"]["split_seed"] + 1
  with open(cfg_path, "w") as f:
    json.dump(cfg, f)
  p = helpers.run_py(["eval.py", "--workdir", wd])
  assert p.returncode == 0, p.stderr[-3000:]
  assert "The data scored here differs from what the run trained" in p.stderr
  assert "dev: the data differs from what the run trained on" in p.stderr
  assert json.load(open(os.path.join(wd, "results.json"))) == again
  other = json.load(open(os.path.join(wd, "results_other_data.json")))
  assert other["dev"]["data_sha256"] != res["train"]["data"]["dev"]["sha256"]


def _fault_run(tiny_model_dir, wd, worker, *args):
  """train.py on the tiny quickstart run (6 steps, checkpoints at 3 and 6) under one of
  tests.fault_workers' faults."""
  return helpers.run_py(["tests/fault_workers.py", worker, *args, "--config",
                         "configs/quickstart.py:runlocal", "--workdir", wd,
                         f"--config.model.name={tiny_model_dir}", "--config.progress=False"],
                        timeout=600)


def test_a_bug_in_the_loop_prints_its_traceback_and_keeps_it_in_train_log(tiny_model_dir,
                                                                           tmp_path):
  """A ValueError from inside the loop (not a UserError) is a bug, not bad input: its whole
  traceback goes to stderr and into train.log, and the exit status is 1, not 2."""
  wd = str(tmp_path / "run")
  p = _fault_run(tiny_model_dir, wd, "bug_in_eval")
  assert p.returncode == 1, p.stderr[-3000:]
  assert "Traceback (most recent call last)" in p.stderr, p.stderr[-3000:]
  assert "ValueError: operands could not be broadcast together" in p.stderr
  assert "error: " not in p.stderr  # no one-line user error in its place
  log = open(os.path.join(wd, "train.log")).read()
  assert "Stopped by a bug" in log and "Traceback (most recent call last)" in log, log
  assert "ValueError: operands could not be broadcast together" in log.splitlines()[-1]


def test_a_diverged_run_stops_in_one_line_naming_its_last_good_checkpoint(tiny_model_dir,
                                                                          tmp_path):
  """A NaN loss from step 5 on: the check at step 6 stops the run with one line (status 3)
  naming the step and the checkpoint of step 3, which train.log records too."""
  wd = str(tmp_path / "run")
  p = _fault_run(tiny_model_dir, wd, "nan_from", "5")
  err = [line for line in p.stderr.splitlines() if line.strip()]
  assert p.returncode == 3, p.stderr[-3000:]
  assert "Traceback" not in p.stderr, p.stderr[-3000:]
  ckpt = os.path.join(wd, "ckpt", "3")
  for words in ("Non-finite loss or gradient at step 5: loss=nan",
                f"the last good checkpoint is {ckpt} (step 3)"):
    assert words in err[-1], err[-1]
  log = open(os.path.join(wd, "train.log")).read().splitlines()
  assert "Stopped: Non-finite loss or gradient at step 5" in log[-1]
  assert f"checkpoint is {ckpt} (step 3)" in log[-1]


def test_verbose_shows_the_traceback(tmp_path):
  """--verbose adds the traceback; the error is still a user error: status 2, its line last."""
  p = helpers.run_py(["train.py", "--config", "configs/files.py", "--workdir",
                      str(tmp_path / "run"), "--verbose"])
  assert p.returncode == 2 and "Traceback" in p.stderr and "--config.task.train_file" in p.stderr
  assert p.stderr.strip().splitlines()[-1].startswith("error: ")


def test_a_busy_workdir_is_one_message_naming_the_holder(tmp_path):
  from acl_jax import provenance
  wd = str(tmp_path / "run")
  os.makedirs(wd)
  with provenance.workdir_lock(wd):
    p = helpers.run_py(["train.py", "--config", "configs/files.py", "--workdir", wd,
                        f"--config.task.train_file={_csv(str(tmp_path))}"])
  assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
  assert f"being written by another process (pid {os.getpid()})" in p.stderr


# ---- the tools that read a finished run: eval.py and export.py ---------------------------


@pytest.fixture
def trained(ce_run):
  """A finished 6-step quickstart run of the tiny model (ckpt/ kept: steps 3 and 6), shared:
  the tools that write into a run get a copy."""
  return ce_run


def _copy(src, tmp):
  import shutil
  return shutil.copytree(src, os.path.join(tmp, "copy"))


def _no_ckpt(wd, tmp):
  import shutil
  wd = _copy(wd, tmp)
  shutil.rmtree(os.path.join(wd, "ckpt"))
  return wd


def _corrupt_latest(wd, tmp):
  wd = _copy(wd, tmp)
  files = [os.path.join(r, f) for r, _, fs in os.walk(os.path.join(wd, "ckpt", "6", "state", "d"))
           for f in fs]
  path = max(files, key=os.path.getsize)
  os.truncate(path, os.path.getsize(path) // 2)
  return wd


def _results_unwritable(wd, tmp):
  wd = _copy(wd, tmp)
  os.remove(os.path.join(wd, "results.json"))
  os.makedirs(os.path.join(wd, "results.json"))  # (root writes anywhere: a folder stops it)
  return wd


def _foreign_folder(tmp):
  out = os.path.join(tmp, "theirs")
  _write(os.path.join(out, "config.json"), b'{"model_type": "bert"}')
  return out


# (id, args given (trained workdir, tmp), exit code, words of the last line, most stderr lines)
RUN_CASES = [
    ("eval: no such workdir", lambda wd, t: ["eval.py", "--workdir", os.path.join(t, "nope")],
     2, ["nope does not exist"], 3),
    ("eval: misspelt split", lambda wd, t: ["eval.py", "--workdir", wd, "--split", "dev,tset"],
     2, ["Split 'tset' not in task"], 3),
    ("eval: latest without ckpt/", lambda wd, t: ["eval.py", "--workdir", _no_ckpt(wd, t),
                                                  "--checkpoint", "latest"], 2,
     ["has no latest checkpoint", "missing or empty", "--checkpoint best"], 3),
    ("eval: latest checkpoint corrupt", lambda wd, t: ["eval.py", "--workdir",
                                                       _corrupt_latest(wd, t), "--checkpoint",
                                                       "latest"], 2,
     ["(step 6) cannot be read"], 3),
    ("eval: results.json unwritable", lambda wd, t: ["eval.py", "--workdir",
                                                     _results_unwritable(wd, t)], 2,
     ["metrics above were not saved", "results.json cannot be written"], 3),
    ("export: a folder of other files", lambda wd, t: ["export.py", "--workdir", wd, "--out",
                                                       _foreign_folder(t)], 2,
     ["holds other files", "not an earlier export"], 3),
    ("export: no --out", lambda wd, t: ["export.py", "--workdir", wd], 2,
     ["--out", "--help"], 2),
    ("export: --out is a file", lambda wd, t: ["export.py", "--workdir", wd, "--out",
                                               _write(os.path.join(t, "model.bin"), b"x")], 2,
     ["--out", "model.bin is a file, not a folder", "new or empty folder"], 3),
]


@pytest.mark.parametrize("name,args,code,words,max_lines", RUN_CASES,
                         ids=[c[0] for c in RUN_CASES])
def test_bad_input_to_a_finished_run_prints_one_message(trained, tmp_path, name, args, code,
                                                        words, max_lines):
  p = _one_message(args(trained, str(tmp_path)), code, words, max_lines)
  if name == "eval: results.json unwritable":  # the metrics were printed all the same
    assert '"accuracy"' in p.stdout and "[dev] per class" in p.stdout


def test_a_corrupt_checkpoint_is_one_line_and_nothing_after_it(trained, tmp_path):
  """The largest array file of the latest checkpoint cut in half: eval.py and predict.py each
  print the restore's error in one line, naming the step and TensorStore's own reason, without
  Orbax's TensorStore spec; the reads that Orbax leaves behind add nothing after it (left
  alone, they can print "Exception ignored in: <coroutine ...>" tracebacks, often hundreds of
  lines, at exit). Only the log records written before the error come before it."""
  wd = _copy(trained, str(tmp_path))
  state = os.path.join(wd, "ckpt", "6", "state")
  path = max((os.path.join(r, f) for r, _, fs in os.walk(state) for f in fs),
             key=os.path.getsize)
  os.truncate(path, os.path.getsize(path) // 2)
  for tool in (["eval.py"], ["predict.py", "--input", _csv(str(tmp_path))]):
    p = helpers.run_py([*tool, "--workdir", wd, "--checkpoint", "latest"])
    err = [line for line in p.stderr.splitlines() if line.strip()]
    logged = [line for line in err if " INFO " in line or " WARNING " in line]
    assert p.returncode == 2 and err[:len(logged)] == logged, p.stderr[-3000:]
    assert len(err) == len(logged) + 1, p.stderr[-3000:]  # the error, and nothing after it
    assert "(step 6) cannot be read (ValueError: " in err[-1], err[-1]
    assert "is not valid for value of size" in err[-1], err[-1]
    assert "TensorStore" not in err[-1] and "<bound method" not in err[-1], err[-1]


def test_eval_logs_to_stderr_and_json_prints_the_metrics_alone(trained, tmp_path):
  import json
  wd = _copy(trained, str(tmp_path))
  p = helpers.run_py(["eval.py", "--workdir", wd, "--split", "dev"])
  assert p.returncode == 0, p.stderr[-3000:]
  assert " INFO " not in p.stdout and p.stdout.startswith("{"), p.stdout[:500]
  assert " INFO " in p.stderr  # the log lines are there, on stderr
  p = helpers.run_py(["eval.py", "--workdir", wd, "--split", "dev", "--json"])
  assert p.returncode == 0, p.stderr[-3000:]
  out = json.loads(p.stdout)  # stdout is the JSON alone
  assert out["dev"]["accuracy"] == json.load(open(os.path.join(wd, "results.json")))[
      "dev"]["accuracy"]
  assert set(out["dev"]["per_class"]) == {"rotten", "fresh"}
  assert f"wrote {os.path.join(wd, 'results.json')}" in p.stderr


def test_the_default_run_exports_and_matches_predict_in_plain_transformers(trained, tmp_path):
  """The quickstart's default head (linear on [CLS]) exports; transformers alone, with the
  exported tokenizer's own max length, gives predict.py's probabilities to 1e-4, on texts
  longer than the run's max length too."""
  import numpy as np
  import torch
  import transformers
  from acl_jax import predict, run as run_lib
  out = str(tmp_path / "hf")
  p = helpers.run_py(["export.py", "--workdir", trained, "--out", out])
  assert p.returncode == 0, p.stderr[-2000:]
  run = run_lib.open(trained)
  assert run.model.cfg.head == "linear"
  texts = ["a gripping , funny film", "dull", " ".join(["long and winding"] * 40)]
  want = predict.softmax(predict.Predictor(run).logits(texts)[-1])
  tok = transformers.AutoTokenizer.from_pretrained(out)
  assert tok.model_max_length == run.config.task.max_length
  model = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
  with torch.no_grad():
    got = torch.softmax(model(**tok(texts, padding=True, truncation=True,
                                    return_tensors="pt")).logits, -1).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_never_predicted_warning_says_what_the_run_can_still_do():
  """A run that weighs its classes already is not told to weigh them."""
  from acl_jax.train import scoring
  plain = scoring.never_predicted("dev", {"rare": 3}, 100)
  weighted = scoring.never_predicted("dev", {"rare": 3}, 100, "balanced")
  assert "Weight the loss by class frequency (--config.loss.class_weights=balanced)" in plain
  assert "Weight the loss" not in weighted
  assert "already weighs the classes by frequency" in weighted and "train longer" in weighted
