"""The base config shared by every task config, method presets and the runlocal shrink.

Task configs (`glue.py`, `textgcn.py`, `quickstart.py`) call `base_config()`, set their task
fields, then `apply_args(config, arg)`, where `arg` is a comma-separated list of a method
preset name and optionally `runlocal`, e.g. `--config configs/glue.py:rte,acl,runlocal`.
"""
import difflib
import functools

import ml_collections

from acl_jax.errors import UserError
from acl_jax.names import check_known, lookup
from acl_jax.train.objectives import GATE_FIELDS, LOSSES, spec_default

# Method presets: a loss family and overrides on top of its SPEC defaults. A preset writes its
# family's defaults (`acl_jax.train.objectives.LOSSES[name].defaults`: lambda, tau, sigma, ...)
# into the config, so that config.json states them, then its own fields.
METHODS = {
    "ce": dict(name="ce"),
    "scl": dict(name="scl"),
    "acl_embed": dict(name="acl_embed"),
    "acl": dict(name="acl_embed", gate=True),
    "scl_grad": dict(name="scl", gate=True),
    "gloss": dict(name="gloss", sigma_mode="fixed"),
    "gloss_sqrt": dict(name="gloss", sigma_mode="sqrt"),
    "triplet": dict(name="triplet", lam=0.5),
    "cosine": dict(name="cosine", lam=0.5),
}
# Multi-exit presets (SPEC §3): an exit on every layer and a training strategy. ACL-CL's
# final exit trains with CE + lambda ACL-Embed, gated by ACL-Grad.
MULTI_EXIT = {
    "jt": dict(strategy="jt"), "2st": dict(strategy="2st"), "alt": dict(strategy="alt"),
    "kd": dict(strategy="kd"), "acl_cl": dict(strategy="acl_cl"),
}


# Dotted field -> its one-line doc (and section name -> the section's), filled by `field` as
# `base_config` declares them; `print_config` shows them beside the values.
FIELD_DOCS: dict[str, str] = {}


def field(config: ml_collections.ConfigDict, path: str, value, doc: str) -> None:
  """Declares `config.<path> = value` with its one-line doc; sections are made as needed."""
  *parents, leaf = path.split(".")
  node = config
  for p in parents:
    if p not in node:
      node[p] = ml_collections.ConfigDict()
    node = node[p]
  node[leaf] = value
  FIELD_DOCS[path] = doc


def section(config: ml_collections.ConfigDict, name: str, doc: str) -> None:
  """Declares an empty section `config.<name>` with its doc."""
  config[name] = ml_collections.ConfigDict()
  FIELD_DOCS[name] = doc


