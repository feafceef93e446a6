"""The base config shared by every task config, method presets and the runlocal shrink.

Task configs (`glue.py`, `textgcn.py`, `quickstart.py`) call `base_config()`, set their task
fields, then `apply_args(config, arg)`, where `arg` is a comma-separated list of a method
preset name and optionally `runlocal`, e.g. `--config configs/glue.py:rte,acl,runlocal`.
"""
import difflib

import ml_collections

# Method presets: loss-related overrides on top of the base config (SPEC §2 defaults).
METHODS = {
    "ce": dict(name="ce"),
    "scl": dict(name="scl", lam=0.9, tau=0.3),
    "acl_embed": dict(name="acl_embed", lam=0.5, tau=0.3),
    "acl": dict(name="acl_embed", lam=0.5, tau=0.3, gate=True),
    "scl_grad": dict(name="scl", lam=0.9, tau=0.3, gate=True),
    "gloss": dict(name="gloss", lam=0.8, sigma=0.667, sigma_mode="fixed"),
    "gloss_sqrt": dict(name="gloss", lam=0.8, sigma_mode="sqrt"),
    "triplet": dict(name="triplet", lam=0.5),
    "cosine": dict(name="cosine", lam=0.5),
}
# Multi-exit presets (SPEC §3): an exit on every layer and a training strategy. ACL-CL's
# final exit trains with CE + lambda ACL-Embed, gated by ACL-Grad.
MULTI_EXIT = {
    "jt": dict(strategy="jt"), "2st": dict(strategy="2st"), "alt": dict(strategy="alt"),
    "kd": dict(strategy="kd"), "acl_cl": dict(strategy="acl_cl"),
}


