"""What a run's data was: per split, its counts and a hash of its content after loading.

A run records this once, at its start (`record`, the workdir's data.json); a resume on data
that differs is refused (`check_same`), and evaluation warns when what it scores is not what
the run trained and selected on (`differences`). The hash covers the token ids and labels,
so an edited row, a relabelled example or a changed tokenizer or max length all change it.
"""
import hashlib
import json
import os

import numpy as np

from acl_jax.errors import UserError

DATA = "data.json"


def split_record(tok, rows_read: int, dropped_empty: int, max_length: int) -> dict:
  """A tokenised split's counts and content hash.

  Args:
    tok: the split as `tokenize.tokenize_dataset` returns it (input_ids, label columns).
    rows_read: its rows before any subsample (after empty rows were dropped).
    dropped_empty: rows dropped as empty when the task was read.
    max_length: the run's max length: examples that reach it were (or may have been) cut.
  """
  ids = tok["input_ids"] if len(tok) else []  # an empty split may have no columns at all
  lengths = np.fromiter((len(x) for x in ids), np.int64, len(ids))
  flat = np.fromiter((t for x in ids for t in x), np.int64, int(lengths.sum()))
  labels = np.asarray(tok["label"] if len(tok) else [], np.int64)
  h = hashlib.sha256()
  for a in (lengths, flat, labels):
    h.update(a.tobytes())
  return {"examples": len(ids), "rows_read": rows_read, "dropped_empty": dropped_empty,
          "subsampled": len(ids) < rows_read, "at_max_length": int((lengths >= max_length).sum()),
          "sha256": h.hexdigest()[:16]}


def read(workdir: str) -> dict | None:
  try:
    with open(os.path.join(workdir, DATA)) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def differences(old: dict, new: dict) -> list[str]:
  """One phrase per split present in both whose content differs."""
  out = []
  for split in sorted(set(old) & set(new)):
    a, b = old[split], new[split]
    if a["sha256"] != b["sha256"]:
      out.append(f"{split}: {b['examples']} examples now (hash {b['sha256']}), "
                 f"{a['examples']} when the run trained (hash {a['sha256']})")
  return out


def check_same(workdir: str, new: dict) -> None:
  """Refuses to resume a run on data other than it started on."""
  old = read(workdir)
  diff = differences(old or {}, new)
  if diff:
    raise UserError(
        f"{workdir} was trained on other data: {'; '.join(diff)}. Resuming would mix two "
        "datasets in one run and score its weights on data they were not selected on. Use a "
        "new --workdir, or restore the data the run started with.")
