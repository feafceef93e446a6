"""Task registry: GLUE, TextGCN corpora, a Rotten Tomatoes quickstart, files, hub datasets.

`load_task(name, ...)` returns a `TaskData` whose splits are `datasets.Dataset`s with
columns "text", optionally "text_pair", and "label" (int64 in 0..K-1). Splits are
"train", "dev" (the split to select checkpoints on) and optionally "test" and, for
MNLI, "dev_mm".
"""
import collections
import dataclasses
import logging
import os
import re
from typing import Any, Callable, NamedTuple, Optional

import datasets
import numpy as np

from acl_jax.errors import FileError, UserError
from acl_jax.names import check_known
from acl_jax.data import hub, readers

log = logging.getLogger(__name__)

GLUE_HUB_PATH = "nyu-mll/glue"
# Metric names understood by acl_jax.metrics; `main_metric` overrides must be one of them.
METRIC_NAMES = ("accuracy", "f1", "macro_f1", "mcc")


class RawTask(NamedTuple):
  """What a loader returns, before empty rows are dropped and labels mapped to ids.

  Attributes:
    splits: split name -> raw columns ("text", maybe "text_pair", "label" strings).
    label_values: raw label strings in label-id order, or None to infer from train.
    label_names: human-readable names in label-id order, or None to reuse label_values.
    sources: split name -> (where its rows come from, what their "row" column counts there):
      ("data/train.csv", "line"), ("stanfordnlp/imdb split 'train'", "row"); for messages
      about labels inferred from the data.
  """
  splits: dict[str, readers.Columns]
  label_values: Optional[tuple[str, ...]]
  label_names: Optional[tuple[str, ...]]
  sources: Optional[dict[str, tuple[str, str]]] = None


@dataclasses.dataclass(frozen=True)
class LoadOptions:
  """Loader options from `load_task`; each loader reads the ones it understands."""
  text: str = "raw"
  val_fraction: float = 0.1
  split_seed: int = 0
  text_column: str = "text"
  text_pair_column: Optional[str] = None
  label_column: str = "label"
  files: Optional[dict[str, str]] = None
  hub_id: str = ""
  hub_config: str = ""
  hub_splits: Optional[dict[str, str]] = None


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """One registered task.

  Attributes:
    name: registry key.
    loader: `loader(spec, data_dir, options) -> RawTask`.
    text_fields: text columns of the loaded splits, ("text",) or ("text", "text_pair").
    label_names: fixed label names in id order, or None when inferred from the data.
    main_metric: metric for model selection on "dev".
    metrics: every metric to report.
    source: loader-specific description (a `readers.GlueFormat`, a folder name, ...).
  """
  name: str
  loader: Callable[["TaskSpec", Optional[str], LoadOptions], RawTask]
  text_fields: tuple[str, ...]
  label_names: Optional[tuple[str, ...]]
  main_metric: str
  metrics: tuple[str, ...]
  source: Any = None


@dataclasses.dataclass
class TaskData:
  """A loaded task.

  Attributes:
    name: registry key of the task.
    splits: split name -> dataset with "text", maybe "text_pair", "label" (int64).
    label_names: names of labels 0..K-1.
    main_metric: metric for model selection on "dev".
    metrics: every metric to report.
    num_dropped: split name -> number of empty rows dropped (on_empty="skip").
  """
  name: str
  splits: dict[str, datasets.Dataset]
  label_names: list[str]
  main_metric: str
  metrics: tuple[str, ...]
  num_dropped: dict[str, int] = dataclasses.field(default_factory=dict)

  @property
  def num_labels(self) -> int:
    return len(self.label_names)


# ---------------------------------------------------------------------------- helpers


def subsample(ds: datasets.Dataset, n: int, seed: int) -> datasets.Dataset:
  """A seeded subsample of n rows (all of them when n is 0 or the dataset is smaller)."""
  if n and len(ds) > n:
    return ds.shuffle(seed=seed).select(range(n))
  return ds


def _is_empty(text) -> bool:
  return text is None or not str(text).strip()


def _drop_empty(cols: readers.Columns) -> tuple[readers.Columns, int]:
  """Drops rows with an empty text, text pair or label (a blank label must not become a
  class of its own)."""
  fields = [k for k in ("text", "text_pair", "label") if k in cols]
  keep = [i for i in range(len(cols["label"]))
          if not any(_is_empty(cols[k][i]) for k in fields)]
  return readers.take(cols, keep), len(cols["label"]) - len(keep)


