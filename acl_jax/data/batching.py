"""NumPy batches with static shapes: length-bucketed, or packed several examples to a row.

Everything here is a pure function of its inputs: the training order depends only on
(seed, epoch), so every process computes the same global plan, takes its own slice, and
a run resumed at step S sees exactly the batches an uninterrupted run sees from S on.

Token data is kept as "columns" (see `to_columns`): flat int32 arrays of all token ids
plus per-example offsets, so building a batch is a few vectorised gathers.

Every batch names its examples by `example_id` ([examples] int32, the dataset index; -1 for a
padding slot): training keys an example's randomness by it (dropout, the G-Loss split) and
evaluation and prediction put outputs back in dataset order with it.
"""
import dataclasses
from typing import Any, Iterator, Sequence, Union

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
    example_mask [b] float32; example_id [b] int32 (`indices`).
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
      "example_id": indices.astype(np.int32),
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
  plan_of = lambda epoch: train_plan(cols["length"], global_batch_size, seed, epoch, boundaries,
                                     shuffle_within=shuffle_within)
  for step, (seq_len, idx) in _planned_steps(len(cols["length"]), global_batch_size, start_step,
                                             plan_of):
    yield step, make_batch(cols, process_slice(idx, process_index, process_count), seq_len,
                           pad_id)


def _planned_steps(n: int, global_batch_size: int, start_step: int, plan_of
                   ) -> Iterator[tuple[int, Any]]:
  """Endless (step, entry) from start_step: entry s % E of `plan_of(s // E)`, the epoch's
  plan of E = num_train_batches batches, each plan computed once."""
  per_epoch = num_train_batches(n, global_batch_size)
  if per_epoch == 0:
    raise ValueError(f"{n} examples make no full batch of {global_batch_size}.")
  step, plan, plan_epoch = start_step, None, None
  while True:
    epoch, pos = divmod(step, per_epoch)
    if epoch != plan_epoch:
      plan, plan_epoch = plan_of(epoch), epoch
    yield step, plan[pos]
    step += 1