def base_config() -> ml_collections.ConfigDict:
  """Every field a run has, with SPEC's defaults; each declared once with its doc."""
  c = ml_collections.ConfigDict()
  f = functools.partial(field, c)
  f("seed", 0, "seeds the init of fresh heads, dropout, data order and train subsampling")

  section(c, "task", "what to train on: the task, its data, its splits and tokenisation")
  f("task.name", "", "a key of acl_jax.data.TASKS (glue tasks, textgcn corpora, quickstart, "
    "csv/tsv/jsonl files, hub)")
  f("task.data_dir", "", "local data root; \"\" = the hub (GLUE) or the packaged quickstart data")
  f("task.text", "raw", "TextGCN: \"raw\" or \"clean\" corpus")
  f("task.val_fraction", 0.1, "share of train held out as dev where the data has no dev split "
    "(TextGCN, quickstart, files or hub datasets without one)")
  f("task.split_seed", 0, "seed of that held-out dev split")
  f("task.on_empty", "skip", "rows with an empty text or label: \"skip\" (counted, logged) or "
    "\"error\"")
  f("task.text_column", "text", "files and hub datasets: the column with the text")
  f("task.text_pair_column", "", "files and hub datasets: the column with the second text of "
    "a pair (\"\" = single texts)")
  f("task.label_column", "label", "files and hub datasets: the column with the label")
  f("task.train_file", "", "files (csv/tsv/jsonl tasks): the train file, relative to data_dir "
    "if that is set")
  f("task.dev_file", "", "files: the dev file (\"\" = val_fraction of train held out)")
  f("task.test_file", "", "files: the test file (\"\" = none)")
  f("task.hub_id", "", "hub task: a dataset id on the HF hub (e.g. stanfordnlp/imdb) or a local "
    "folder (save_to_disk output, or data files)")
  f("task.hub_config", "", "hub task: the dataset's config name, if it has several (e.g. sst2 "
    "of nyu-mll/glue)")
  f("task.splits.train", "train", "hub task: the dataset's split to train on")
  f("task.splits.dev", "validation", "hub task: the dataset's split to select checkpoints on "
    "(\"\" = val_fraction of train held out)")
  f("task.splits.test", "test", "hub task: the dataset's test split (\"\" = none)")
  f("task.main_metric", "", "metric that selects checkpoints; \"\" = the task's own")
  f("task.max_length", 128, "longest token sequence, special tokens included; longer ones "
    "are truncated")
  f("task.packing", True, "pack several examples into each row (block-diagonal attention, "
    "positions per example; exact): fewer padding tokens per step. Training batches are "
    "drawn uniformly at random. False = one example a row, batches grouped by length "
    "(task.num_buckets)")
  f("task.num_buckets", 4, "static sequence lengths for length bucketing (one compile each)")
  f("task.max_train_examples", 0, "0 = all; else a seeded subsample (stated in results)")
  f("task.max_eval_examples", 0, "0 = all; else the first n of a fixed shuffle of each eval "
    "split")

  section(c, "model", "the encoder and its exit heads")
  f("model.name", "minilm-l6", "alias, local HF folder, or hub id (e.g. bert-base-uncased)")
  f("model.exits", "last", "\"last\" or \"all\" (an exit head on every layer)")
  f("model.head", "", "exit heads: \"\" = the checkpoint's fine-tuned head if it has one, else "
    "\"linear\" (SPEC: a linear layer on the [CLS] state); \"bert_pooler\", \"roberta\" or "
    "\"distilbert\" build HF's heads, which export.py writes as HF folders")
  f("model.exit_pooling", "cls", "what each exit reads from its layer: \"cls\" (SPEC) or "
    "\"mean\" (masked token mean)")
  f("model.dtype", "float32", "compute dtype; \"bfloat16\" on accelerators")
  f("model.dropout", -1.0, "hidden and attention dropout; < 0 keeps the checkpoint's")
  f("model.ignore_head", False, "start a fresh head on a checkpoint fine-tuned for other labels")

  section(c, "loss", "the training objective (method presets set these)")
  f("loss.name", "ce", f"a key of acl_jax.train.objectives.LOSSES: {', '.join(LOSSES)}")
  f("loss.class_weights", "", "\"\" or \"balanced\" (sklearn's class-balanced CE)")
  spec_lams = ", ".join(f"{k} {v.defaults['lam']}" for k, v in LOSSES.items()
                        if "lam" in v.defaults)
  f("loss.lam", -1.0, f"weight of the auxiliary loss; -1 = the loss's SPEC default ({spec_lams}; "
    "the others have none, the triplet and cosine presets set 0.5)")
  # The form that is not the loss's own is an ablation, e.g. SCL in ACL's additive form for the
  # lambda study.
  f("loss.combine", "", "how lam mixes the auxiliary loss L with CE: \"convex\" (1-lam) CE + "
    "lam L, \"additive\" CE + lam L, \"\" = the loss's own (SPEC: additive for ACL-Embed, "
    "convex for the others)")
  f("loss.tau", spec_default("tau"), "contrastive temperature (SCL, ACL-Embed, ACL-CL)")
  f("loss.anchors", "all", "ACL-Embed anchors: \"all\" (samples and label embeddings) or "
    "\"samples\"")
  f("loss.gate", False, "ACL-Grad: gate the auxiliary term by its gradient's angle to CE's")
  f("loss.gate_threshold", 90.0, "ACL-Grad: the angle (degrees) above which the term is gated")
  f("loss.gate_mode", "drop", "ACL-Grad: \"drop\" the conflicting term or \"project\" it")
  f("loss.angle_params", "all", "ACL-Grad angle over \"all\" params, the \"encoder\" (no "
    "heads/LayerNorm/biases) or the \"top\" layer and heads")
  f("loss.gamma_keep", -1.0, "G-Loss: fraction of the batch that KEEPS its labels (the code's "
    "gamma); set at most one of gamma_keep/gamma_hide, neither = SPEC's 0.7")
  f("loss.gamma_hide", -1.0, "G-Loss: fraction hidden = 1 - gamma_keep (the paper's wording)")
  f("loss.sigma", spec_default("sigma"), "G-Loss: Gaussian kernel width")
  f("loss.sigma_mode", "fixed", "G-Loss: \"fixed\" (loss.sigma) or \"sqrt\" (heuristic on "
    "pretrained features)")
  f("loss.gloss_form", "clean", "G-Loss: \"clean\" or \"official\" form")
  f("loss.gloss_global", False, "data parallel: one G-Loss graph over the gathered global batch")
  f("loss.contrastive_global", False, "data parallel: SCL, ACL-Embed, ACL-CL, triplet and cosine "
    "pair every example with the gathered global batch, not its device's share")
  f("loss.margin", spec_default("margin"), "triplet margin")

  section(c, "multi_exit", "multi-exit training (SPEC §3; needs model.exits=\"all\")")
  f("multi_exit.strategy", "", "\"\" (one exit) or jt, 2st, alt, kd, acl_cl")
  f("multi_exit.weights", "uniform", "exit loss weights: \"uniform\" or \"linear\" (PABEE "
    "m/sum m)")
  f("multi_exit.stage1_fraction", 0.5, "2ST: share of steps in stage 1 (backbone + last exit)")
  f("multi_exit.kd_temperature", 2.0, "KD: distillation temperature T")
  f("multi_exit.kd_form", "add", "KD on exits m < M: \"add\" = CE_m + alpha T^2 KL(final || m) "
    "(SPEC §3), \"convex\" = (1-alpha) CE_m + alpha T^2 KL (Hinton's mix)")
  f("multi_exit.kd_alpha", 0.5, "KD: weight alpha of the KL term")
  f("multi_exit.lambda_cl", 0.5, "ACL-CL: weight of the cross-layer loss on exits 1..M-1")
  f("multi_exit.teacher_grad", False, "ACL-CL: let gradients reach the teacher items")
  f("multi_exit.gate_ce", "last", "ACL-CL with ACL-Grad: the angle is against the final exit's "
    "CE (\"last\", SPEC §2.5) or every exit's loss (\"all\")")

  section(c, "optim", "AdamW with linear warmup and decay")
  f("optim.lr", 2e-5, "peak learning rate of the encoder")
  f("optim.warmup_ratio", 0.1, "share of the steps spent warming up from 0")
  f("optim.weight_decay", 0.01, "decoupled weight decay on kernels and embeddings")
  f("optim.clip_norm", 1.0, "global gradient-norm clipping; <= 0 disables it")
  f("optim.head_lr_mult", 1.0, "exit heads' peak lr = lr * head_lr_mult")

  section(c, "checkpoint", "what a run keeps on disk")
  f("checkpoint.keep_train_state", True, "keep ckpt/ (the whole train state, to resume) after the "
    "final evaluation; False deletes it and keeps best/ (the params) alone")

  f("batch_size", 32, "global batch, split over all devices of all processes")
  f("eval_batch_size", 64, "global batch of evaluation and prediction")
  f("num_epochs", 3, "epochs to train, when num_steps is 0")
  f("num_steps", 0, "> 0 overrides num_epochs")
  f("eval_every", 0, "steps between dev evaluations; 0 = once per epoch")
  f("checkpoint_every", 0, "steps between checkpoints of the train state; 0 = at every eval")
  f("log_every", 10, "steps between train metric records (metrics.jsonl, TensorBoard)")
  f("early_stop_patience", 0, "evals without dev improvement before stopping; 0 = off")
  f("eval_splits", "dev", "comma list evaluated at the end with the best checkpoint")
  f("progress", True, "a progress bar with an ETA on the terminal")
  return c


