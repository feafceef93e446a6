"""Length-bucketed NumPy batches with static shapes.

Everything here is a pure function of its inputs: the training order depends only on
(seed, epoch), so every process computes the same global plan, takes its own slice, and
a run resumed at step S sees exactly the batches an uninterrupted run sees from S on.

Token data is kept as "columns" (see `to_columns`): flat int32 arrays of all token ids
plus per-example offsets, so building a batch is a few vectorised gathers.
"""
from typing import Iterator, Sequence, Union

import datasets
import numpy as np

Columns = dict[str, np.ndarray]
Batch = dict[str, np.ndarray]


def to_columns(tok: Union[datasets.Dataset, Columns]) -> Columns:
  """Converts a tokenised dataset once into flat NumPy columns.

  Args:
    tok: output of `tokenize_dataset`, or columns already converted.

  Returns:
    input_ids [T] int32 and token_type_ids [T] int32 (all examples concatenated),
    offsets [N + 1] int64 (example i is [offsets[i], offsets[i + 1])), length [N] int64,
    label [N] int64.
  """
  if isinstance(tok, dict):
    return tok
  table = tok.with_format("arrow")[:]
  cols = {}
  for name in ("input_ids", "token_type_ids"):
    arr = table.column(name).combine_chunks()
    offsets = np.asarray(arr.offsets, dtype=np.int64)
    values = np.asarray(arr.values, dtype=np.int32)
    # A sliced list array indexes into a larger child array; rebase to start at 0.
    cols[name] = values[offsets[0]:offsets[-1]]
    cols["offsets"] = offsets - offsets[0]
  cols["length"] = np.diff(cols["offsets"])
  cols["label"] = np.asarray(table.column("label"), dtype=np.int64)
  return cols


