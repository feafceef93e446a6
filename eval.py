r"""Evaluates a trained workdir's best checkpoint and writes DIR/results.json.

Prints each split's metrics, then its per-class precision, recall and F1, the classes named by
the run's labels.json (results.json: per_class). Log lines go to stderr; with --json, stdout
holds one JSON object alone (each split's metrics with per_class; with --exit_policy, each
workdir's sweep rows), to be read by another program. Each split's entry in results.json holds
the hash of the data it scored (data_sha256). Splits whose data differs from what the run
trained on are scored into results_other_data.json (results_latest_other_data.json) instead,
so results.json keeps the trained data's scores. A workdir that train.py is still training is
scored and left as it is: its run writes results.json when it ends.

  python eval.py --workdir runs/quickstart --split dev
  python eval.py --workdir runs/mr_gloss --split test
  python eval.py --workdir runs/mr_gloss --split dev,test --json > metrics.json

Early-exit sweep of multi-exit runs (table per workdir, one plot with a curve per workdir):
  python eval.py --workdir runs/sst2_jt --workdir runs/sst2_acl_cl --exit_policy entropy \
      --thresholds 0,0.05,0.1,0.2,0.3,0.4
"""
import json
import os
import sys

from absl import app, flags

from acl_jax import cli, errors

_WORKDIR = flags.DEFINE_multi_string("workdir", None, "A workdir written by train.py "
                                     "(repeat the flag for several, with --exit_policy).")
_SPLIT = flags.DEFINE_string("split", "dev", "Comma list of splits to evaluate (dev, test, ...).")
_POLICY = flags.DEFINE_string("exit_policy", None,
                              "Early-exit sweep: entropy, confidence, patience or margin.")
_THRESHOLDS = flags.DEFINE_list("thresholds", None, "Early-exit thresholds to sweep.")
_EXIT_BATCH = flags.DEFINE_integer("exit_batch_size", 32, "Batch size of the early-exit sweep.")
_EXIT_REPEATS = flags.DEFINE_integer("exit_repeats", 3, "Timed passes per threshold (full model "
                                     "and early exit alternate); the median is reported. 0: "
                                     "untimed (metric, exits and layer speed-up only).")
_DUMP = flags.DEFINE_bool("dump_features", False, "Also save DIR/features_{split}.npz (last-"
                          "exit features, labels, predictions, label embeddings).")
_CHECKPOINT = flags.DEFINE_enum("checkpoint", "best", ["best", "latest"],
                                "best: the checkpoint model selection kept (results.json); "
                                "latest: the final weights, written to results_latest.json "
                                "(e.g. to see how much the dev-set selection moved a number).")
_PLOT = flags.DEFINE_string("plot", None, "PNG of the quality-speed curves (default: in the "
                            "first workdir).")
_JSON = flags.DEFINE_bool("json", False, "Print one JSON object alone on stdout (the metrics, "
                          "per_class included; with --exit_policy, each workdir's sweep rows) "
                          "and the rest on stderr.")


def _say(text: str) -> None:
  """A line for the reader: on stdout, or on stderr when stdout carries --json's object."""
  print(text, file=sys.stderr if _JSON.value else sys.stdout, flush=True)


def early_exit(workdirs):
  """Sweeps the early-exit policy on each workdir; one curve per workdir in one plot."""
  from acl_jax import exits  # pylint: disable=import-outside-toplevel
  from acl_jax.exits import plot  # pylint: disable=import-outside-toplevel
  from acl_jax.exits.workdir import early_exit_workdir  # pylint: disable=import-outside-toplevel
  if _POLICY.value not in exits.POLICIES:
    raise app.UsageError(f"Unknown --exit_policy {_POLICY.value!r}; known: {sorted(exits.POLICIES)}.")
  if not _THRESHOLDS.value:
    raise app.UsageError("--exit_policy needs --thresholds, e.g. --thresholds=0.05,0.1,0.2.")
  cast = int if _POLICY.value == "patience" else float
  try:
    thresholds = [cast(t) for t in _THRESHOLDS.value]
  except ValueError as e:
    raise app.UsageError(f"--thresholds for {_POLICY.value} must be {cast.__name__}s: {e}") from e
  splits = _SPLIT.value.split(",")
  if len(splits) > 1 or _CHECKPOINT.value != "best" or _DUMP.value:
    raise app.UsageError(
        "--exit_policy sweeps one split on the best checkpoint: give a single --split, and "
        "drop --checkpoint latest / --dump_features (run eval.py without --exit_policy for "
        "those).")
  split = splits[0]
  from acl_jax import provenance  # pylint: disable=import-outside-toplevel
  for wd in workdirs:  # before anything loads: the sweep writes its tables into each workdir
    holder = provenance.lock_holder(wd)
    if holder:
      raise errors.UserError(f"{wd} is still training (pid {holder}), and the early-exit "
                             "sweep writes its tables into it: run it when training has "
                             "finished.")
  jsons = []
  for wd in workdirs:
    md, js = early_exit_workdir(wd, split, _POLICY.value, thresholds,
                                batch_size=_EXIT_BATCH.value, repeats=_EXIT_REPEATS.value)
    with open(md) as f:
      _say(f.read())
    _say(f"wrote {md}")
    jsons.append(js)
  png = _PLOT.value or os.path.join(workdirs[0], f"quality_speed_{_POLICY.value}_{split}.png")
  _say(f"wrote {plot.plot(jsons, png)}")
  if _JSON.value:
    rows = {}
    for wd, js in zip(workdirs, jsons):
      with open(js) as f:
        rows[wd] = json.load(f)
    print(json.dumps(rows, indent=2), flush=True)


