"""Tokenisation of task splits into unpadded token id lists, with an on-disk cache."""
import hashlib
import json
import os
from typing import Optional

import datasets

# Bump when the output columns or their meaning change, to invalidate old caches.
_CACHE_VERSION = 1

FEATURES = datasets.Features({
    "input_ids": datasets.List(datasets.Value("int32")),
    "token_type_ids": datasets.List(datasets.Value("int32")),
    "length": datasets.Value("int32"),
    "label": datasets.Value("int64"),
})


def cache_key(ds: datasets.Dataset, tokenizer, max_length: int) -> str:
  """Key of a tokenised split: the tokenizer, max_length and the data's content.

  In-memory datasets get a content-based fingerprint from `datasets`, so the key is
  stable across runs that load the same files.
  """
  parts = [_CACHE_VERSION, type(tokenizer).__name__, str(tokenizer.name_or_path),
           len(tokenizer), int(max_length), ds._fingerprint]
  return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:24]


def encode(tokenizer, texts: list[str], pairs: Optional[list[str]], max_length: int) -> dict:
  """Token ids of `texts` (and `pairs`) as training sees them, unpadded.

  Padding, truncation and max_length are passed on every call because some
  tokenizer.json files (all-MiniLM-L6-v2's among them) carry their own defaults.

  Returns:
    input_ids and token_type_ids (one int list per text, pairs truncated longest-first) and
    length (their lengths).
  """
  enc = tokenizer(texts, pairs, truncation="longest_first", max_length=max_length,
                  padding=False, return_attention_mask=False, return_token_type_ids=True)
  ids = enc["input_ids"]
  types = enc.get("token_type_ids") or [[0] * len(x) for x in ids]
  return {"input_ids": ids, "token_type_ids": types, "length": [len(x) for x in ids]}


def count_truncated(tokenizer, texts: list[str], pairs: Optional[list[str]], max_length: int,
                    lengths) -> int:
  """How many of the texts (and pairs) `encode` cut: those whose whole tokenisation is longer
  than max_length.

  Args:
    lengths: [n] the lengths `encode` gave them.
  """
  # Truncation stops at exactly max_length, so only the texts that came back that long can
  # have been cut; they alone are tokenised again, whole.
  cut = [i for i, n in enumerate(lengths) if n >= max_length]
  if not cut:
    return 0
  # verbose=False: HF warns of every sequence over model_max_length, which is the point here.
  whole = tokenizer([texts[i] for i in cut], None if pairs is None else [pairs[i] for i in cut],
                    truncation=False, padding=False, return_attention_mask=False,
                    return_token_type_ids=False, verbose=False)
  return sum(len(x) > max_length for x in whole["input_ids"])


def tokenize_dataset(ds: datasets.Dataset, tokenizer, max_length: int,
                     cache_dir: Optional[str] = None) -> datasets.Dataset:
  """Tokenises "text" (and "text_pair") without padding (`encode`); batching pads later.

  Args:
    ds: a split from `load_task`, with "text", optionally "text_pair", and "label".
    tokenizer: a Hugging Face tokenizer.
    max_length: longest sequence kept, special tokens included; pairs are truncated
      longest-first.
    cache_dir: if given, the result is written to (and later read from)
      `<cache_dir>/<cache_key>.arrow`.

  Returns:
    Dataset with input_ids [length] int32 lists, token_type_ids [length] int32 lists,
    length (int32) and label (int64), in the order of `ds`.
  """
  pair = "text_pair" in ds.column_names

  def encode_batch(batch):
    out = encode(tokenizer, batch["text"], batch["text_pair"] if pair else None, max_length)
    return {**out, "label": batch["label"]}

  key = cache_key(ds, tokenizer, max_length)
  # Our key is the output's fingerprint; it spares datasets from pickling the tokenizer
  # to hash `encode_batch`, which costs seconds per call.
  kwargs = dict(new_fingerprint=key)
  if cache_dir is not None:
    os.makedirs(cache_dir, exist_ok=True)
    kwargs.update(cache_file_name=os.path.join(cache_dir, key + ".arrow"),
                  load_from_cache_file=True)
  return ds.map(encode_batch, batched=True, remove_columns=ds.column_names, features=FEATURES,
                desc="tokenize", **kwargs)
