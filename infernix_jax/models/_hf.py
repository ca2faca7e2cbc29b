"""Hugging Face checkpoint directory -> our layout (config.json + sharded *.safetensors)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
from safetensors import safe_open

from infernix_jax.models import layers
from infernix_jax.models.config import ModelConfig

# HF parameter name (inside model.layers.{i}.) -> (our name, transpose to [in, out]).
_LAYER_NAMES = {
    "input_layernorm.weight": ("attn_norm", False),
    "self_attn.q_proj.weight": ("q", True),
    "self_attn.k_proj.weight": ("k", True),
    "self_attn.v_proj.weight": ("v", True),
    "self_attn.o_proj.weight": ("o", True),
    "self_attn.q_proj.bias": ("q_bias", False),
    "self_attn.k_proj.bias": ("k_bias", False),
    "self_attn.v_proj.bias": ("v_bias", False),
    "self_attn.o_proj.bias": ("o_bias", False),
    "self_attn.q_norm.weight": ("q_norm", False),
    "self_attn.k_norm.weight": ("k_norm", False),
    "post_attention_layernorm.weight": ("mlp_norm", False),
    "mlp.gate_proj.weight": ("gate", True),
    "mlp.up_proj.weight": ("up", True),
    "mlp.down_proj.weight": ("down", True),
}


def _read_bf16(path: Path, name: str) -> np.ndarray:
  """Reads one BF16 tensor straight from the file (numpy has no bfloat16 for safetensors)."""
  with open(path, "rb") as f:
    (header_len,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(header_len))
    begin, end = header[name]["data_offsets"]
    f.seek(8 + header_len + begin)
    raw = f.read(end - begin)
  return np.frombuffer(raw, dtype=ml_dtypes.bfloat16).reshape(header[name]["shape"])


def _bf16_names(path: Path) -> set[str]:
  with open(path, "rb") as f:
    (header_len,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(header_len))
  return {k for k, v in header.items() if k != "__metadata__" and v["dtype"] == "BF16"}


def read_safetensors(directory: Path) -> dict[str, np.ndarray]:
  """All tensors of a checkpoint directory (single file or sharded with an index json)."""
  index = directory / "model.safetensors.index.json"
  if index.exists():
    files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
  else:
    files = sorted(p.name for p in directory.glob("*.safetensors"))
  if not files:
    raise FileNotFoundError(f"no *.safetensors files in {directory}")
  tensors = {}
  for name in files:
    path = directory / name
    bf16 = _bf16_names(path)
    with safe_open(str(path), framework="np") as f:
      for key in f.keys():
        tensors[key] = _read_bf16(path, key) if key in bf16 else f.get_tensor(key)
  return tensors


def hf_to_arrays(cfg: ModelConfig, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Renames and stacks HF tensors into the layout `model_from_arrays` expects."""
  wanted = layers.layer_param_shapes(cfg)
  per_layer: dict[str, list] = {n: [None] * cfg.num_layers for n in wanted}
  for key, value in tensors.items():
    if not key.startswith("model.layers."):
      continue
    layer, rest = key[len("model.layers."):].split(".", 1)
    if rest not in _LAYER_NAMES:
      continue
    name, transpose = _LAYER_NAMES[rest]
    if name in per_layer:
      per_layer[name][int(layer)] = value.T if transpose else value
  out = {}
  for name, values in per_layer.items():
    missing = [i for i, v in enumerate(values) if v is None]
    if missing:
      raise ValueError(f"checkpoint lacks {name!r} for layers {missing[:5]}")
    out[f"layers.{name}"] = np.stack(values)
  def need(name):
    if name not in tensors:
      raise ValueError(f"checkpoint lacks {name!r}" + (
          "; config.json says tie_word_embeddings=false" if name == "lm_head.weight" else ""))
    return tensors[name]

  out["embed"] = need("model.embed_tokens.weight")
  out["final_norm"] = need("model.norm.weight")
  if not cfg.tie_embeddings:
    out["lm_head"] = need("lm_head.weight").T
  return out


def read_config(directory: Path) -> dict:
  """The parsed config.json of a checkpoint directory."""
  path = directory / "config.json"
  if not path.exists():
    raise FileNotFoundError(f"{directory} has no config.json; is it a Hugging Face checkpoint?")
  return json.loads(path.read_text())
