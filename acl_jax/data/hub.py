"""Hugging Face hub datasets: opened by id or from a local folder, offline-aware, and their
labels read as the task registry's strings (acl_jax.data.tasks's hub and GLUE-hub loaders)."""
import os
from typing import Optional

import datasets

from acl_jax.errors import UserError
from acl_jax.names import env_true


def offline() -> bool:
  return (env_true("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
          or bool(datasets.config.HF_HUB_OFFLINE))


def is_saved_dataset(folder: str) -> bool:
  """Whether `folder` was written by `Dataset.save_to_disk` or `DatasetDict.save_to_disk`."""
  return any(os.path.isfile(os.path.join(folder, f))
             for f in ("dataset_dict.json", "state.json"))


def open_hub_dataset(hub_id: str, config: str = "") -> datasets.DatasetDict:
  """The dataset `hub_id` names, as a DatasetDict.

  A local folder written by `save_to_disk` is read with `datasets.load_from_disk`; any other
  folder (data files such as train.csv and test.parquet, or a loading script) and any hub id
  go through `datasets.load_dataset`, the call that downloads when online. Offline, a hub id
  fails at once instead of waiting on the network.
  """
  if not hub_id:
    raise UserError("The hub task needs a dataset: set --config.task.hub_id to a hub id (e.g. "
                    "stanfordnlp/imdb) or a local folder, or use a preset such as "
                    "configs/hub.py:imdb.")
  if os.path.isdir(hub_id):
    if is_saved_dataset(hub_id):
      ds = datasets.load_from_disk(hub_id)
      return ds if isinstance(ds, datasets.DatasetDict) else datasets.DatasetDict(train=ds)
    return datasets.load_dataset(hub_id, config or None)
  if offline():
    raise UserError(
        f"Hub dataset {hub_id!r}: the hub is offline (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is "
        f"set) and {hub_id!r} is no local folder. Go online, or set --config.task.hub_id to a "
        "folder written by DatasetDict.save_to_disk or holding the data files (train.csv, "
        "test.csv, ... as datasets.load_dataset reads them).")
  return datasets.load_dataset(hub_id, config or None)


def labels(ds: datasets.Dataset, column: str) -> tuple[list[str], Optional[list[str]]]:
  """(label strings, ClassLabel names or None): ClassLabel ids become "0".."K-1" and its
  unlabelled -1 (e.g. GLUE's test splits) an empty label, which the empty-row policy drops."""
  feature = ds.features[column]
  values = list(ds[column])
  if isinstance(feature, datasets.ClassLabel):
    return ["" if v is None or v < 0 else str(v) for v in values], list(feature.names)
  return ["" if v is None else str(v) for v in values], None


def glue_splits(path: str, fmt) -> dict[str, dict[str, list]]:
  """A GLUE task's splits from the hub dataset `path` ("nyu-mll/glue"), as the registry's
  columns: "text", "text_pair" for a pair task, and "label" as the ClassLabel id's string.

  fmt: the task's `readers.GlueFormat` (hub_config, hub_splits, hub_text, hub_pair).
  """
  ds = datasets.load_dataset(path, fmt.hub_config)
  splits = {}
  for split, hub_split in fmt.hub_splits.items():
    rows = ds[hub_split]
    cols = {"text": list(rows[fmt.hub_text]), "label": [str(v) for v in rows["label"]]}
    if fmt.hub_pair is not None:
      cols["text_pair"] = list(rows[fmt.hub_pair])
    splits[split] = cols
  return splits