def eval_batches(tok: Union[datasets.Dataset, Columns], batch_size: int,
                 boundaries: Sequence[int], process_index: int = 0, process_count: int = 1,
                 pad_id: int = 0) -> Iterator[Batch]:
  """Batches covering every example exactly once, sorted by length.

  The last global batch is filled with padding rows (example_id -1, example_mask 0). Gather
  predictions with `batch["example_id"]` to restore the original order.

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


# ----------------------------------------------------------------------------------------------
# Packed batches: several examples per row.
#
# A packed batch holds a fixed number of examples per device (the unpacked batch's rows) in as
# few rows of seq_len tokens as fit, so a step computes on real tokens instead of padding.
# Each device's share of the examples (a contiguous block, as `shard_batch` splits [N]
# arrays) is packed into rows of its own, and every device gets the same row count, the
# smallest of a few static buckets that fits them all, so jit compiles a handful of shapes.
# Sharding every array of the batch along axis 0 then gives each device its own examples and
# exactly the rows that hold them; the in-row indices (`cls_index`, `token_example`) are local
# to the device's block.


def first_fit_decreasing(lengths: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
  """Packs items into bins of `capacity`: longest first, each into the first bin it fits.

  Args:
    lengths: [n] item sizes, each in [1, capacity].
    capacity: bin size.

  Returns:
    row [n] (the bin of each item, bins numbered in order of opening) and offset [n] (where
    the item starts in its bin). The bin count is row.max() + 1.
  """
  lengths = np.asarray(lengths, np.int64)
  if lengths.size and (lengths.min() < 1 or lengths.max() > capacity):
    raise ValueError(f"Item sizes must be in [1, {capacity}], got {lengths.min()}.."
                     f"{lengths.max()}: tokenise with max_length <= the packed row length.")
  row = np.zeros(len(lengths), np.int64)
  offset = np.zeros(len(lengths), np.int64)
  used: list[int] = []
  for i in np.argsort(-lengths, kind="stable"):
    n = int(lengths[i])
    r = next((r for r, u in enumerate(used) if u + n <= capacity), len(used))
    if r == len(used):
      used.append(0)
    row[i], offset[i] = r, used[r]
    used[r] += n
  return row, offset


def row_buckets(examples_per_shard: int, num_buckets: int = 8) -> tuple[int, ...]:
  """Allowed row counts of one device's packed rows: evenly spaced, up to one row per example.

  For 32 examples and 8 buckets: (4, 8, ..., 32); for 16 buckets, every 2 rows. Each bucket
  that occurs is one compiled shape; finer buckets waste fewer rows.
  """
  if examples_per_shard < 1 or num_buckets < 1:
    raise ValueError(f"Need examples_per_shard >= 1 and num_buckets >= 1, got "
                     f"{examples_per_shard}, {num_buckets}.")
  return tuple(sorted({-(-examples_per_shard * i // num_buckets)
                       for i in range(1, num_buckets + 1)}))


def packed_rows(lengths: np.ndarray, seq_len: int, num_shards: int,
                buckets: Sequence[int]) -> int:
  """Rows per shard that hold every shard's examples: the smallest bucket >= the most rows
  first-fit-decreasing needs on any shard.

  Args:
    lengths: [n] lengths of a global batch's examples (0 for padding slots), n divisible by
      num_shards; shard s holds the s-th contiguous block.
    seq_len: tokens per row.
    num_shards: devices over all processes.
    buckets: allowed row counts, ascending (`row_buckets`).
  """
  blocks = np.asarray(lengths).reshape(num_shards, -1)
  need = max((int(first_fit_decreasing(b[b > 0], seq_len)[0].max(initial=-1)) + 1
              for b in blocks), default=0)
  i = int(np.searchsorted(buckets, max(need, 1), side="left"))
  if i == len(buckets):
    raise ValueError(f"A shard needs {need} packed rows, more than the largest bucket "
                     f"{buckets[-1]}; use buckets up to the examples per shard.")
  return int(buckets[i])


def make_packed_batch(cols: Columns, indices: np.ndarray, seq_len: int, num_rows: int,
                      num_shards: int = 1, pad_id: int = 0) -> Batch:
  """Packs the given examples into `num_shards` blocks of `num_rows` rows of `seq_len` tokens.

  Shard s packs the s-th contiguous block of `indices` by `first_fit_decreasing`. Examples
  keep the order of `indices` in every per-example array; -1 marks a padding slot
  (example_mask 0, label 0, no tokens, cls_index 0).

  Args:
    cols: output of `to_columns`.
    indices: [n] example indices, -1 for padding; n divisible by num_shards.
    seq_len: tokens per row; >= every selected example's length.
    num_rows: rows per shard (`packed_rows`).
    num_shards: blocks (this process's devices).
    pad_id: the tokenizer's pad token id.

  Returns:
    Per token, [num_shards * num_rows, seq_len] int32: input_ids, token_type_ids (each
    example's own, so a pair keeps its segment A/B types), segment_ids (0 padding, j >= 1 the
    row's j-th example), position_ids (restarting at 0 per example), token_example (the
    example's slot in its shard, 0..n/num_shards-1; n/num_shards for padding). Per example,
    [n]: cls_index int32 (row * seq_len + start of the example, its row counted inside its
    shard's block), labels int32, example_mask float32, example_id int32 (`indices`).
    The `PACKED_KEYS` of `models.bert` make it a packed batch for the model.
  """
  indices = np.asarray(indices, dtype=np.int64)
  n = len(indices)
  if n % num_shards:
    raise ValueError(f"{n} examples do not split into {num_shards} shards; use a batch size "
                     "divisible by the device count.")
  per = n // num_shards
  real = indices >= 0
  safe = np.where(real, indices, 0)
  length = np.where(real, cols["length"][safe], 0)
  if length.size and length.max() > seq_len:
    raise ValueError(f"Example of length {length.max()} does not fit seq_len {seq_len}.")
  rows = num_shards * num_rows
  shape = (rows, seq_len)
  out = {k: np.zeros(shape, np.int32) for k in ("input_ids", "token_type_ids", "segment_ids",
                                                 "position_ids")}
  out["input_ids"][:] = pad_id
  out["token_example"] = np.full(shape, per, np.int32)
  cls_index = np.zeros(n, np.int32)
  for s in range(num_shards):
    block = slice(s * per, (s + 1) * per)
    slots = np.flatnonzero(real[block])
    row, offset = first_fit_decreasing(length[block][slots], seq_len)
    if len(slots) and row.max() >= num_rows:
      raise ValueError(f"Shard {s} needs {row.max() + 1} rows, more than num_rows "
                       f"{num_rows}; take num_rows from packed_rows.")
    for slot, r, o in zip(slots, row, offset):
      i = s * per + slot
      m, start = int(length[i]), int(cols["offsets"][safe[i]])
      gr, span = s * num_rows + r, slice(o, o + m)
      out["input_ids"][gr, span] = cols["input_ids"][start:start + m]
      out["token_type_ids"][gr, span] = cols["token_type_ids"][start:start + m]
      out["segment_ids"][gr, span] = 1 + np.count_nonzero((row == r) & (offset < o))
      out["position_ids"][gr, span] = np.arange(m)
      out["token_example"][gr, span] = slot
      cls_index[i] = r * seq_len + o
  out.update(cls_index=cls_index,
             labels=np.where(real, cols["label"][safe], 0).astype(np.int32),
             example_mask=real.astype(np.float32), example_id=indices.astype(np.int32))
  return out


@dataclasses.dataclass(frozen=True)
class Packing:
  """How batches are packed (`make_packed_batch`).

  Attributes:
    seq_len: tokens per row (the task's max_length).
    num_shards: devices over all processes; each packs its own contiguous share of a batch's
      examples, and every array of the batch is split over them along axis 0.
    num_buckets: row-count buckets per shard (`row_buckets`); only the buckets that occur
      compile.
  """
  seq_len: int
  num_shards: int = 1
  num_buckets: int = 16

  def buckets(self, batch_size: int) -> tuple[int, ...]:
    """The allowed rows per shard of a global batch of `batch_size` examples."""
    if batch_size % self.num_shards:
      raise ValueError(f"Batch size {batch_size} is not divisible by the {self.num_shards} "
                       "devices packing it; use a multiple of the device count.")
    return row_buckets(batch_size // self.num_shards, self.num_buckets)

  def batch(self, cols: Columns, indices: np.ndarray, process_index: int = 0,
            process_count: int = 1, pad_id: int = 0) -> Batch:
    """This process's part of the packed global batch of `indices` ([global batch], -1 for
    padding): its contiguous slice, its devices' rows. The row count is computed from the
    whole global batch, so every process and device agrees on it."""
    if self.num_shards % process_count:
      raise ValueError(f"{self.num_shards} devices do not split over {process_count} "
                       "processes evenly.")
    indices = np.asarray(indices, np.int64)
    lengths = np.where(indices >= 0, cols["length"][np.maximum(indices, 0)], 0)
    rows = packed_rows(lengths, self.seq_len, self.num_shards, self.buckets(len(indices)))
    return make_packed_batch(cols, process_slice(indices, process_index, process_count),
                             self.seq_len, rows, self.num_shards // process_count, pad_id)


def random_plan(num_examples: int, global_batch_size: int, seed: int,
                epoch: int) -> list[np.ndarray]:
  """The global batches of one epoch, drawn uniformly: the epoch's permutation (the one
  `train_plan` starts from) cut into batches, the incomplete last one dropped.

  Packed batches need no length grouping (padding no longer depends on which examples meet),
  so which examples share a contrastive or graph loss is a uniform draw.
  """
  rng = np.random.default_rng([seed, epoch])
  n_batches = num_train_batches(num_examples, global_batch_size)
  perm = rng.permutation(num_examples)[:n_batches * global_batch_size]
  return list(perm.reshape(n_batches, global_batch_size))


def packed_train_batches(tok: Union[datasets.Dataset, Columns], global_batch_size: int,
                         seed: int, start_step: int, packing: Packing, process_index: int = 0,
                         process_count: int = 1, pad_id: int = 0
                         ) -> Iterator[tuple[int, Batch]]:
  """Endless (step, packed batch) stream from start_step, as `train_batches`, with the
  batches of `random_plan` packed by `packing`.

  Yields:
    (step, batch), batch as in `make_packed_batch`, this process's
    global_batch_size // process_count examples in its devices' rows.
  """
  cols = to_columns(tok)
  n = len(cols["length"])
  plan_of = lambda epoch: random_plan(n, global_batch_size, seed, epoch)
  for step, idx in _planned_steps(n, global_batch_size, start_step, plan_of):
    yield step, packing.batch(cols, idx, process_index, process_count, pad_id)


def packed_eval_batches(tok: Union[datasets.Dataset, Columns], batch_size: int,
                        packing: Packing, process_index: int = 0, process_count: int = 1,
                        pad_id: int = 0) -> Iterator[Batch]:
  """Packed batches covering every example exactly once, in dataset order.

  Dataset order, not length order: a batch of similar lengths packs worse than a mixed one.
  The last global batch is filled with padding slots (example_id -1, example_mask 0); gather
  predictions with `batch["example_id"]`.

  Yields:
    Batches as in `make_packed_batch`, [batch_size // process_count] examples each.
  """
  cols = to_columns(tok)
  n = len(cols["length"])
  n_batches = -(-n // batch_size)
  padded = np.full(n_batches * batch_size, -1, dtype=np.int64)
  padded[:n] = np.arange(n)
  for b in range(n_batches):
    yield packing.batch(cols, padded[b * batch_size:(b + 1) * batch_size], process_index,
                        process_count, pad_id)
