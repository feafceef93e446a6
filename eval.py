r"""Evaluates a trained workdir's best checkpoint and writes DIR/results.json.

  python eval.py --workdir runs/quickstart --split dev
  python eval.py --workdir runs/mr_gloss --split test
"""
import json
import logging
import os
import sys

from absl import app, flags

_WORKDIR = flags.DEFINE_string("workdir", None, "A workdir written by train.py.")
_SPLIT = flags.DEFINE_string("split", "dev", "Comma list of splits to evaluate (dev, test, ...).")


def main(argv):
  del argv
  logging.basicConfig(level=logging.INFO, stream=sys.stdout)
  import ml_collections  # pylint: disable=import-outside-toplevel
  from acl_jax.train import loop  # pylint: disable=import-outside-toplevel
  path = os.path.join(_WORKDIR.value, "config.json")
  if not os.path.isfile(path):
    raise app.UsageError(f"{path} not found: --workdir must be a folder written by train.py.")
  with open(path) as f:
    config = ml_collections.ConfigDict(json.load(f))
  results = loop.evaluate_workdir(config, _WORKDIR.value, _SPLIT.value.split(","))
  out = os.path.join(_WORKDIR.value, "results.json")
  with open(out, "w") as f:
    json.dump(results, f, indent=2)
  print(json.dumps(results, indent=2))
  print(f"wrote {out}")


if __name__ == "__main__":
  flags.mark_flags_as_required(["workdir"])
  app.run(main)