def print_config(config: ml_collections.ConfigDict, title: str = "") -> str:
  """Every field of `config` as `path = value  # doc`, in declaration order, each section's
  doc above its fields (fields a config file added beyond base_config's come last)."""
  base_config()  # fills FIELD_DOCS
  leaves = _leaf_paths(config)
  rows = []
  # The top-level fields first: after a section they would read as part of it.
  is_section = lambda p: any(k.startswith(p + ".") for k in FIELD_DOCS)
  order = sorted(FIELD_DOCS, key=lambda p: "." in p or is_section(p))
  for path in order:
    doc = FIELD_DOCS[path]
    if path in leaves:
      rows.append((f"{path} = {_get(config, path)!r}", doc))
    elif any(k.startswith(path + ".") for k in leaves):
      rows.append((None, f"{path}: {doc}"))
  rows += [(f"{p} = {_get(config, p)!r}", "") for p in leaves if p not in FIELD_DOCS]
  width = max(len(r[0]) for r in rows if r[0] is not None)
  lines = [title] if title else []
  for left, doc in rows:
    if left is None:
      lines += ["", f"# {doc}"]
    else:
      lines.append(f"{left:<{width}}  # {doc}" if doc else left)
  return "\n".join(lines)


def _get(config: ml_collections.ConfigDict, path: str):
  for part in path.split("."):
    config = config[part]
  return config


