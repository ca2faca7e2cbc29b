"""Random Hugging Face checkpoints written in shards the way `save_pretrained` splits them
(consecutive tensors up to a byte limit, `model-0000i-of-0000n.safetensors` plus the index),
one shard in memory at a time; and the loading of such files by plain reading + the stacked
assembly (`_convert.model_from_arrays`), as an oracle for the streaming loader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np


def hf_config(model_type: str, vocab: int, dim: int, layers: int, heads: int, kv_heads: int,
              head_dim: int, ffn: int, tie: bool) -> dict:
  """A config.json dict of a Qwen3 (q/k norms) or Qwen2 (q/k/v biases) model."""
  return {"model_type": model_type, "vocab_size": vocab, "hidden_size": dim,
          "num_hidden_layers": layers, "num_attention_heads": heads,
          "num_key_value_heads": kv_heads, "head_dim": head_dim, "intermediate_size": ffn,
          "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0, "tie_word_embeddings": tie,
          "max_position_embeddings": 4096}


def hf_shapes(config: dict) -> list[tuple[str, tuple[int, ...]]]:
  """(HF tensor name, shape) of every parameter, in the order transformers saves them."""
  d, h, f = config["hidden_size"], config["head_dim"], config["intermediate_size"]
  n, g = config["num_attention_heads"], config["num_key_value_heads"]
  out = [("model.embed_tokens.weight", (config["vocab_size"], d))]
  for i in range(config["num_hidden_layers"]):
    p = f"model.layers.{i}."
    out += [(p + "input_layernorm.weight", (d,)), (p + "self_attn.q_proj.weight", (n * h, d)),
            (p + "self_attn.k_proj.weight", (g * h, d)),
            (p + "self_attn.v_proj.weight", (g * h, d)),
            (p + "self_attn.o_proj.weight", (d, n * h))]
    if config["model_type"] == "qwen2":
      out += [(p + "self_attn.q_proj.bias", (n * h,)), (p + "self_attn.k_proj.bias", (g * h,)),
              (p + "self_attn.v_proj.bias", (g * h,))]
    if config["model_type"] == "qwen3":
      out += [(p + "self_attn.q_norm.weight", (h,)), (p + "self_attn.k_norm.weight", (h,))]
    out += [(p + "post_attention_layernorm.weight", (d,)), (p + "mlp.gate_proj.weight", (f, d)),
            (p + "mlp.up_proj.weight", (f, d)), (p + "mlp.down_proj.weight", (d, f))]
  out.append(("model.norm.weight", (d,)))
  if not config["tie_word_embeddings"]:
    out.append(("lm_head.weight", (config["vocab_size"], d)))
  return out


def write_sharded(directory: Path, config: dict, make: Callable, itemsize: int,
                  shard_bytes: int | None) -> list[Path]:
  """Writes config.json and the tensors `make(name, shape)` returns (torch tensors), split
  into shards of at most `shard_bytes` (a bigger tensor gets its own shard; None: one
  `model.safetensors`). Returns the safetensors files."""
  from safetensors.torch import save_file  # pylint: disable=import-outside-toplevel

  directory.mkdir(parents=True, exist_ok=True)
  (directory / "config.json").write_text(json.dumps(config))
  groups: list[list[tuple[str, tuple[int, ...]]]] = [[]]
  size = 0
  for name, shape in hf_shapes(config):
    nbytes = itemsize * int(np.prod(shape))
    if shard_bytes is not None and groups[-1] and size + nbytes > shard_bytes:
      groups.append([])
      size = 0
    groups[-1].append((name, shape))
    size += nbytes
  if shard_bytes is None:
    names = ["model.safetensors"]
  else:
    names = [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
  weight_map, total = {}, 0
  for name, group in zip(names, groups):
    tensors = {key: make(key, shape).contiguous() for key, shape in group}
    total += sum(t.numel() * t.element_size() for t in tensors.values())
    save_file(tensors, str(directory / name), metadata={"format": "pt"})
    weight_map.update({key: name for key in tensors})
    del tensors
  if shard_bytes is not None:
    (directory / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}))
  return [directory / name for name in names]


_OURS = {"input_layernorm.weight": "attn_norm", "post_attention_layernorm.weight": "mlp_norm",
         "self_attn.q_norm.weight": "q_norm", "self_attn.k_norm.weight": "k_norm",
         **{f"self_attn.{x}_proj.weight": x for x in "qkvo"},
         **{f"self_attn.{x}_proj.bias": f"{x}_bias" for x in "qkv"},
         **{f"mlp.{x}_proj.weight": x for x in ("gate", "up", "down")}}


def arrays_of(files: list[Path], num_layers: int) -> dict[str, np.ndarray]:
  """Every tensor of the files read whole (safetensors' own reader, as float32), renamed and
  stacked into `_convert.model_from_arrays`' layout: matrices [in, out], layers [L, ...]."""
  from safetensors.torch import load_file  # pylint: disable=import-outside-toplevel

  tensors = {}
  for path in files:
    tensors.update({k: v.float().numpy() for k, v in load_file(str(path)).items()})
  out = {"embed": tensors.pop("model.embed_tokens.weight"),
         "final_norm": tensors.pop("model.norm.weight")}
  if "lm_head.weight" in tensors:
    out["lm_head"] = tensors.pop("lm_head.weight").T
  per_layer: dict[str, list] = {}
  for key, value in tensors.items():
    _, _, layer, rest = key.split(".", 3)
    ours = _OURS[rest]
    per_layer.setdefault(ours, [None] * num_layers)[int(layer)] = (
        value.T if value.ndim == 2 else value)
  out.update({f"layers.{k}": np.stack(v) for k, v in per_layer.items()})
  return out