def _sorted_labels(values) -> tuple[str, ...]:
  """Sorted label set; integer-looking labels sort numerically ("2" before "10")."""
  values = set(values)
  try:
    return tuple(sorted(values, key=int))
  except ValueError:
    return tuple(sorted(values))


_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
# A column of real numbers is a regression target, not classes, when its values barely repeat:
# more distinct values than this, or than half its rows. (Half stars, 0.5 to 5.0, are ten
# classes and pass.)
MAX_NUMERIC_CLASSES = 20


def _number(label: str) -> Optional[float]:
  """The number a label spells ("1", "1.0", "+1", "1e0"), or None for a word."""
  return float(label) if _NUMBER.fullmatch(label.strip()) else None


def _where(raw: RawTask, label: str, limit: int = 3) -> str:
  """Where `label` occurs, for a message: "train.csv lines 2, 5, 8, ..." per source."""
  found: dict[tuple[str, str], set] = {}
  for split, cols in raw.splits.items():
    source = (raw.sources or {}).get(split, (f"split {split!r}", "row"))
    rows = cols.get("row") or [None] * len(cols["label"])
    found.setdefault(source, set()).update(r for v, r in zip(cols["label"], rows) if v == label)
  parts = []
  for (name, unit), rows in found.items():
    if None in rows:  # a source that does not say where its rows are
      parts.append(name)
    elif rows:
      rows = sorted(rows)
      shown = ", ".join(map(str, rows[:limit])) + (", ..." if len(rows) > limit else "")
      parts.append(f"{name} {unit}{'s' if len(rows) > 1 else ''} {shown}")
  return " and ".join(parts)


def _label_values(raw: RawTask, splits: dict[str, readers.Columns]) -> tuple[str, ...]:
  """The label set of a task whose labels are inferred from its data (train's, sorted).

  Refuses numeric labels that are classes by accident: a number spelt two ways ("1" and
  "1.0" would train as two classes), and a column of real numbers (a regression target: every
  value its own class).
  """
  labels = [v for cols in splits.values() for v in cols["label"]]
  counts = collections.Counter(labels)
  numbers = {v: _number(v) for v in counts}
  if numbers and None not in numbers.values():
    wholes = sum(x.is_integer() for x in numbers.values())
    if wholes < len(numbers) and len(numbers) > min(MAX_NUMERIC_CLASSES, len(labels) / 2):
      sources = sorted({name for name, _ in (raw.sources or {}).values()})
      shown = ", ".join(v for v, _ in counts.most_common(3))
      raise UserError(
          f"{', '.join(sources) or 'The task'}: the labels are real numbers ({shown}, ...: "
          f"{len(numbers)} distinct values in {len(labels)} rows), so this is a regression "
          "file; acl-jax trains classifiers, whose labels are classes. Turn the values into "
          "classes first (e.g. bins such as low/high), or set --config.task.label_column to a "
          "column of classes.")
  spellings: dict[float, list[str]] = {}
  for v, x in numbers.items():
    if x is not None:
      spellings.setdefault(x, []).append(v)
  for same in spellings.values():
    if len(same) > 1:
      a, b = sorted(same, key=lambda v: (-counts[v], v))[:2]
      raise UserError(
          f"Labels {a!r} and {b!r} are one number spelt two ways, so they would train as two "
          f"classes: {a!r} on {_where(raw, a)}; {b!r} on {_where(raw, b)}. Write each label "
          f"one way (e.g. {a!r} throughout).")
  return _sorted_labels(splits["train"]["label"])


# ---------------------------------------------------------------------------- loaders


def _glue_dir(spec: TaskSpec, data_dir: str) -> str:
  """The task folder: `<data_dir>/<Task>` or, for a shared data root, `<data_dir>/glue/<Task>`."""
  fmt = spec.source
  for d in (os.path.join(data_dir, fmt.dir_name), os.path.join(data_dir, "glue", fmt.dir_name)):
    if os.path.isdir(d):
      return d
  return os.path.join(data_dir, fmt.dir_name)