def task_config(arg: str | None, default: str, tasks, kind: str):
  """Splits `task[,words]`, checks the task, returns (base config for it, remaining words)."""
  task, _, rest = (arg or default).partition(",")
  check_known(task, tasks, kind)
  c = base_config()
  c.task.name = task
  return c, rest


def is_config_word(word: str) -> bool:
  """Whether `word` is a method, a multi-exit strategy or 'runlocal'."""
  return word == "runlocal" or word in METHODS or word in MULTI_EXIT


def apply_args(c: ml_collections.ConfigDict, arg: str | None) -> ml_collections.ConfigDict:
  """Applies `method` and `runlocal` words from the config-file argument."""
  words = [w for w in (arg or "").split(",") if w]
  for w in words:
    if w == "runlocal":
      runlocal(c)
    elif w in METHODS:
      _apply_method(c.loss, w)
    elif w in MULTI_EXIT:
      c.model.exits = "all"
      c.multi_exit.update(MULTI_EXIT[w])
      if w == "acl_cl":
        _apply_method(c.loss, "acl")
    else:
      raise UserError(f"Unknown config argument {w!r}; methods: {sorted(METHODS)}, "
                      f"multi-exit strategies: {sorted(MULTI_EXIT)}, or 'runlocal'.")
  c.lock()  # unknown --config.x overrides now fail instead of being silently added
  return c


def method_fields(method: str) -> set[str]:
  """The config fields that are `method`'s own, dotted: the only ones in which a study may
  train a comparison's two arms differently. loss.name and its loss family's fields
  (`LossFamily.own_fields`), the fields its preset sets (ACL-Grad's gate fields where it
  gates); for a multi-exit strategy, model.exits and the multi_exit block (and ACL-CL's
  ACL fields)."""
  if method in MULTI_EXIT:
    own = {"model.exits", *(f"multi_exit.{k}" for k in base_config().multi_exit)}
    return own | (method_fields("acl") if method == "acl_cl" else {"loss.name"})
  preset = lookup(METHODS, method, "method")
  loss = {*LOSSES[preset["name"]].own_fields(), *preset, "name"}
  if preset.get("gate"):
    loss |= set(GATE_FIELDS)
  return {f"loss.{k}" for k in loss}


