"""Writes a trained acl-jax classifier as a Hugging Face model folder.

`AutoModelForSequenceClassification.from_pretrained(DIR)` and `AutoTokenizer` give the
probabilities of the acl-jax model's final exit. DIR holds:
  config.json        the backbone's HF config as the family's *ForSequenceClassification
                     (architectures, id2label/label2id, the run's dropout rates), plus an
                     "acl_jax" record: the head, the exit layers, the checkpoint step.
  model.safetensors  the encoder and the final exit's head under HF's names.
  tokenizer files    as `tokenizer.save_pretrained` writes them.
  exits.safetensors  multi-exit models only: the heads of exits 1..M-1 under the same HF
                     names as the final head, prefixed "exit_{m}." (PyTorch layout), with
                     metadata {"head", "exit_pooling", "exit_layers"}. HF ignores the file;
                     `load_pretrained(DIR, num_labels, exits="all")` reads it back.

Which heads export. An HF sequence classifier has one fixed head per family, so an exit head
exports when it is (or maps exactly onto) that head:
  BERT / MiniLM  "bert_pooler" (BertForSequenceClassification: pooler + classifier);
  RoBERTa, MPNet "roberta" (RobertaClassificationHead; MPNetClassificationHead is the same);
  DistilBERT     "distilbert" (pre_classifier + ReLU + classifier).
acl-jax's default "linear" head (SPEC's linear layer on the raw [CLS] state) maps onto each of
them: on DistilBERT through ReLU's linear part (`_linear_as_distilbert`), on BERT, RoBERTa and
MPNet through tanh's (`_linear_as_tanh_head`). Mean-pooled exits have no HF form (HF's heads read
[CLS]); they are refused, naming the config that trains an exportable head. Carrying them
would take a sequence classifier of our own on the hub (custom code, `trust_remote_code`).
"""
import json
import logging
import math
import os
from typing import Any

import jax
import numpy as np

from acl_jax import provenance
from acl_jax import run as run_lib
from acl_jax.errors import FileError, UserError
from acl_jax.models import hf
from acl_jax.models.config import EncoderConfig, read_hf_config

log = logging.getLogger(__name__)

# model_type -> the HF sequence classifier written for it, and its base-model prefix.
ARCHITECTURES = {"bert": "BertForSequenceClassification",
                 "roberta": "RobertaForSequenceClassification",
                 "xlm-roberta": "XLMRobertaForSequenceClassification",
                 "distilbert": "DistilBertForSequenceClassification",
                 "mpnet": "MPNetForSequenceClassification"}
_BASE_PREFIX = {"bert": "bert.", "roberta": "roberta.", "distilbert": "distilbert.",
                "mpnet": "mpnet."}


def _layer_norm_floor(ln: dict, dim: int) -> np.ndarray:
  """[dim] c with LayerNorm(x) + c > 0 for every input x: a normalised entry is at most
  sqrt(dim - 1) in size (zero mean, unit variance), so |out_i| <= |scale_i| sqrt(dim - 1) +
  |bias_i|; one more keeps a float32 margin."""
  scale, bias = (np.asarray(ln[k], np.float64) for k in ("scale", "bias"))
  return np.abs(scale) * math.sqrt(dim - 1) + np.abs(bias) + 1.0


def _linear_as_distilbert(head: dict, layer_norm: dict, dim: int) -> dict:
  """A linear head as an exactly equal DistilBERT head: pre_classifier = identity plus a
  shift c that keeps every input in ReLU's linear part, and the classifier's bias takes the
  shift back: ReLU(h + c) K + (b - c K) = h K + b.

  The exit's input h is its layer's output, a LayerNorm output, so the bound behind c holds
  for every input; float32 rounding of h + c leaves errors near 1e-6.
  """
  c = _layer_norm_floor(layer_norm, dim)
  kernel = np.asarray(head["classifier"]["kernel"], np.float64)
  bias = np.asarray(head["classifier"]["bias"], np.float64)
  return {"pooler": {"kernel": np.eye(dim, dtype=np.float32), "bias": c.astype(np.float32)},
          "classifier": {"kernel": kernel.astype(np.float32),
                         "bias": (bias - c @ kernel).astype(np.float32)}}


# tanh(y) rounds to y in float32 for |y| <= TANH_IDENTITY: there y^3/3, tanh's first
# departure from y, is under 2^-27 |y|, a quarter of the smallest half-ulp (2^-25 |y|).
# tests/test_export.py checks PyTorch's and NumPy's tanh over every float32 of the top binade.
TANH_IDENTITY = 2.0 ** -13