def _glue_layout(spec: TaskSpec, data_dir: str) -> str:
  files = ", ".join(os.path.join(data_dir, spec.source.dir_name, f)
                    for f in spec.source.files.values())
  return f"expected the GLUE TSV layout (as from download_glue_data.py): {files}"


def _load_glue(spec: TaskSpec, data_dir: Optional[str], opts: LoadOptions) -> RawTask:
  fmt = spec.source
  if data_dir is None:
    return _load_glue_hub(spec)
  task_dir = _glue_dir(spec, data_dir)
  splits = {}
  for split, fname in fmt.files.items():
    path = os.path.join(task_dir, fname)
    if not os.path.isfile(path):
      raise FileError(f"Missing {path}; {_glue_layout(spec, data_dir)}.")
    splits[split] = readers.read_glue_tsv(path, fmt)
  return RawTask(splits, fmt.label_values, spec.label_names)


def _load_glue_hub(spec: TaskSpec) -> RawTask:
  if hub.offline():
    # Fail before datasets tries the network and hangs on retries or a stale cache.
    raise UserError(
        f"GLUE task {spec.name!r}: the hub is offline (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE "
        "is set) and no data_dir was given. Pass a local folder in GLUE TSV layout, e.g. "
        f"--config.task.data_dir=../shared/data/glue ({_glue_layout(spec, '<data_dir>')}).")
  values = tuple(str(i) for i in range(len(spec.label_names)))
  return RawTask(hub.glue_splits(GLUE_HUB_PATH, spec.source), values, spec.label_names)


def _require_data_dir(spec: TaskSpec, data_dir: Optional[str]) -> str:
  if data_dir is None:
    raise UserError(f"Task {spec.name!r} has no hub source: set data_dir to the folder "
                    f"holding {spec.source}/ (e.g. --config.task.data_dir=../shared/data).")
  return data_dir


def _load_textgcn(spec: TaskSpec, data_dir: Optional[str], opts: LoadOptions) -> RawTask:
  data_dir = _require_data_dir(spec, data_dir)
  split_words, cols = readers.read_textgcn(data_dir, spec.source, opts.text)
  # TextGCN's own rule: a substring search, since 20NG says "20news-bydate-test" and
  # Ohsumed says "training".
  where = {"train": [], "test": []}
  for i, word in enumerate(split_words):
    if "test" in word:
      where["test"].append(i)
    elif "train" in word:
      where["train"].append(i)
    else:
      raise UserError(f"{spec.source}: document {i} has split {word!r}, which names "
                      "neither 'train' nor 'test'.")
  train = readers.take(cols, where["train"])
  kept, held = readers.holdout(len(where["train"]), opts.val_fraction, opts.split_seed)
  splits = {"train": readers.take(train, kept), "dev": readers.take(train, held),
            "test": readers.take(cols, where["test"])}
  return RawTask(splits, _sorted_labels(cols["label"]), None)


def _load_quickstart(spec: TaskSpec, data_dir: Optional[str], opts: LoadOptions) -> RawTask:
  cols = readers.read_quickstart(readers.quickstart_path())
  n = len(cols["label"])
  n_test = int(round(spec.source["test_fraction"] * n))
  n_dev = int(round(opts.val_fraction * n))
  if not (0 < n_dev and n_test + n_dev < n):
    raise UserError(f"val_fraction={opts.val_fraction} leaves an empty quickstart split.")
  # Test comes first in the permutation so it does not move when val_fraction changes.
  perm = np.random.default_rng(opts.split_seed).permutation(n)
  parts = {"test": perm[:n_test], "dev": perm[n_test:n_test + n_dev],
           "train": perm[n_test + n_dev:]}
  splits = {k: readers.take(cols, np.sort(parts[k])) for k in ("train", "dev", "test")}
  return RawTask(splits, ("rotten", "fresh"), spec.label_names)