def _apply_method(loss: ml_collections.ConfigDict, method: str) -> None:
  preset = METHODS[method]
  loss.update({**LOSSES[preset["name"]].defaults, **preset})


def runlocal(c: ml_collections.ConfigDict) -> None:
  """Shrinks any config to a smoke run of a few seconds to a minute on a laptop CPU."""
  c.task.max_length = 32
  c.task.num_buckets = 2
  c.task.max_train_examples = 64
  c.task.max_eval_examples = 64
  c.batch_size = 8
  c.eval_batch_size = 16
  c.num_steps = 6
  c.eval_every = 3
  c.log_every = 1


def describe_configs(folder: str | None = None) -> str:
  """What `train.py --help` lists: each config file of `folder` (default: configs/) with the
  first line of its docstring and its task words, the method words, and how to see the
  fields."""
  import importlib  # pylint: disable=import-outside-toplevel
  import inspect  # pylint: disable=import-outside-toplevel
  import os  # pylint: disable=import-outside-toplevel
  folder = folder or os.path.dirname(os.path.abspath(__file__))
  lines = ["Config files, --config configs/FILE.py[:ARG], ARG = [TASK][,METHOD][,runlocal]:"]
  for name in sorted(os.listdir(folder)):
    stem, ext = os.path.splitext(name)
    if ext != ".py" or stem in ("__init__", "common"):
      continue
    mod = importlib.import_module(f"configs.{stem}")
    if not hasattr(mod, "get_config"):
      continue
    lines.append(f"  configs/{name}: {(mod.__doc__ or '').strip().splitlines()[0]}")
    tasks = getattr(mod, "TASKS", ())
    if tasks:
      default = inspect.signature(mod.get_config).parameters["arg"].default
      default = (default or "").partition(",")[0]
      lines.append(f"      TASK: {', '.join(tasks)} "
                   + (f"(default {default})" if default else "(optional)"))
  lines += [
      f"  METHOD: {', '.join(METHODS)}",
      f"    multi-exit (an exit on every layer): {', '.join(MULTI_EXIT)}",
      "  runlocal: shrinks any config to a smoke run of seconds",
      "Every field, its value and a one-line doc (then exits):",
      "  python train.py --config configs/glue.py:rte --print_config",
      "Override any field: --config.loss.lam=0.3 --config.task.max_length=256"]
  return "\n".join(lines)


def unknown_field(config: ml_collections.ConfigDict, path: str) -> str | None:
  """A one-line error for an override of a field `config` lacks (e.g. "loss.lamda"), naming
  the closest field names and the section's fields; None if the field exists."""
  node, parents = config, []
  for part in path.split("."):
    if not isinstance(node, ml_collections.ConfigDict):
      return None  # below a leaf: not a missing field, the parser's own error says what it is
    if part not in node:
      section = ".".join(parents)
      fields = sorted(node.keys())
      full = lambda name: f"{section}.{name}" if section else name
      close = [full(n) for n in difflib.get_close_matches(part, fields, n=3, cutoff=0.6)]
      # A field of that name in another section (--config.lr for optim.lr).
      close += [k for k in _leaf_paths(config) if k.rsplit(".", 1)[-1] == part][:3 - len(close)]
      hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
      where = f"section {section!r}" if section else "the top level"
      return (f"Unknown config field {path!r}.{hint} Fields of {where}: "
              f"{', '.join(fields)}.")
    node = node[part]
    parents.append(part)
  return None


def _leaf_paths(config: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
  out = []
  for k, v in config.items():
    if isinstance(v, ml_collections.ConfigDict):
      out += _leaf_paths(v, f"{prefix}{k}.")
    else:
      out.append(f"{prefix}{k}")
  return out