def _linear_as_tanh_head(head: dict, layer_norm: dict, dim: int) -> dict:
  """A linear head as an exactly equal BERT pooler or RoBERTa classification head:
  dense = 2^-k I with zero bias, where k puts every input inside tanh's identity range,
  and the classifier takes the kernel times 2^k: 2^k K tanh(2^-k h) + b = K h + b.

  The exit's input h is a LayerNorm output, so |h_i| <= |scale_i| sqrt(dim - 1) + |bias_i|
  bounds every input. Scaling by a power of two is exact in float32 (short of subnormals),
  so the head adds no rounding of its own.
  """
  bound = float((_layer_norm_floor(layer_norm, dim) - 1.0).max())
  k = max(0, math.ceil(math.log2(max(bound, 1e-30) / TANH_IDENTITY)))
  kernel = np.asarray(head["classifier"]["kernel"], np.float32)
  return {"pooler": {"kernel": np.eye(dim, dtype=np.float32) * np.float32(2.0 ** -k),
                     "bias": np.zeros(dim, np.float32)},
          "classifier": {"kernel": kernel * np.float32(2.0 ** k),
                         "bias": np.asarray(head["classifier"]["bias"], np.float32)}}


def exported_head(cfg: EncoderConfig) -> str:
  """The HF head a model's exits are written as; UserError when there is no exact one."""
  family_head = hf.FAMILY_HEADS[cfg.family]
  if cfg.exit_pooling != "cls":
    raise UserError(
        f"This model's exits read the token mean (model.exit_pooling={cfg.exit_pooling!r}), "
        "but HF's sequence-classification heads read the [CLS] state, so no HF model computes "
        "it. Train with --config.model.exit_pooling=cls to export.")
  if cfg.head in (family_head, "linear"):
    return family_head
  raise UserError(
      f"A {cfg.family} model exports as {ARCHITECTURES.get(cfg.family, cfg.family)}, whose "
      f"head is {family_head!r}; a {cfg.head!r} head is another layout. Train with "
      f"--config.model.head={family_head} (the HF head, same dropout placement) or the "
      "default linear head to export, or keep using the model in acl-jax.")


def _export_head(cfg: EncoderConfig, params: Any, layer: int, head: str) -> dict:
  """Exit `layer`'s head params in the form of the HF head `head` (see `exported_head`)."""
  p = jax.tree.map(np.asarray, params[f"exit_{layer}"])
  if cfg.head != "linear":
    return p
  ln = params["encoder"][f"layer_{layer - 1}"]["mlp"]["LayerNorm"]
  if head == "distilbert":
    return _linear_as_distilbert(p, ln, cfg.hidden_size)
  return _linear_as_tanh_head(p, ln, cfg.hidden_size)


def _hf_config(base: dict, cfg: EncoderConfig, head: str, label_names: list[str],
               record: dict) -> dict:
  out = {k: v for k, v in base.items()
         if k not in ("num_labels", "_name_or_path", "transformers_version")}
  model_type = base.get("model_type", "bert")
  out["architectures"] = [ARCHITECTURES[model_type]]
  out["id2label"] = {str(i): n for i, n in enumerate(label_names)}
  out["label2id"] = {n: i for i, n in enumerate(label_names)}
  out["problem_type"] = "single_label_classification"
  head_dropout = cfg.hidden_dropout if cfg.classifier_dropout is None else cfg.classifier_dropout
  if cfg.family == "distilbert":
    out.update(dropout=cfg.hidden_dropout, attention_dropout=cfg.attention_dropout,
               seq_classif_dropout=head_dropout, sinusoidal_pos_embds=cfg.sinusoidal_pos_embds)
  else:
    out.update(hidden_dropout_prob=cfg.hidden_dropout,
               attention_probs_dropout_prob=cfg.attention_dropout, classifier_dropout=head_dropout)
  out["acl_jax"] = {"head": head, "trained_head": cfg.head, "exit_layers": list(cfg.exit_layers),
                    **record}
  return out


def _save_tensors(tensors: dict, path: str, metadata: dict) -> None:
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  save_file(tensors, path, metadata=metadata)
  umask = os.umask(0)
  os.umask(umask)
  os.chmod(path, 0o666 & ~umask)  # safetensors writes 0600; the folder is meant to be shared


