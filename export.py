r"""Exports a trained workdir as a Hugging Face model folder.

  python export.py --workdir runs/sst2 --out exported/sst2
  python export.py --workdir runs/sst2 --out exported/sst2_final --checkpoint latest

Then, with no acl-jax involved:
  from transformers import AutoModelForSequenceClassification, AutoTokenizer
  model = AutoModelForSequenceClassification.from_pretrained("exported/sst2")

Every [CLS] exit head exports: the HF family's own head (bert_pooler, roberta, distilbert)
and the default linear head, mapped exactly onto it; mean-pooled exits have no HF form (see
acl_jax/export.py). --out must be new, empty, or an earlier export.
"""
from absl import app, flags

from acl_jax import cli

_WORKDIR = flags.DEFINE_string("workdir", None, "A workdir written by train.py.")
_OUT = flags.DEFINE_string("out", None, "The HF model folder to write.")
_CHECKPOINT = flags.DEFINE_enum("checkpoint", "best", ["best", "latest"],
                                "best: the dev-selected checkpoint eval.py reads; latest: the "
                                "run's final weights.")


@cli.user_errors
def main(argv):
  del argv
  from acl_jax import export, logs  # pylint: disable=import-outside-toplevel
  logs.setup()
  print(f"wrote {export.export_workdir(_WORKDIR.value, _OUT.value, _CHECKPOINT.value)}")


if __name__ == "__main__":
  flags.mark_flags_as_required(["workdir", "out"])
  app.run(main, flags_parser=cli.parse_flags)