def _load_generic(spec: TaskSpec, data_dir: Optional[str], opts: LoadOptions) -> RawTask:
  files = dict(opts.files or {})
  unknown = sorted(set(files) - {"train", "dev", "test"})
  if "train" not in files or unknown:
    raise UserError(f"Task {spec.name!r} reads your own {spec.source} files and has no train "
                    "file: set --config.task.train_file=PATH (and optionally task.dev_file, "
                    f"task.test_file){f'; unknown splits {unknown}' if unknown else ''}.")
  splits, sources = {}, {}
  for split, path in files.items():
    if data_dir is not None and not os.path.isabs(path):
      path = os.path.join(data_dir, path)
    ext = readers.format_of(path)
    if ext is not None and ext != spec.source:
      # A TSV read as CSV fails later with a header of one column; say it here.
      raise UserError(f"{path} is a {ext} file but task {spec.name!r} reads {spec.source}: "
                      f"use configs/files.py:{ext} (task.name={ext!r}).")
    splits[split] = readers.read_generic(path, spec.source, opts.text_column,
                                         opts.text_pair_column, opts.label_column)
    sources[split] = (path, "line")
  if "dev" not in splits:
    kept, held = readers.holdout(len(splits["train"]["label"]), opts.val_fraction, opts.split_seed)
    splits["dev"] = readers.take(splits["train"], held)
    splits["train"] = readers.take(splits["train"], kept)
    sources["dev"] = sources["train"]
  return RawTask(splits, None, None, sources)


def _load_hub(spec: TaskSpec, data_dir: Optional[str], opts: LoadOptions) -> RawTask:
  del data_dir
  dataset = hub.open_hub_dataset(opts.hub_id, opts.hub_config)
  wanted = {k: v for k, v in (opts.hub_splits or {"train": "train"}).items() if v}
  unknown = sorted(set(wanted) - {"train", "dev", "test"})
  if "train" not in wanted or unknown:
    raise UserError(f"task.splits maps train (required), dev and test to the dataset's split "
                    f"names; got {opts.hub_splits}.")
  missing = {k: v for k, v in wanted.items() if v not in dataset}
  if missing:
    k, v = next(iter(missing.items()))
    raise UserError(f"Dataset {opts.hub_id!r} has no split {v!r} (task.splits.{k}); its splits "
                    f"are {sorted(dataset)}. Set --config.task.splits.{k}=NAME"
                    + (", or \"\" to hold dev out of train." if k == "dev" else "."))
  columns = {"text": opts.text_column, "label": opts.label_column}
  if opts.text_pair_column:
    columns["text_pair"] = opts.text_pair_column
  splits, sources, class_names = {}, {}, None
  for split, name in wanted.items():
    ds = dataset[name]
    lacking = [c for c in columns.values() if c not in ds.column_names]
    if lacking:
      raise UserError(f"Dataset {opts.hub_id!r} split {name!r} has no column(s) {lacking}; it "
                      f"has {ds.column_names}. Set task.text_column/text_pair_column/"
                      "label_column.")
    cols = {k: list(ds[c]) for k, c in columns.items() if k != "label"}
    cols["label"], names = hub.labels(ds, opts.label_column)
    cols["row"] = list(range(1, len(ds) + 1))
    class_names = class_names or names
    splits[split] = cols
    sources[split] = (f"{opts.hub_id} split {name!r}", "row")
  if "dev" not in splits:
    kept, held = readers.holdout(len(splits["train"]["label"]), opts.val_fraction, opts.split_seed)
    splits["dev"] = readers.take(splits["train"], held)
    splits["train"] = readers.take(splits["train"], kept)
    sources["dev"] = sources["train"]
  if class_names is not None:  # ids in the dataset's own order, named by it
    return RawTask(splits, tuple(str(i) for i in range(len(class_names))), tuple(class_names))
  return RawTask(splits, None, None, sources)


# ---------------------------------------------------------------------------- registry


def _glue(name, fmt, labels, main, metrics):
  fields = ("text", "text_pair") if fmt.pair is not None else ("text",)
  return TaskSpec(name, _load_glue, fields, labels, main, metrics, fmt)


def _tsv(dir_name, header, text, pair, label, values, config, hub_text, hub_pair,
         files=None, hub_splits=None):
  return readers.GlueFormat(
      dir_name, files or {"train": "train.tsv", "dev": "dev.tsv"}, header, text, pair,
      label, values, config, hub_text, hub_pair,
      hub_splits or {"train": "train", "dev": "validation"})