def per_class_table(split: str, rows: dict) -> str:
  """The per-class metrics of a split, one line per label name (from the run's labels.json)."""
  width = max([len("label")] + [len(n) for n in rows])
  lines = [f"[{split}] per class", f"{'label':<{width}}  precision  recall  f1      support"]
  for name, r in rows.items():
    lines.append(f"{name:<{width}}  {r['precision']:<9.4f}  {r['recall']:<6.4f}  "
                 f"{r['f1']:<6.4f}  {r['support']}")
  return "\n".join(lines)


@cli.user_errors
def main(argv):
  del argv
  from acl_jax import compile_cache, host_heap, logs  # pylint: disable=import-outside-toplevel
  logs.setup(stream=sys.stderr)  # stdout carries the metrics
  with host_heap.managed():  # before any JAX computation
    compile_cache.enable()  # before the first compile
    return evaluate_workdirs()


def evaluate_workdirs():
  """What the flags ask for: the early-exit sweep, or one workdir's splits evaluated."""
  from acl_jax import evaluate, provenance  # pylint: disable=import-outside-toplevel
  workdirs = _WORKDIR.value
  if _POLICY.value:
    return early_exit(workdirs)
  if len(workdirs) > 1:
    raise app.UsageError("Several workdirs are only supported with --exit_policy.")
  workdir = workdirs[0]
  if _CHECKPOINT.value == "latest" and _DUMP.value:
    raise app.UsageError("--dump_features writes the best checkpoint's features; drop it or "
                         "use --checkpoint best.")
  holder = provenance.lock_holder(workdir)
  if holder and _DUMP.value:
    raise errors.UserError(f"{workdir} is still training (pid {holder}), and --dump_features "
                           "writes into it: run it when training has finished.")
  results = evaluate.evaluate_workdir(workdir, _SPLIT.value.split(","),
                                      dump_features=_DUMP.value, checkpoint=_CHECKPOINT.value,
                                      per_class=True)
  name = "results.json" if _CHECKPOINT.value == "best" else "results_latest.json"
  changed = evaluate.changed_splits(workdir, results)
  if changed:  # the run's own scores stay: these go beside them, under a name that says so
    name = name.replace(".json", "_other_data.json")
    print(f"{', '.join(changed)}: the data differs from what the run trained on, so these "
          f"scores go to {os.path.join(workdir, name)}; results.json keeps the scores of the "
          "data it trained on.", file=sys.stderr, flush=True)
  out = os.path.join(workdir, name)
  # Printed before anything is written: a workdir that cannot be written still gives them.
  if _JSON.value:
    print(json.dumps(results, indent=2), flush=True)
  else:
    print(json.dumps({k: ({m: v for m, v in r.items() if m != "per_class"}
                          if isinstance(r, dict) else r) for k, r in results.items()}, indent=2))
    for split, res in results.items():
      if isinstance(res, dict) and "per_class" in res:
        print(per_class_table(split, res["per_class"]), flush=True)
  # Merge: splits evaluated now replace their entries; other splits and the training record
  # written by train.py stay. Written to a temp file and renamed, so a crash keeps the old one,
  # under the workdir's lock: a run still training writes its own results.json when it ends,
  # over anything written here, so nothing is.
  try:
    with provenance.workdir_lock(workdir):
      old = {}
      if os.path.isfile(out):
        with open(out) as f:
          old = json.load(f)
      provenance.write_atomic(out, json.dumps(evaluate.merge_results(old, results), indent=2))
  except provenance.WorkdirBusy:
    print(f"{workdir} is still training (pid {provenance.lock_holder(workdir) or 'unknown'}): "
          f"the metrics above, of its checkpoint of step {results['checkpoint_step']}, are not "
          f"written into it. Run eval.py again when training has finished.", file=sys.stderr,
          flush=True)
    return
  except OSError as e:
    raise errors.FileError(f"The metrics above were not saved: {out} cannot be written "
                           f"({e.strerror}). Copy them from here, or run eval.py where the "
                           "workdir is writable.") from e
  _say(f"wrote {out}")


if __name__ == "__main__":
  flags.mark_flags_as_required(["workdir"])
  app.run(main, flags_parser=cli.parse_flags)
