r"""Exports a trained workdir as a Hugging Face model folder.

  python export.py --workdir runs/sst2 --out exported/sst2
  python export.py --workdir runs/sst2 --out exported/sst2_final --checkpoint latest

Then, with no acl-jax involved:
  from transformers import AutoModelForSequenceClassification, AutoTokenizer
  model = AutoModelForSequenceClassification.from_pretrained("exported/sst2")

The run must have an exit head HF has (model.head=bert_pooler for BERT and MiniLM, roberta
for RoBERTa; DistilBERT also exports the default linear head); see acl_jax/export.py.
"""
from absl import app, flags

_WORKDIR = flags.DEFINE_string("workdir", None, "A workdir written by train.py.")
_OUT = flags.DEFINE_string("out", None, "The HF model folder to write.")
_CHECKPOINT = flags.DEFINE_enum("checkpoint", "best", ["best", "latest"],
                                "best: the dev-selected checkpoint eval.py reads; latest: the "
                                "run's final weights.")


def main(argv):
  del argv
  from acl_jax import export, logs  # pylint: disable=import-outside-toplevel
  logs.setup()  # pylint: disable=import-outside-toplevel
  try:
    out = export.export_workdir(_WORKDIR.value, _OUT.value, _CHECKPOINT.value)
  except (ValueError, FileNotFoundError) as e:
    raise app.UsageError(str(e)) from e
  print(f"wrote {out}")


if __name__ == "__main__":
  flags.mark_flags_as_required(["workdir", "out"])
  app.run(main)
