r"""Any text-classification dataset of the Hugging Face hub, by id and column names.

The argument is `[preset][,method][,runlocal]`; a preset fills the task fields of a known
dataset (PRESETS below), e.g.

  python train.py --config configs/hub.py:imdb,acl --workdir runs/imdb_acl

Any other dataset: name it, its columns and its splits (`task.splits` maps train, dev and test
to the dataset's split names; dev "" holds task.val_fraction of train out as dev):

  python train.py --config configs/hub.py:ce --workdir runs/tweets \
      --config.task.hub_id=cardiffnlp/tweet_eval --config.task.hub_config=sentiment \
      --config.task.text_column=text --config.task.label_column=label \
      --config.task.splits.dev=validation

Offline (HF_DATASETS_OFFLINE=1) a hub id fails at once; a local folder works instead, one
written by `DatasetDict.save_to_disk` or one of data files (train.csv, test.parquet, ...) that
`datasets.load_dataset(folder)` reads: `--config.task.hub_id=data/my_dataset`. A ClassLabel
label column keeps the dataset's class names and order; other labels are sorted.
"""
from configs import common

PRESETS = {
    # 25k movie reviews, neg/pos; no validation split. Reviews are long: 256 tokens.
    "imdb": dict(hub_id="stanfordnlp/imdb", max_length=256,
                 splits=dict(train="train", dev="", test="test")),
    # Rotten Tomatoes sentences, neg/pos, with validation and test splits.
    "rotten_tomatoes": dict(hub_id="cornell-movie-review-data/rotten_tomatoes",
                            splits=dict(train="train", dev="validation", test="test")),
    # 4 news topics; no validation split.
    "ag_news": dict(hub_id="fancyzhx/ag_news", splits=dict(train="train", dev="", test="test")),
    # 6 emotions of tweets.
    "emotion": dict(hub_id="dair-ai/emotion",
                    splits=dict(train="train", dev="validation", test="test")),
}
TASKS = tuple(PRESETS)


def get_config(arg=None):
  words = [w for w in (arg or "").split(",") if w]
  preset = PRESETS[words.pop(0)] if words and words[0] in PRESETS else {}
  c = common.base_config()
  c.task.name = "hub"
  c.task.update({k: v for k, v in preset.items() if k != "splits"})
  c.task.splits.update(preset.get("splits", {}))
  return common.apply_args(c, ",".join(words))
