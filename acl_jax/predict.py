"""Predictions of a trained run on new texts: label names, probabilities and exit layers.

A `Predictor` classifies texts with a run opened by `run.open(workdir)` (its config, label
names, model and best or latest params), in a jitted, data-parallel forward of every exit. By
default it packs: each batch's texts, in input order, sit several to a row of the run's
max_length (`data.packed_eval_batches`), which gives the logits of the unpacked forward up to
float round-off on far fewer tokens. With `packed=False` it batches by length as `data.eval_batches`
does, sorting a chunk of inputs by token count into batches padded to the run's bucket lengths,
with the run's eval step (`train.step.make_eval_step`). Either way the results come back in
input order. With an exit policy, a multi-exit run stops each example at its own layer on the
layer-skipping fast path (`exits.early_exit_batches`); that path stays unpacked, one text a
row in length-sorted batches, since its rows leave one by one: the rows of a chunk's batches
of one length are pooled, so the later layers still run in full blocks.

`predict_file` reads CSV, TSV or JSONL (a file or stdin) and writes one JSON line per input
row, in input order:
  {<every input column>, "label": name, "probs": {name: p}, "exit_layer": m (early exit only)}
The texts are read from the run's text column(s), or from the columns a `Layout` names or
numbers (a CSV or TSV file without a header row has its columns named "0", "1", ... or by
`Layout.names`). Every input column is written back as it was read, so that predictions join
back to their rows; one named "label", "probs" or "exit_layer" is written as "input.label"
(and so on). Texts longer than the run's max_length are cut to it, as in training, and
counted in one warning.
"""
import dataclasses
import itertools
import json
import logging
import os
import sys
from typing import Any, Iterable, Iterator, Optional, Sequence, Union

import numpy as np

from acl_jax.errors import FileError, UserError, open_input
from acl_jax.data import batching, readers, tasks, tokenize
from acl_jax.run import Run

log = logging.getLogger(__name__)

# Inputs read, tokenised and predicted at a time: bounds memory on large files and stdin.
CHUNK = 4096
# The keys a prediction adds to its input record.
OUTPUT_KEYS = ("label", "probs", "exit_layer")


def softmax(logits: np.ndarray) -> np.ndarray:
  """Probabilities over the last axis, in float64 (logits [..., K] -> [..., K])."""
  x = np.asarray(logits, np.float64)
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