def check_out_dir(out_dir: str) -> None:
  """Refuses to write into a folder that holds files and is not an earlier export (its
  config.json has an "acl_jax" record): they would be overwritten or mixed with ours. A file
  in the folder's place is refused too."""
  if os.path.exists(out_dir) and not os.path.isdir(out_dir):
    raise FileError(f"--out {out_dir} is a file, not a folder: the export is a model folder. "
                    "Give a new or empty folder path as --out, or move the file away.")
  if not os.path.isdir(out_dir) or not os.listdir(out_dir):
    return
  try:
    with open(os.path.join(out_dir, "config.json")) as f:
      if "acl_jax" in json.load(f):
        return
  except (OSError, ValueError):
    pass
  raise UserError(f"{out_dir} holds other files ({', '.join(sorted(os.listdir(out_dir))[:4])}"
                  f"{', ...' if len(os.listdir(out_dir)) > 4 else ''}) and is not an earlier "
                  "export: give an empty or new --out folder.")


def export_model(cfg: EncoderConfig, params: Any, out_dir: str, *, base_config: dict,
                 tokenizer, label_names: list[str] | None = None,
                 record: dict | None = None) -> str:
  """Writes `params` of `Classifier(cfg)` as an HF model folder (layout: module docstring).

  Args:
    cfg: the model's config (family, head, exits).
    params: its params (any arrays).
    out_dir: the folder to write: new, empty, or an earlier export (whose files of the same
      names are replaced); any other folder with files is refused (`check_out_dir`).
    base_config: the backbone's HF config.json (the folder the model was loaded from), the
      base of the written config.
    tokenizer: the model's HF tokenizer, saved beside it.
    label_names: class names in label-id order (None: LABEL_i, with a warning).
    record: more entries for config.json's "acl_jax" record (e.g. the checkpoint step); its
      "max_length" also becomes the saved tokenizer's model_max_length.

  Returns:
    out_dir.
  """
  head = exported_head(cfg)
  check_out_dir(out_dir)
  names = run_lib.label_names_or_default(label_names, cfg.num_labels, "export")
  prefix = _BASE_PREFIX[cfg.family]
  tensors = {prefix + k: v for k, v in hf.hf_state_dict(cfg, params).items()}
  last = cfg.exit_layers[-1]
  for k, v in hf.head_state_dict(_export_head(cfg, params, last, head), head).items():
    tensors[(prefix + k) if k.startswith("pooler.") else k] = v  # BERT's pooler: the encoder's
  os.makedirs(out_dir, exist_ok=True)
  _save_tensors(tensors, os.path.join(out_dir, "model.safetensors"), {"format": "pt"})
  exits_path = os.path.join(out_dir, hf.EXITS_FILE)
  lower = cfg.exit_layers[:-1]
  if lower:
    heads = {}
    for m in lower:
      heads.update(hf.head_state_dict(_export_head(cfg, params, m, head), head,
                                      prefix=f"exit_{m}."))
    _save_tensors(heads, exits_path, {"head": head, "exit_pooling": cfg.exit_pooling,
                                      "exit_layers": ",".join(map(str, lower))})
  elif os.path.exists(exits_path):
    os.remove(exits_path)  # a stale file from an earlier export would be read back
  config = _hf_config(base_config, cfg, head, names, record or {})
  provenance.write_atomic(os.path.join(out_dir, "config.json"),
                          json.dumps(config, indent=2))
  tokenizer.save_pretrained(out_dir)
  if (record or {}).get("max_length"):
    _set_max_length(out_dir, int(record["max_length"]))
  return out_dir


def _set_max_length(out_dir: str, max_length: int) -> None:
  """The run's max length as the tokenizer's model_max_length: HF's plain `truncation=True`
  then cuts texts where training and predict.py did, not at the position table's size."""
  path = os.path.join(out_dir, "tokenizer_config.json")
  with open(path) as f:
    tok_config = json.load(f)
  tok_config["model_max_length"] = max_length
  provenance.write_atomic(path, json.dumps(tok_config, indent=2))


def export_workdir(workdir: str, out_dir: str, checkpoint: str = "best") -> str:
  """Exports a train.py workdir's best (or latest) checkpoint as an HF folder `out_dir`.

  The run is opened by `run.open` (its model rebuilt from its config), its label names read
  from labels.json (LABEL_i, with a warning, when the run records none).
  """
  # The folder and the head are refused before the checkpoint is read.
  check_out_dir(out_dir)
  run = run_lib.open(workdir, checkpoint, check_model=lambda m: exported_head(m.cfg))
  base = read_hf_config(hf.resolve_model_dir(run.config.model.name))
  record = {"checkpoint": checkpoint, "checkpoint_step": run.step,
            "max_length": int(run.config.task.max_length)}
  return export_model(run.model.cfg, jax.device_get(run.params), out_dir, base_config=base,
                      tokenizer=run.tokenizer, label_names=run.label_names, record=record)
