"""Encoder, exit heads and checkpoint loading."""
from acl_jax.models.bert import Classifier, Encoder, ExitHead, TransformerLayer, Embeddings
from acl_jax.models.bert import attention_bias, init_params, label_embeddings
from acl_jax.models.bert import PACKED_KEYS, Packed, apply_batch, is_packed
from acl_jax.models.config import EncoderConfig, config_from_hf
from acl_jax.models.hf import load_pretrained, load_tokenizer, resolve_model_dir