def base_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0

  c.task = ml_collections.ConfigDict()
  c.task.name = ""  # a key of acl_jax.data.TASKS
  c.task.data_dir = ""  # local data root; "" = the hub (GLUE) or the packaged quickstart data
  c.task.text = "raw"  # TextGCN: "raw" or "clean" corpus
  c.task.val_fraction = 0.1  # TextGCN: share of train held out as dev (seeded)
  c.task.split_seed = 0
  c.task.on_empty = "skip"  # empty text rows: "skip" (counted, logged) or "error"
  c.task.text_column = "text"  # generic csv/tsv/jsonl files
  c.task.text_pair_column = ""
  c.task.label_column = "label"
  c.task.train_file = ""
  c.task.dev_file = ""
  c.task.test_file = ""
  c.task.main_metric = ""  # "" = the task's own main metric
  c.task.max_length = 128
  c.task.num_buckets = 4  # static sequence lengths for length bucketing
  c.task.max_train_examples = 0  # 0 = all; else a seeded subsample (stated in results)
  c.task.max_eval_examples = 0

  c.model = ml_collections.ConfigDict()
  c.model.name = "minilm-l6"  # alias, local HF folder, or hub id (e.g. bert-base-uncased)
  c.model.exits = "last"  # "last" or "all"
  # Exit heads: "" = the checkpoint's fine-tuned head if it has one, else "linear" (SPEC: a
  # linear layer on the [CLS] state); "bert_pooler", "roberta" or "distilbert" build HF's
  # *ForSequenceClassification heads, which export.py writes as standard HF folders.
  c.model.head = ""
  c.model.exit_pooling = "cls"  # "cls" (SPEC) or "mean": what each exit reads from its layer
  c.model.dtype = "float32"  # "bfloat16" on accelerators
  c.model.dropout = -1.0  # < 0 keeps the checkpoint's hidden/attention dropout
  c.model.ignore_head = False  # start a fresh head on a checkpoint fine-tuned for other labels

  c.loss = ml_collections.ConfigDict()
  c.loss.name = "ce"
  c.loss.class_weights = ""  # "" or "balanced" (sklearn)
  # -1: the loss's SPEC default (SCL 0.9, ACL-Embed 0.5, G-Loss 0.8); triplet and cosine
  # have none, so their presets set 0.5.
  c.loss.lam = -1.0
  # How lambda mixes the auxiliary loss with CE: "" = the loss's own (SPEC: SCL, G-Loss,
  # triplet, cosine "convex" (1-lam) CE + lam L; ACL-Embed "additive" CE + lam L). Setting
  # the other form is an ablation, e.g. SCL in ACL's additive form for the lambda study.
  c.loss.combine = ""
  c.loss.tau = 0.3
  c.loss.anchors = "all"  # ACL-Embed: "all" or "samples"
  c.loss.gate = False  # ACL-Grad angle gate on the auxiliary term
  c.loss.gate_threshold = 90.0
  c.loss.gate_mode = "drop"  # "drop" or "project"
  c.loss.angle_params = "all"  # "all", "encoder" (no heads/LayerNorm/biases) or "top" (fast)
  # G-Loss label split: set at most one; neither = SPEC default gamma_keep 0.7.
  c.loss.gamma_keep = -1.0  # fraction of the batch that KEEPS its labels (the code's gamma)
  c.loss.gamma_hide = -1.0  # fraction hidden = 1 - gamma_keep (the paper's wording)
  c.loss.sigma = 0.667
  c.loss.sigma_mode = "fixed"  # "fixed" or "sqrt"
  c.loss.gloss_form = "clean"  # "clean" or "official"
  c.loss.gloss_global = False  # data parallel: one graph over the gathered global batch
  # Data parallel: SCL, ACL-Embed, ACL-CL, triplet and cosine pair every example with the
  # gathered global batch (negatives from every device) instead of its own device's share.
  c.loss.contrastive_global = False
  c.loss.margin = 5.0  # triplet

  c.multi_exit = ml_collections.ConfigDict()
  c.multi_exit.strategy = ""  # "" (one exit) or jt, 2st, alt, kd, acl_cl (needs exits="all")
  c.multi_exit.weights = "uniform"  # exit weights: "uniform" or "linear" (PABEE m/sum m)
  c.multi_exit.stage1_fraction = 0.5  # 2ST: share of steps in stage 1 (backbone + last exit)
  c.multi_exit.kd_temperature = 2.0
  # KD on exits m < M: "add" = CE_m + alpha T^2 KL(final || m), JT plus KL as SPEC §3;
  # "convex" = (1-alpha) CE_m + alpha T^2 KL (Hinton's mix; what the session-1/2 runs used).
  c.multi_exit.kd_form = "add"
  c.multi_exit.kd_alpha = 0.5
  c.multi_exit.lambda_cl = 0.5  # ACL-CL weight of the cross-layer loss on exits 1..M-1
  c.multi_exit.teacher_grad = False  # ACL-CL: let gradients reach the teacher items
  # ACL-CL with the ACL-Grad gate: the angle is measured against the final exit's CE ("last",
  # SPEC §2.5; the lower exits' losses are added outside the gate) or every exit's ("all").
  c.multi_exit.gate_ce = "last"

  c.optim = ml_collections.ConfigDict()
  c.optim.lr = 2e-5
  c.optim.warmup_ratio = 0.1
  c.optim.weight_decay = 0.01
  c.optim.clip_norm = 1.0
  c.optim.head_lr_mult = 1.0  # exit heads' peak lr = lr * head_lr_mult

  c.batch_size = 32  # global batch, split over all devices of all processes
  c.eval_batch_size = 64
  c.num_epochs = 3
  c.num_steps = 0  # > 0 overrides num_epochs
  c.eval_every = 0  # steps; 0 = once per epoch
  c.checkpoint_every = 0  # steps; 0 = at every eval
  c.log_every = 10
  c.early_stop_patience = 0  # evals without dev improvement before stopping; 0 = off
  c.eval_splits = "dev"  # comma list evaluated at the end with the best checkpoint
  c.progress = True
  return c


def task_config(arg: str | None, default: str, tasks, kind: str):
  """Splits `task[,words]`, checks the task, returns (base config for it, remaining words)."""
  task, _, rest = (arg or default).partition(",")
  if task not in tasks:
    raise ValueError(f"Unknown {kind} {task!r}; known: {tuple(tasks)}.")
  c = base_config()
  c.task.name = task
  return c, rest


def apply_args(c: ml_collections.ConfigDict, arg: str | None) -> ml_collections.ConfigDict:
  """Applies `method` and `runlocal` words from the config-file argument."""
  words = [w for w in (arg or "").split(",") if w]
  for w in words:
    if w == "runlocal":
      runlocal(c)
    elif w in METHODS:
      c.loss.update(METHODS[w])
    elif w in MULTI_EXIT:
      c.model.exits = "all"
      c.multi_exit.update(MULTI_EXIT[w])
      if w == "acl_cl":
        c.loss.update(METHODS["acl"])
    else:
      raise ValueError(f"Unknown config argument {w!r}; methods: {sorted(METHODS)}, "
                       f"multi-exit strategies: {sorted(MULTI_EXIT)}, or 'runlocal'.")
  c.lock()  # unknown --config.x overrides now fail instead of being silently added
  return c


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