_NLI = ("entailment", "not_entailment")
_MNLI = ("entailment", "neutral", "contradiction")
# Label ids follow the hub's ClassLabel order, so local and hub runs agree.
_GLUE = [
    _glue("cola", _tsv("CoLA", False, 3, None, 1, ("0", "1"), "cola", "sentence", None),
          ("unacceptable", "acceptable"), "mcc", ("mcc", "accuracy")),
    _glue("sst2", _tsv("SST-2", True, "sentence", None, "label", ("0", "1"), "sst2",
                       "sentence", None),
          ("negative", "positive"), "accuracy", ("accuracy",)),
    _glue("mrpc", _tsv("MRPC", True, "#1 String", "#2 String", "Quality", ("0", "1"), "mrpc",
                       "sentence1", "sentence2"),
          ("not_equivalent", "equivalent"), "f1", ("f1", "accuracy")),
    _glue("qqp", _tsv("QQP", True, "question1", "question2", "is_duplicate", ("0", "1"), "qqp",
                      "question1", "question2"),
          ("not_duplicate", "duplicate"), "f1", ("f1", "accuracy")),
    _glue("mnli", _tsv("MNLI", True, "sentence1", "sentence2", "gold_label", _MNLI, "mnli",
                       "premise", "hypothesis",
                       files={"train": "train.tsv", "dev": "dev_matched.tsv",
                              "dev_mm": "dev_mismatched.tsv"},
                       hub_splits={"train": "train", "dev": "validation_matched",
                                   "dev_mm": "validation_mismatched"}),
          _MNLI, "accuracy", ("accuracy",)),
    _glue("qnli", _tsv("QNLI", True, "question", "sentence", "label", _NLI, "qnli", "question",
                       "sentence"),
          _NLI, "accuracy", ("accuracy",)),
    _glue("rte", _tsv("RTE", True, "sentence1", "sentence2", "label", _NLI, "rte", "sentence1",
                      "sentence2"),
          _NLI, "accuracy", ("accuracy",)),
]
# Folder and file stem of each TextGCN corpus, as in text_gcn/data.
_TEXTGCN = {"mr": "mr", "r8": "R8", "r52": "R52", "ohsumed": "ohsumed", "20ng": "20ng"}
_CLASSIFY = ("accuracy", "macro_f1")

TASKS: dict[str, TaskSpec] = {
    **{s.name: s for s in _GLUE},
    **{k: TaskSpec(k, _load_textgcn, ("text",), None, "accuracy", _CLASSIFY, d)
       for k, d in _TEXTGCN.items()},
    "quickstart": TaskSpec("quickstart", _load_quickstart, ("text",), ("rotten", "fresh"),
                           "accuracy", _CLASSIFY, {"test_fraction": 0.1}),
    **{f: TaskSpec(f, _load_generic, ("text",), None, "accuracy", _CLASSIFY, f)
       for f in readers.GENERIC_FORMATS},
    "hub": TaskSpec("hub", _load_hub, ("text",), None, "accuracy", _CLASSIFY, None),
}
# Tasks whose text columns are named by the config (task.text_column, task.text_pair_column).
CONFIGURED_COLUMNS = (*readers.GENERIC_FORMATS, "hub")


def get_task(name: str) -> TaskSpec:
  """Registry lookup; case-, dash- and underscore-insensitive ("SST-2" -> "sst2")."""
  key = name.lower().replace("-", "").replace("_", "")
  if key not in TASKS:
    check_known(name, TASKS, "task")
  return TASKS[key]


def input_columns(name: str, text_column: str = "text",
                  text_pair_column: Optional[str] = None) -> list[tuple[str, ...]]:
  """The names a task's text field(s) go by in a file of new texts to classify.

  Files and hub datasets use the configured columns; GLUE tasks their hub names (e.g.
  ("sentence1", "sentence2") for RTE), or the glue_data TSV header's (MRPC's "#1 String",
  MNLI's "sentence1"), so a task's own dev.tsv can be read as it is; the rest "text".

  Returns:
    Alternatives in order of preference, each a tuple of one column name per text field.
  """
  spec = get_task(name)
  if spec.name in CONFIGURED_COLUMNS:
    return [(text_column,) + ((text_pair_column,) if text_pair_column else ())]
  fmt = spec.source
  if isinstance(fmt, readers.GlueFormat):
    out = [tuple(c for c in (fmt.hub_text, fmt.hub_pair) if c is not None)]
    tsv = tuple(c for c in (fmt.text, fmt.pair) if c is not None)
    if fmt.header and tsv not in out:
      out.append(tsv)
    return out
  return [("text",)]


