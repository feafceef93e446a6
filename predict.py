r"""Classifies new texts with a trained workdir: one JSON line per input row.

  python predict.py --workdir runs/rte_acl --input new.tsv --output preds.jsonl
  cat new.jsonl | python predict.py --workdir runs/rte_acl --input - --output -
  python predict.py --workdir runs/sst2_jt --input new.csv --output preds.jsonl \
      --exit_policy entropy --threshold 0.2
  python predict.py --workdir runs/ag_news --input test.csv --no_header --text_column 2

The input (CSV, TSV or JSONL; by extension, from --format, or guessed from the first line for
stdin) holds the run's text column(s): task.text_column (and task.text_pair_column) for files
and hub datasets, the task's own for GLUE (e.g. sentence1, sentence2 for RTE, or its dev.tsv's
header). --text_column (and --text_pair_column, for a run on pairs) read other columns, each
by name or 0-based position. A CSV or TSV file without a header row takes --no_header, its
columns then named "0", "1", ..., or --columns NAMES (e.g. --columns class,title,description,
then --text_column description). Each output line holds every input column as it was read,
"label" (a name from the run's labels.json) and "probs" (label name -> probability), plus
"exit_layer" with --exit_policy; an input column named label, probs or exit_layer is written
as "input.label" (and so on). Texts longer than the run's max_length are cut to it, as in
training, with one warning that counts them. Predictions are batched and jitted, as
evaluation is; see acl_jax/predict.py.
"""
import sys

from absl import app, flags

from acl_jax import cli

_WORKDIR = flags.DEFINE_string("workdir", None, "A workdir written by train.py.")
_INPUT = flags.DEFINE_string("input", None, "CSV, TSV or JSONL file of texts; - reads stdin.")
_OUTPUT = flags.DEFINE_string("output", "-", "JSONL file to write, in an existing folder; - "
                              "writes stdout.")
_FORMAT = flags.DEFINE_enum("format", "auto", ["auto", "csv", "tsv", "jsonl"],
                            "Input format; auto: the file's extension, else its first line.")
_TEXT = flags.DEFINE_string("text_column", None, "The text's column, by name or 0-based "
                            "position; default: the run's text column.")
_PAIR = flags.DEFINE_string("text_pair_column", None, "The second text's column (a run on "
                            "pairs), by name or 0-based position; comes with --text_column.")
_NO_HEADER = flags.DEFINE_bool("no_header", False, "The CSV or TSV file has no header row: "
                               "its columns are named by position, \"0\", \"1\", ...")
_COLUMNS = flags.DEFINE_list("columns", None, "Names of the columns of a CSV or TSV file "
                             "without a header row, in order (implies --no_header).")
_CHECKPOINT = flags.DEFINE_enum("checkpoint", "best", ["best", "latest"],
                                "best: the dev-selected params; latest: the final weights.")
_BATCH = flags.DEFINE_integer("batch_size", 0, "Texts per batch; 0: the run's eval_batch_size.")
_POLICY = flags.DEFINE_string("exit_policy", None, "Per-example early exit on a multi-exit run: "
                              "entropy, confidence or patience (writes exit_layer).")
_THRESHOLD = flags.DEFINE_string("threshold", None, "The policy's threshold: entropy (nats) "
                                 "or confidence as a float, patience as an int.")


def _threshold():
  from acl_jax import exits  # pylint: disable=import-outside-toplevel
  if _POLICY.value not in exits.POLICIES:
    raise cli.UserError(f"Unknown --exit_policy {_POLICY.value!r}; known: "
                        f"{sorted(exits.POLICIES)}.")
  if _THRESHOLD.value is None:
    raise cli.UserError("--exit_policy needs --threshold, e.g. --threshold=0.2.")
  cast = int if _POLICY.value == "patience" else float
  try:
    return cast(_THRESHOLD.value)
  except ValueError as e:
    raise cli.UserError(f"--threshold for {_POLICY.value} must be an {cast.__name__}: "
                        f"{e}") from e


@cli.user_errors
def main(argv):
  del argv
  from acl_jax import compile_cache, host_heap, logs  # pylint: disable=import-outside-toplevel
  logs.setup(stream=sys.stderr)  # stdout may carry the predictions
  with host_heap.managed():  # before any JAX computation
    compile_cache.enable()  # before the first compile
    predict_input()


def predict_input():
  """--input's texts classified and written to --output."""
  from acl_jax import predict  # pylint: disable=import-outside-toplevel
  threshold = None
  if _POLICY.value:
    threshold = _threshold()
  elif _THRESHOLD.value is not None:
    raise cli.UserError("--threshold needs --exit_policy.")
  from acl_jax import predict, run as run_lib  # pylint: disable=import-outside-toplevel
  layout = predict.Layout(_TEXT.value, _PAIR.value, header=not _NO_HEADER.value,
                          names=_COLUMNS.value)
  predict.check_output(_OUTPUT.value)  # before the model loads
  # The input's columns, and that it holds a row to classify, before the model loads too.
  config = run_lib.check(_WORKDIR.value, _CHECKPOINT.value)
  records, cols = predict.read_inputs(_INPUT.value, _FORMAT.value,
                                      predict.input_columns(config), layout)
  run = run_lib.open(_WORKDIR.value, _CHECKPOINT.value)
  n = predict.write_predictions(run, records, cols, _OUTPUT.value, _BATCH.value, _POLICY.value,
                                threshold)
  print(f"wrote {n} predictions to {_OUTPUT.value} ({run.checkpoint} checkpoint, step "
        f"{run.step})", file=sys.stderr)


if __name__ == "__main__":
  flags.mark_flags_as_required(["workdir", "input"])
  app.run(main, flags_parser=cli.parse_flags)
