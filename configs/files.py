r"""Your own labelled CSV, TSV or JSONL files: a text (or a text pair) and a label per row.

The argument is `[format][,method][,runlocal]`, format csv (the default), tsv or jsonl. Point
the task at the files and name their columns:

  python train.py --config configs/files.py:csv,acl --workdir runs/reviews \
      --config.task.train_file=data/train.csv --config.task.dev_file=data/dev.csv \
      --config.task.text_column=review --config.task.label_column=stars

Pairs (entailment, paraphrase) add `--config.task.text_pair_column=hypothesis`. Without a
dev file, task.val_fraction (10%) of train is held out as dev (seeded); test_file is optional;
relative paths are read under task.data_dir when it is set. Labels may be strings or integers;
their names, in id order, go to the workdir's labels.json. CSV is quoted as usual, TSV is not
(as the GLUE files), JSONL holds one object per line.
"""
from acl_jax.errors import UserError

from configs import common

# acl_jax.data.readers.GENERIC_FORMATS, spelt out so that configs import no acl_jax code.
TASKS = ("csv", "tsv", "jsonl")


def get_config(arg="csv"):
  words = [w for w in (arg or "").split(",") if w]
  if words and words[0] in TASKS:
    fmt = words.pop(0)
  else:  # no format word: the first is a method, or a format the files cannot be read as
    fmt = "csv"
    if words and not common.is_config_word(words[0]):
      raise UserError(f"Unknown file format {words[0]!r}: configs/files.py reads "
                      f"{', '.join(TASKS)} (then optional method words and 'runlocal'); save "
                      f"the data as CSV, TSV or JSONL. Methods: {', '.join(common.METHODS)}, "
                      f"{', '.join(common.MULTI_EXIT)}.")
  # after the format, a word that is no method is named as one (common.apply_args)
  c = common.base_config()
  c.task.name = fmt
  c = common.apply_args(c, ",".join(words))
  # G-Loss on a file of one's own weighs its classes, as the G-Loss reference does: unweighted,
  # its graph term let a rare class go unpredicted (README, "G-Loss and rare classes");
  # --config.loss.class_weights= turns it off. A study that compares it with another method
  # sets the weights for both (the task's sets): a protocol is refused otherwise
  # (acl_jax/study/resolve.py), as the two would differ in more than the method.
  if c.loss.name == "gloss" and not c.loss.class_weights:
    c.loss.class_weights = "balanced"
  return c