# ---------------------------------------------------------------------------- load_task


def load_task(name: str, data_dir: Optional[str] = None, *, text: str = "raw",
              val_fraction: float = 0.1, split_seed: int = 0, on_empty: str = "skip",
              text_column: str = "text", text_pair_column: Optional[str] = None,
              label_column: str = "label", files: Optional[dict[str, str]] = None,
              main_metric: Optional[str] = None, hub_id: str = "", hub_config: str = "",
              hub_splits: Optional[dict[str, str]] = None) -> TaskData:
  """Loads a registered task into in-memory datasets.

  Args:
    name: registry key (see `TASKS`), case-insensitive.
    data_dir: local data folder. GLUE: the folder with `<Task>/train.tsv` (or its parent
      holding `glue/`); None loads from the hub. TextGCN: the folder holding `<name>/`.
      Generic: base for relative `files` paths.
    text: TextGCN corpus, "raw" or "clean" (TextGCN's remove_words.py output).
    val_fraction: share of train held out as "dev" where the data has no dev split
      (TextGCN, quickstart, generic files without a dev file).
    split_seed: seed of that held-out split.
    on_empty: "skip" drops rows whose text or label is empty or whitespace (logging the
      count per split); "error" raises.
    text_column: generic files: column with the text.
    text_pair_column: generic files: column with the second text, if any.
    label_column: generic files: column with the label (strings or integers).
    files: generic files: {"train": path, "dev": path, "test": path}; dev/test optional.
    main_metric: overrides the task's model-selection metric (e.g. "macro_f1" for the
      G-Loss protocol on TextGCN).
    hub_id: hub task: a dataset id, or a local folder (`hub.open_hub_dataset`).
    hub_config: hub task: the dataset's config name, if any.
    hub_splits: hub task: {"train": name, "dev": name, "test": name}, the dataset's split
      names; dev and test optional ("" or absent: none; without dev, val_fraction of train is
      held out). Text, pair and label columns are text_column, text_pair_column, label_column.

  Returns:
    The task's splits, label names and metrics.
  """
  spec = get_task(name)
  check_known(on_empty, ("skip", "error"), "on_empty")
  metrics = spec.metrics
  if main_metric is not None:
    check_known(main_metric, METRIC_NAMES, "main_metric")
    metrics = metrics if main_metric in metrics else metrics + (main_metric,)
  opts = LoadOptions(text, val_fraction, split_seed, text_column, text_pair_column,
                     label_column, files, hub_id, hub_config, hub_splits)
  raw = spec.loader(spec, data_dir, opts)

  splits, dropped = {}, {}
  for split, cols in raw.splits.items():
    splits[split], dropped[split] = _drop_empty(cols)
  if any(dropped.values()):
    counts = {k: v for k, v in dropped.items() if v}
    if on_empty == "error":
      raise UserError(f"Task {spec.name!r} has rows whose text or label is empty or "
                      f"whitespace-only: {counts} rows per split. Pass on_empty='skip' to "
                      "drop them.")
    log.warning("Task %r: dropped rows with an empty text or label, per split: %s",
                spec.name, counts)

  values = raw.label_values or _label_values(raw, splits)
  names = list(raw.label_names or values)
  ids = {v: i for i, v in enumerate(values)}
  out = {}
  for split, cols in splits.items():
    labels = []
    for v in cols["label"]:
      if v not in ids:
        raise UserError(f"Task {spec.name!r}, split {split!r}: label {v!r} is not in the "
                        f"label set {list(values)}.")
      labels.append(ids[v])
    out[split] = _to_dataset(cols, labels)
  return TaskData(spec.name, out, names, main_metric or spec.main_metric, metrics, dropped)


def _to_dataset(cols: readers.Columns, labels: list[int]) -> datasets.Dataset:
  data = {"text": [str(t) for t in cols["text"]]}
  features = {"text": datasets.Value("string")}
  if "text_pair" in cols:
    data["text_pair"] = [str(t) for t in cols["text_pair"]]
    features["text_pair"] = datasets.Value("string")
  data["label"] = labels
  features["label"] = datasets.Value("int64")
  return datasets.Dataset.from_dict(data, features=datasets.Features(features))