# The batch arrays an unpacked forward reads (a packed one adds `models.bert.PACKED_KEYS`).
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class Predictor:
  """Batched, jitted predictions of a run's exits on new texts."""

  def __init__(self, run: Run, batch_size: int = 0, packed: bool = True):
    """Args: run: from `run.open`; batch_size: texts per batch (0: the run's
    eval_batch_size), a multiple of the device count; packed: several texts to a row
    (the early-exit fast path stays unpacked)."""
    from acl_jax.models import bert  # pylint: disable=import-outside-toplevel
    from acl_jax.train import step as step_lib  # pylint: disable=import-outside-toplevel
    self.run = run
    self.packed = packed
    self._inputs = ("input_ids", "token_type_ids") + bert.PACKED_KEYS if packed else _INPUTS
    self.batch_size = batch_size or int(run.config.eval_batch_size)
    devices = run.mesh.size
    if self.batch_size < 1 or self.batch_size % devices:
      raise UserError(f"batch_size {self.batch_size} must be a positive multiple of the device "
                      f"count {devices}: set --batch_size.")
    t = run.config.task
    self.max_length = int(t.max_length)
    self.boundaries = batching.bucket_boundaries(self.max_length, int(t.num_buckets))
    self.pad_id = run.tokenizer.pad_token_id or 0
    self.packing = batching.Packing(self.max_length, devices)
    # One eval step for both layouts: it reads a packed batch by its keys.
    self._eval_step = step_lib.make_eval_step(run.model, run.mesh)
    self._shard = lambda b: step_lib.shard_batch(b, run.mesh)
    self._to_host = step_lib.to_host
    self._fast_params = None
    self.num_truncated = 0  # texts cut to max_length (`columns`), for `predict_records`' warning

  @property
  def num_exits(self) -> int:
    return len(self.run.model.cfg.exit_layers)

  def columns(self, texts: Sequence[str], pairs: Optional[Sequence[str]] = None
              ) -> batching.Columns:
    """Token columns (`batching.to_columns` form) of the texts, tokenised as in training.

    Texts (with their pairs) longer than max_length are cut to it and added to
    `num_truncated`.
    """
    texts, pairs = list(texts), None if pairs is None else list(pairs)
    enc = tokenize.encode(self.run.tokenizer, texts, pairs, self.max_length)
    lengths = np.asarray(enc["length"], np.int64)
    self.num_truncated += tokenize.count_truncated(self.run.tokenizer, texts, pairs,
                                                   self.max_length, lengths)
    flat = lambda k: (np.concatenate([np.asarray(x, np.int32) for x in enc[k]])
                      if len(lengths) else np.zeros((0,), np.int32))
    return {"input_ids": flat("input_ids"), "token_type_ids": flat("token_type_ids"),
            "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            "length": lengths, "label": np.zeros(len(lengths), np.int64)}

  def _batches(self, cols: batching.Columns):
    return batching.eval_batches(cols, self.batch_size, self.boundaries, pad_id=self.pad_id)

  def logits(self, texts: Sequence[str], pairs: Optional[Sequence[str]] = None) -> np.ndarray:
    """[num_exits, n, K] float32 logits of every exit, in input order."""
    cols = self.columns(texts, pairs)
    n = len(cols["length"])
    out = None
    if self.packed:
      batches = batching.packed_eval_batches(cols, self.batch_size, self.packing,
                                             pad_id=self.pad_id)
    else:
      batches = self._batches(cols)
    for batch in batches:
      inputs = {k: batch[k] for k in self._inputs}
      logits, _ = self._eval_step(self.run.params, self._shard(inputs))
      logits = self._to_host(logits)
      if out is None:
        out = np.zeros((logits.shape[0], n, logits.shape[-1]), np.float32)
      keep = batch["example_id"] >= 0
      out[:, batch["example_id"][keep]] = logits[:, keep]
    if out is None:
      return np.zeros((self.num_exits, 0, len(self.run.label_names)), np.float32)
    return out

  def early_exit(self, texts: Sequence[str], pairs: Optional[Sequence[str]], policy: str,
                 threshold: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-example early exit on the layer-skipping fast path.

    Returns:
      exit_layer: [n] int32, the 1-based layer each example left at.
      logits: [n, K] float32, the logits of that layer's exit.
    """
    import jax  # pylint: disable=import-outside-toplevel
    from acl_jax import exits  # pylint: disable=import-outside-toplevel
    from acl_jax.exits import policies  # pylint: disable=import-outside-toplevel
    cfg = self.run.model.cfg
    if cfg.exits != "all":
      raise UserError(f"{self.run.workdir}: {policies.ONE_EXIT_MSG}; predict without "
                      "--exit_policy, or train with a multi-exit preset (e.g. jt, acl_cl).")
    policies.check_threshold(policy, threshold)
    if self._fast_params is None:  # one device: the fast path is a per-layer jit
      self._fast_params = jax.device_put(jax.device_get(self.run.params))
    cols = self.columns(texts, pairs)
    n = len(cols["length"])
    layer = np.zeros((n,), np.int32)
    out = np.zeros((n, len(self.run.label_names)), np.float32)
    batches = list(self._batches(cols))
    results = exits.early_exit_batches(cfg, self._fast_params, batches, policy, threshold,
                                       block=self.batch_size, with_logits=True)
    for batch, (m, _, lg) in zip(batches, results):
      keep = batch["example_id"] >= 0
      layer[batch["example_id"][keep]] = m[keep]
      out[batch["example_id"][keep]] = lg[keep]
    return layer, out

  def predict_records(self, records: Iterable[dict], columns: Sequence[str],
                      policy: Optional[str] = None, threshold: Any = None,
                      chunk: int = CHUNK) -> Iterator[dict]:
    """One output record per input record, in input order (see the module docstring): the
    input's fields (`output_keys` renames those named like an output key), then "label",
    "probs" and, with a policy, "exit_layer". Logs one warning with the count of texts cut to
    max_length.

    Args:
      records: dicts holding `columns`; a missing or null text is an empty string.
      columns: the text column, or the text and pair columns, to read.
      policy: an early-exit policy (a key of `exits.POLICIES`), or None for the final exit.
      threshold: the policy's threshold.
      chunk: records tokenised and predicted at a time.
    """
    names = self.run.label_names
    it = iter(records)
    total, truncated = 0, self.num_truncated
    while batch := list(itertools.islice(it, chunk)):
      total += len(batch)
      fields = [["" if r.get(c) is None else str(r[c]) for r in batch] for c in columns]
      pairs = fields[1] if len(fields) > 1 else None
      if policy:
        layers, logits = self.early_exit(fields[0], pairs, policy, threshold)
      else:
        layers, logits = None, self.logits(fields[0], pairs)[-1]
      probs = softmax(logits)
      for i, (r, p) in enumerate(zip(batch, probs)):
        rec = {key: r[k] for k, key in output_keys(r).items()}
        rec["label"] = names[int(np.argmax(p))]
        rec["probs"] = {n: round(float(v), 6) for n, v in zip(names, p)}
        if layers is not None:
          rec["exit_layer"] = int(layers[i])
        yield rec
    if truncated := self.num_truncated - truncated:
      log.warning("%d of %d inputs were longer than the run's max_length of %d tokens and were "
                  "cut to it, as in training.", truncated, total, self.max_length)


def output_keys(fields: Iterable[str]) -> dict[str, str]:
  """Input field -> its key in the output record: its own name, or for a field named like an
  output key (`OUTPUT_KEYS`) "input." before it, as often as it takes to be unique."""
  fields = list(fields)
  out = {}
  for f in fields:
    key = f
    while key in OUTPUT_KEYS or (key != f and key in fields):
      key = "input." + key
    out[f] = key
  return out


def input_columns(config) -> list[tuple[str, ...]]:
  """The names a run's text field(s) may have in an input file (`tasks.input_columns`), from
  its config (`Run.config`, or `run.read_config` before the model loads)."""
  t = config.task
  return tasks.input_columns(t.name, t.get("text_column", "text"),
                             t.get("text_pair_column", "") or None)


@dataclasses.dataclass(frozen=True)
class Layout:
  """Where an input file's texts are, when not under the run's own column names.

  Attributes:
    text_column: the text's column, by name or by 0-based position (an int, or a string of
      digits; a column named like a number is taken by its name). None: the run's.
    text_pair_column: the second text's column, likewise, for a run on text pairs; it comes
      with text_column.
    header: whether a CSV or TSV file's first row names its columns. Without a header row,
      the columns are named by their positions, "0", "1", ..., or by `names`.
    names: the column names of a CSV or TSV file without a header row (it implies
      header=False).
  """
  text_column: Optional[Union[str, int]] = None
  text_pair_column: Optional[Union[str, int]] = None
  header: bool = True
  names: Optional[Sequence[str]] = None


def check_output(path: str) -> None:
  """Raises when `path` ("-": stdout) cannot be written, before anything is predicted: its
  folder is missing or not writable, or it is a folder."""
  if path == "-":
    return
  folder = os.path.dirname(path) or "."
  if not os.path.isdir(folder):
    raise FileError(f"--output {path}: the folder {folder} does not exist; create it "
                    f"first (mkdir -p {folder}).")
  if os.path.isdir(path):
    raise FileError(f"--output {path} is a folder; name a file in it, e.g. "
                    f"{os.path.join(path, 'preds.jsonl')}.")
  if not os.access(folder, os.W_OK):
    raise FileError(f"--output {path}: the folder {folder} is not writable.")


def _stdin_lines() -> Iterator[str]:
  """stdin's lines, each decoded as UTF-8 on its own: stdin cannot be read again to find an
  undecodable byte, as a file is, so its line is counted here (and Python's own decoding of
  stdin may let such a byte through as a surrogate, which the tokenizer then refuses). A text
  stream without bytes under it (io.StringIO) is read as it is."""
  if not hasattr(sys.stdin, "buffer"):
    yield from sys.stdin
    return
  for n, raw in enumerate(sys.stdin.buffer, 1):
    try:
      yield raw.decode("utf-8")
    except UnicodeDecodeError as e:
      raise readers.not_utf8("-", readers.undecodable_at(raw, e, n)) from None


def _lines(path: str):
  """(lines, name for messages, the first line, the open file or None): a file, or stdin for
  "-"."""
  if path == "-":
    f, name, own = _stdin_lines(), "<stdin>", None
  else:
    f = own = open_input(path, "--input", encoding="utf-8-sig", newline="")
    name = path
  try:
    first = next(f, "")
  except UnicodeDecodeError:
    if own is not None:
      own.close()
    raise readers.not_utf8(path) from None
  return itertools.chain([first.lstrip("\ufeff")], f), name, first, own


def _show(columns: Sequence[str], width: int = 40) -> str:
  """The column names for a message, each cut to `width` characters: the first row of a file
  without a header row is text."""
  return "[" + ", ".join(repr(c if len(c) <= width else c[:width] + "...") for c in columns) + "]"


def _column(spec: Union[str, int], have: Sequence[str], flag: str, name: str, fmt: str) -> str:
  """The name of the column `spec` picks: a name in `have`, else a 0-based position."""
  spec = str(spec)
  if spec in have:
    return spec
  if spec.isascii() and spec.isdigit():
    if fmt == "jsonl":
      raise UserError(f"{flag} {spec}: {name} is JSONL, whose fields go by name, not "
                      f"position; its first record has {_show(have)}.")
    if int(spec) < len(have):
      return have[int(spec)]
    raise UserError(f"{flag} {spec} is out of range: {name} has {len(have)} columns, at "
                    f"positions 0 to {len(have) - 1}: {_show(have)}.")
  raise UserError(f"{flag} {spec!r} is not a column of {name}; its columns are {_show(have)}.")


def _text_columns(have: Sequence[str], alternatives: Sequence[tuple[str, ...]],
                  layout: Layout, name: str, fmt: str) -> tuple[str, ...]:
  """The column(s) of `have` to read the text (and pair) from: the layout's, else the first
  alternative the input has."""
  want = " or ".join("+".join(repr(c) for c in alt) for alt in alternatives)
  pairs = len(alternatives[0]) > 1
  if layout.text_column is None:
    if layout.text_pair_column is not None:
      raise UserError("--text_pair_column comes with --text_column, the first text's column.")
    cols = next((alt for alt in alternatives if all(c in have for c in alt)), None)
    if cols is None:
      flag = "--text_column and --text_pair_column" if pairs else "--text_column"
      also = ("" if fmt == "jsonl" or not layout.header or layout.names is not None else
              "; a file without a header row also needs --no_header (or --columns NAMES)")
      raise UserError(
          f"{name} ({fmt}) has columns {_show(have)}; this run reads the text column(s) {want}. "
          f"Name the column(s) to read with {flag} (a name, or a 0-based position){also}. "
          f"Pass --format if {fmt} is the wrong guess.")
    return cols
  if pairs and layout.text_pair_column is None:
    raise UserError(f"This run classifies text pairs ({want}): give --text_pair_column with "
                    "--text_column.")
  if not pairs and layout.text_pair_column is not None:
    raise UserError(f"This run classifies single texts ({want}); drop --text_pair_column.")
  specs = [("--text_column", layout.text_column)]
  if pairs:
    specs.append(("--text_pair_column", layout.text_pair_column))
  return tuple(_column(spec, have, flag, name, fmt) for flag, spec in specs)


def _rows_as_records(rows: Iterable[list[str]], reader, columns: list[str], what: str,
                     name: str, fmt: str) -> Iterator[dict]:
  """The rows (of `reader`, a `readers.iter_rows`), each a dict over `columns`; a row with
  another number of fields (an unquoted separator in a text, a cut line) raises, naming its
  line."""
  hint = "quote a field that holds a comma" if fmt == "csv" else "a TSV field holds no tab"
  for row in rows:
    if not row:  # a blank line is no row, as csv.DictReader reads it
      continue
    if len(row) != len(columns):
      raise UserError(f"{name} line {reader.line_num} has {len(row)} fields where {what} has "
                      f"{len(columns)} ({_show(columns)}); every row needs one field per "
                      f"column ({hint}).")
    yield dict(zip(columns, row))


def read_inputs(path: str, fmt: str, alternatives: Sequence[tuple[str, ...]],
                layout: Layout = Layout()) -> tuple[Iterator[dict], tuple[str, ...]]:
  """Records of a CSV, TSV or JSONL file ("-": stdin) and the text column(s) they hold.

  Args:
    path: the file, or "-" for stdin.
    fmt: "csv", "tsv", "jsonl", or "auto": by the file's extension, else from its first line
      (`readers.sniff_format`).
    alternatives: the run's text column names, in order of preference (`input_columns`).
    layout: the text column(s) by name or position, and the columns of a CSV or TSV file
      without a header row.

  Returns:
    (records, columns): one dict per row, holding every field of the row (a CSV or TSV file
    without a header row keyed by `layout.names` or positions "0", "1", ...), and the key(s)
    of the text (and pair): the layout's, else the first alternative the input has.

  Raises:
    UserError: the input is empty or holds a header row alone, is not UTF-8, its text
      column(s) are not in it, a column is named twice, or (once read) a row has another
      number of fields than the header.
  """
  if fmt not in ("auto", *readers.GENERIC_FORMATS):
    raise UserError(f"Unknown input format {fmt!r}; known: auto, "
                    f"{', '.join(readers.GENERIC_FORMATS)}.")
  if layout.names is not None and not layout.names:
    raise UserError("--columns is empty; it names the columns of a file without a header "
                    "row, e.g. --columns=label,title,description.")
  header = layout.header and layout.names is None
  lines, name, first, own = _lines(path)
  try:
    if fmt == "auto":
      fmt = (path != "-" and readers.format_of(path)) or readers.sniff_format(first)
    if fmt == "jsonl":
      if not header:
        raise UserError(f"--no_header and --columns describe CSV or TSV files; {name} is "
                        "JSONL, whose records name their fields.")
      records = readers.iter_records(lines, fmt, name)
      head = next(records, None)
      have = list(head or ())
      records = itertools.chain([head] if head is not None else [], records)
    else:
      rows = reader = readers.iter_rows(lines, fmt)
      head = next((r for r in reader if r), None)  # the first row that is not a blank line
      if layout.names is not None:
        have, what = [str(c) for c in layout.names], "--columns"
      elif not header:
        have, what = [str(i) for i in range(len(head or ()))], "the first row"
      else:
        have, what = list(head or ()), "the header"
      twice = sorted({c for c in have if have.count(c) > 1})
      if twice:
        raise UserError(f"{name}: {what} names the column(s) {twice} more than once; give "
                        "each column its own name, so that each is written back.")
      if not header and head is not None:
        rows = itertools.chain([head], rows)
      records = _rows_as_records(rows, reader, have, what, name, fmt)
    want = ("one JSON object a line" if fmt == "jsonl" else "a header row naming the columns"
            if header else "one row a line")
    if head is None:
      raise UserError(f"{name} holds no records: expected {want} and at least one row to "
                      "classify.")
    cols = _text_columns(have, alternatives, layout, name, fmt)
    first_record = next(records, None)  # the rows under a header row
    if first_record is None:
      raise UserError(f"{name} holds a header row and no records: expected at least one row "
                      "to classify under it.")
    records = itertools.chain([first_record], records)
  except UnicodeDecodeError:
    if own is not None:
      own.close()
    raise readers.not_utf8(path) from None
  except Exception:
    if own is not None:
      own.close()
    raise

  def checked():
    try:
      for n, rec in enumerate(records):
        missing = [c for c in cols if c not in rec]
        if missing:
          raise UserError(f"{name} record {n + 1} has no column(s) {missing}; it has "
                          f"{sorted(rec)}.")
        yield rec
    except UnicodeDecodeError:
      raise readers.not_utf8(path) from None
    finally:
      if own is not None:
        own.close()
  return checked(), cols


def predict_file(run: Run, input_path: str, output_path: str, fmt: str = "auto",
                 batch_size: int = 0, policy: Optional[str] = None,
                 threshold: Any = None, layout: Layout = Layout()) -> int:
  """Classifies every row of `input_path` and writes the JSONL lines to `output_path` ("-":
  stdout; a file is written through a temp file and renamed). Returns the row count.

  The output's folder and the policy are checked before anything is read; `layout` says
  where the texts are (`read_inputs`).
  """
  check_output(output_path)
  if policy:
    from acl_jax.exits import policies  # pylint: disable=import-outside-toplevel
    policies.check_threshold(policy, threshold)  # before reading anything
  records, cols = read_inputs(input_path, fmt, input_columns(run.config), layout)
  return write_predictions(run, records, cols, output_path, batch_size, policy, threshold)


def write_predictions(run: Run, records: Iterable[dict], cols: Sequence[str],
                      output_path: str, batch_size: int = 0, policy: Optional[str] = None,
                      threshold: Any = None) -> int:
  """Classifies `records` (from `read_inputs`, their texts under `cols`) and writes the JSONL
  lines to `output_path`, as `predict_file` does. Returns the row count."""
  predictor = Predictor(run, batch_size)
  out = predictor.predict_records(records, cols, policy, threshold)
  if output_path == "-":
    n = 0
    for rec in out:
      sys.stdout.write(json.dumps(rec, ensure_ascii=False) + "\n")
      n += 1
    sys.stdout.flush()
    return n
  tmp = f"{output_path}.tmp.{os.getpid()}"
  n = 0
  try:
    with open(tmp, "w", encoding="utf-8") as f:
      for rec in out:
        f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        n += 1
    os.replace(tmp, output_path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)
  return n
