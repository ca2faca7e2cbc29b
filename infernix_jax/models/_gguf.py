"""GGUF file -> our layout: metadata, dequantized tensors, llama.cpp's Q/K row order undone.

The `gguf` package is imported where a file is read (`gguf_reader`, `gguf_to_arrays`), so
`infernix_jax.models` imports without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
  from gguf import GGUFReader

from infernix_jax.models.config import ModelConfig

# GGUF tensor name (inside blk.{i}.) -> (our name, transpose to [in, out]).
_LAYER_NAMES = {
    "attn_norm.weight": ("attn_norm", False),
    "attn_q.weight": ("q", True),
    "attn_k.weight": ("k", True),
    "attn_v.weight": ("v", True),
    "attn_output.weight": ("o", True),
    "attn_q.bias": ("q_bias", False),
    "attn_k.bias": ("k_bias", False),
    "attn_v.bias": ("v_bias", False),
    "attn_output.bias": ("o_bias", False),
    "attn_q_norm.weight": ("q_norm", False),
    "attn_k_norm.weight": ("k_norm", False),
    "ffn_norm.weight": ("mlp_norm", False),
    "ffn_gate.weight": ("gate", True),
    "ffn_up.weight": ("up", True),
    "ffn_down.weight": ("down", True),
}
_BIG_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
               "tokenizer.ggml.scores")


def read_metadata(reader: GGUFReader) -> dict[str, Any]:
  """Key/value metadata as Python values (the tokenizer's large arrays are skipped)."""
  meta = {}
  for key, field in reader.fields.items():
    if key in _BIG_ARRAYS:
      continue
    try:
      meta[key] = field.contents()
    except Exception:  # pylint: disable=broad-except  # exotic field types are not needed
      continue
  meta["tokenizer.ggml.tokens_count"] = len(reader.fields["tokenizer.ggml.tokens"].data) \
      if "tokenizer.ggml.tokens" in reader.fields else 0
  names = {t.name for t in reader.tensors}
  meta["_has_output_weight"] = "output.weight" in names
  meta["_has_qkv_bias"] = "blk.0.attn_q.bias" in names
  meta["_has_o_bias"] = "blk.0.attn_output.bias" in names
  return meta


def unpermute_rows(w: np.ndarray, heads: int) -> np.ndarray:
  """Undoes llama.cpp's Q/K permutation (interleaved rotary pairs -> HF half-split order).

  llama.cpp stores the rows of head h as pairs (h, i, j) where HF has (h, j, i), j the
  rotary half; w is [heads * H, D_in] in GGUF (out, in) order.
  """
  out_dim = w.shape[0]
  return w.reshape(heads, out_dim // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def config_from_reader(reader: GGUFReader, dtype: str | None = None) -> ModelConfig:
  """The model config stored in a GGUF file's metadata."""
  meta = read_metadata(reader)
  arch = meta["general.architecture"]
  if f"{arch}.vocab_size" not in meta:
    meta[f"{arch}.vocab_size"] = meta["tokenizer.ggml.tokens_count"]
  return ModelConfig.from_gguf(meta, dtype=dtype)


def gguf_to_arrays(reader: GGUFReader, cfg: ModelConfig) -> dict[str, np.ndarray]:
  """Dequantizes every tensor into the layout `model_from_arrays` expects (f32)."""
  from gguf.quants import dequantize  # pylint: disable=import-outside-toplevel

  arch = reader.fields["general.architecture"].contents()
  permuted = arch == "llama"  # only llama.cpp's llama converter reorders Q/K rows
  per_layer: dict[str, list] = {}
  out = {}
  for tensor in reader.tensors:
    value = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
    name = tensor.name
    if name == "token_embd.weight":
      out["embed"] = value
    elif name == "output_norm.weight":
      out["final_norm"] = value
    elif name == "output.weight":
      out["lm_head"] = value.T
    elif name.startswith("blk."):
      _, layer, rest = name.split(".", 2)
      if rest not in _LAYER_NAMES:
        continue
      ours, transpose = _LAYER_NAMES[rest]
      if permuted and ours in ("q", "k", "q_bias", "k_bias"):
        heads = cfg.num_heads if ours.startswith("q") else cfg.num_kv_heads
        value = unpermute_rows(value, heads)
      per_layer.setdefault(ours, [None] * cfg.num_layers)[int(layer)] = (
          value.T if transpose else value)
  for ours, values in per_layer.items():
    missing = [i for i, v in enumerate(values) if v is None]
    if missing:
      raise ValueError(f"GGUF file lacks {ours!r} for layers {missing[:5]}")
    out[f"layers.{ours}"] = np.stack(values)
  if cfg.tie_embeddings:
    out.pop("lm_head", None)
  return out