def bucket_boundaries(max_length: int, num_buckets: int = 4) -> tuple[int, ...]:
  """Evenly spaced padded lengths, rounded up to multiples of 8, ending at max_length.

  For 128 and 4 buckets: (32, 64, 96, 128). Each boundary is one compiled shape.
  """
  if num_buckets < 1 or max_length < 1:
    raise ValueError(f"Need max_length >= 1 and num_buckets >= 1, got {max_length}, "
                     f"{num_buckets}.")
  out = []
  for i in range(1, num_buckets + 1):
    b = -(-max_length * i // num_buckets)
    b = min(max_length, -(-b // 8) * 8)
    if not out or b > out[-1]:
      out.append(b)
  return tuple(out)


def _seq_len(max_len: int, boundaries: Sequence[int]) -> int:
  i = int(np.searchsorted(boundaries, max_len, side="left"))
  if i == len(boundaries):
    raise ValueError(f"An example of length {max_len} exceeds the largest bucket "
                     f"{boundaries[-1]}; tokenise with max_length <= {boundaries[-1]}.")
  return int(boundaries[i])


def num_train_batches(num_examples: int, global_batch_size: int) -> int:
  """Batches per epoch; the last incomplete batch is dropped to keep shapes static."""
  return num_examples // global_batch_size


def train_plan(lengths: np.ndarray, global_batch_size: int, seed: int, epoch: int,
               boundaries: Sequence[int], chunk_batches: int = 50,
               shuffle_within: bool = False) -> list[tuple[int, np.ndarray]]:
  """The global batches of one epoch.

  Shuffles, drops the remainder, then sorts each chunk of `chunk_batches` batches by
  length so batches hold similar lengths while the epoch stays well mixed; finally
  shuffles the batch order. With `shuffle_within`, each batch's examples are then shuffled
  (by a stream of their own, so the batches and their order do not change): a batch is
  padded to one length anyway, and its contiguous per-device shards become random draws
  instead of length strata (device 0 would always get the shortest examples).

  Args:
    lengths: [N] token count of every example.
    global_batch_size: examples per global batch.
    seed: run seed.
    epoch: epoch number; the plan is a pure function of (seed, epoch).
    boundaries: allowed padded lengths, ascending.
    chunk_batches: batches per length-sorted chunk.
    shuffle_within: shuffle the examples inside each batch (for several devices).

  Returns:
    num_train_batches(N, global_batch_size) pairs (seq_len, indices [global_batch_size]).
  """
  lengths = np.asarray(lengths)
  rng = np.random.default_rng([seed, epoch])
  n_batches = num_train_batches(len(lengths), global_batch_size)
  perm = rng.permutation(len(lengths))[:n_batches * global_batch_size]
  chunk = chunk_batches * global_batch_size
  batches = []
  for start in range(0, len(perm), chunk):
    part = perm[start:start + chunk]
    part = part[np.argsort(lengths[part], kind="stable")]
    for b in range(0, len(part), global_batch_size):
      idx = part[b:b + global_batch_size]
      batches.append((_seq_len(int(lengths[idx].max()), boundaries), idx))
  order = rng.permutation(len(batches))
  batches = [batches[i] for i in order]
  if shuffle_within:
    within = np.random.default_rng([seed, epoch, 1])
    batches = [(seq_len, within.permutation(idx)) for seq_len, idx in batches]
  return batches


def process_slice(indices: np.ndarray, process_index: int, process_count: int) -> np.ndarray:
  """This process's contiguous share of a global batch.

  Args:
    indices: [global_batch] example indices.
    process_index: this process, in [0, process_count).
    process_count: number of processes.

  Returns:
    [global_batch // process_count] indices.
  """
  n = len(indices)
  if n % process_count:
    raise ValueError(f"Global batch size {n} is not divisible by process_count "
                     f"{process_count}.")
  if not 0 <= process_index < process_count:
    raise ValueError(f"process_index {process_index} not in [0, {process_count}).")
  per = n // process_count
  return indices[process_index * per:(process_index + 1) * per]


def make_batch(cols: Columns, indices: np.ndarray, seq_len: int, pad_id: int = 0) -> Batch:
  """Pads the given examples to seq_len.

  Rows with index -1 are padding: they get example_mask 0, label 0, and attend only to
  their first position, so no attention row is fully masked.

  Args:
    cols: output of `to_columns`.
    indices: [b] example indices, -1 for padding rows.
    seq_len: padded length; must be >= every selected example's length.
    pad_id: the tokenizer's pad token id.

  Returns:
    input_ids, attention_mask, token_type_ids [b, seq_len] int32; labels [b] int32;
    example_mask [b] float32; index [b] int64 (copy of `indices`).
  """
  indices = np.asarray(indices, dtype=np.int64)
  real = indices >= 0
  safe = np.where(real, indices, 0)
  length = np.where(real, cols["length"][safe], 0)
  if length.size and length.max() > seq_len:
    raise ValueError(f"Example of length {length.max()} does not fit seq_len {seq_len}.")
  pos = np.arange(seq_len)[None, :]
  mask = pos < length[:, None]
  flat = np.minimum(cols["offsets"][safe][:, None] + pos, max(len(cols["input_ids"]) - 1, 0))
  input_ids = np.where(mask, cols["input_ids"][flat], pad_id).astype(np.int32)
  token_type_ids = np.where(mask, cols["token_type_ids"][flat], 0).astype(np.int32)
  attention_mask = mask.astype(np.int32)
  attention_mask[~real, 0] = 1
  return {
      "input_ids": input_ids,
      "attention_mask": attention_mask,
      "token_type_ids": token_type_ids,
      "labels": np.where(real, cols["label"][safe], 0).astype(np.int32),
      "example_mask": real.astype(np.float32),
      "index": indices,
  }


def train_batches(tok: Union[datasets.Dataset, Columns], global_batch_size: int, seed: int,
                  start_step: int, boundaries: Sequence[int], process_index: int = 0,
                  process_count: int = 1, pad_id: int = 0, shuffle_within: bool = False
                  ) -> Iterator[tuple[int, Batch]]:
  """Endless (step, batch) stream from start_step; step s is batch s % E of epoch s // E.

  Args:
    tok: tokenised train split or its `to_columns` form.
    global_batch_size: examples per step over all processes.
    seed: run seed.
    start_step: first step to yield (resume point).
    boundaries: allowed padded lengths.
    process_index: this process.
    process_count: number of processes; each yields its slice of every global batch.
    pad_id: the tokenizer's pad token id.
    shuffle_within: see `train_plan` (set it when the batch is split over several devices).

  Yields:
    (step, batch) with batch as in `make_batch`, [global_batch_size // process_count] rows.
  """
  cols = to_columns(tok)
  per_epoch = num_train_batches(len(cols["length"]), global_batch_size)
  if per_epoch == 0:
    raise ValueError(f"{len(cols['length'])} examples make no full batch of "
                     f"{global_batch_size}.")
  step, plan, plan_epoch = start_step, None, None
  while True:
    epoch, pos = divmod(step, per_epoch)
    if epoch != plan_epoch:
      plan, plan_epoch = train_plan(cols["length"], global_batch_size, seed, epoch,
                                    boundaries, shuffle_within=shuffle_within), epoch
    seq_len, idx = plan[pos]
    yield step, make_batch(cols, process_slice(idx, process_index, process_count), seq_len,
                           pad_id)
    step += 1


def eval_batches(tok: Union[datasets.Dataset, Columns], batch_size: int,
                 boundaries: Sequence[int], process_index: int = 0, process_count: int = 1,
                 pad_id: int = 0) -> Iterator[Batch]:
  """Batches covering every example exactly once, sorted by length.

  The last global batch is filled with padding rows (index -1, example_mask 0). Gather
  predictions with `batch["index"]` to restore the original order.

  Args:
    tok: tokenised split or its `to_columns` form.
    batch_size: global rows per batch.
    boundaries: allowed padded lengths.
    process_index: this process.
    process_count: number of processes; each yields its slice of every global batch.
    pad_id: the tokenizer's pad token id.

  Yields:
    Batches as in `make_batch`, [batch_size // process_count] rows each.
  """
  cols = to_columns(tok)
  order = np.argsort(cols["length"], kind="stable")
  n_batches = -(-len(order) // batch_size)
  padded = np.full(n_batches * batch_size, -1, dtype=np.int64)
  padded[:len(order)] = order
  for b in range(n_batches):
    idx = padded[b * batch_size:(b + 1) * batch_size]
    real = idx[idx >= 0]
    seq_len = _seq_len(int(cols["length"][real].max()), boundaries)
    yield make_batch(cols, process_slice(idx, process_index, process_count), seq_len, pad_id)
