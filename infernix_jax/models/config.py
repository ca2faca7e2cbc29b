"""Frozen configuration of a Qwen-family decoder (Qwen2/2.5, Qwen3, Llama/SmolLM2)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax.numpy as jnp

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Architecture of one decoder-only transformer.

  One class covers the three families we load: Qwen2/Qwen2.5 (`qkv_bias=True`),
  Qwen3 (`qk_norm=True`, explicit `head_dim`) and Llama-style checkpoints such as
  SmolLM2 (neither). Hashable, so it can be a static jit argument.
  """

  vocab_size: int  # Vm: rows of the embedding / columns of the logits (may exceed the tokenizer V)
  dim: int  # D: residual stream width
  num_layers: int  # L
  num_heads: int  # N: query heads
  num_kv_heads: int  # G: key/value heads (N: MHA, 1: MQA, otherwise GQA)
  head_dim: int  # H
  ffn_dim: int  # F: SwiGLU hidden width
  rope_theta: float = 10_000.0  # RoPE base frequency
  norm_eps: float = 1e-6  # RMSNorm epsilon
  qkv_bias: bool = False  # bias on q/k/v projections (Qwen2)
  o_bias: bool = False  # bias on the output projection (Llama attention_bias=True)
  qk_norm: bool = False  # per-head RMSNorm on q and k before RoPE (Qwen3)
  tie_embeddings: bool = True  # LM head shares the embedding matrix
  max_position: int = 32_768  # longest context the checkpoint was trained for
  dtype: str = "float32"  # parameter and activation dtype ("float32" | "bfloat16")
  name: str = ""  # free-form label (preset or checkpoint name)

  def __post_init__(self):
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"{self.num_heads=} must be a multiple of {self.num_kv_heads=}")
    if self.head_dim % 2:
      raise ValueError(f"{self.head_dim=} must be even for rotary embeddings")
    if self.dtype not in _DTYPES:
      raise ValueError(f"{self.dtype=} must be one of {sorted(_DTYPES)}")

  @property
  def jnp_dtype(self):
    """The jnp dtype named by `dtype`."""
    return _DTYPES[self.dtype]

  @property
  def q_per_kv(self) -> int:
    """G: query heads sharing one key/value head."""
    return self.num_heads // self.num_kv_heads

  def replace(self, **changes) -> "ModelConfig":
    """Returns a copy with `changes` applied (e.g. `cfg.replace(dtype="bfloat16")`)."""
    return dataclasses.replace(self, **changes)

  @classmethod
  def from_hf(cls, config: Mapping[str, Any], dtype: str | None = None) -> "ModelConfig":
    """Builds a config from a Hugging Face `config.json` dict.

    Args:
      config: the parsed `config.json` of a Qwen2, Qwen3 or Llama checkpoint.
      dtype: override of the parameter dtype; defaults to float32.

    Returns:
      The matching `ModelConfig`.

    Raises:
      ValueError: for an architecture or feature this decoder does not implement.
    """
    model_type = config.get("model_type", "llama")
    if model_type not in ("qwen2", "qwen3", "llama", "mistral"):
      raise ValueError(
          f"model_type={model_type!r} is not supported; expected one of qwen2, qwen3, llama")
    scaling = config.get("rope_scaling")
    if scaling and scaling.get("rope_type", scaling.get("type")) not in (None, "default"):
      raise ValueError(f"rope_scaling={scaling!r} is not supported; only plain RoPE is")
    if config.get("use_sliding_window") or (
        model_type == "mistral" and config.get("sliding_window")):
      raise ValueError("sliding-window attention is not supported; disable it in config.json")
    heads = config["num_attention_heads"]
    attention_bias = bool(config.get("attention_bias", False))
    rope_theta = config.get("rope_theta")
    if rope_theta is None:  # transformers >= 5 nests it under rope_parameters
      rope_theta = (config.get("rope_parameters") or {}).get("rope_theta", 10_000.0)
    return cls(
        vocab_size=config["vocab_size"],
        dim=config["hidden_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=config.get("num_key_value_heads") or heads,
        head_dim=config.get("head_dim") or config["hidden_size"] // heads,
        ffn_dim=config["intermediate_size"],
        rope_theta=float(rope_theta),
        norm_eps=float(config.get("rms_norm_eps", 1e-6)),
        qkv_bias=model_type == "qwen2" or attention_bias,
        o_bias=attention_bias,
        qk_norm=model_type == "qwen3",
        tie_embeddings=bool(config.get("tie_word_embeddings", False)),
        max_position=int(config.get("max_position_embeddings", 32_768)),
        dtype=dtype or "float32",
        name=config.get("_name_or_path", "") or model_type,
    )

  @classmethod
  def from_gguf(cls, metadata: Mapping[str, Any], dtype: str | None = None) -> "ModelConfig":
    """Builds a config from GGUF key/value metadata (llama or qwen2/qwen3 architectures).

    Args:
      metadata: GGUF fields as plain Python values (`general.architecture`, `<arch>.*`),
        plus `_has_output_weight` / `_has_qkv_bias` / `_has_o_bias` read from the tensor
        names (`_gguf.read_metadata` adds them).
      dtype: override of the parameter dtype; defaults to float32.
    """
    arch = metadata["general.architecture"]
    if arch not in ("llama", "qwen2", "qwen3"):
      raise ValueError(f"GGUF architecture {arch!r} is not supported (llama, qwen2, qwen3)")
    get = lambda key, default=None: metadata.get(f"{arch}.{key}", default)
    heads = int(get("attention.head_count"))
    dim = int(get("embedding_length"))
    vocab = get("vocab_size") or len(metadata["tokenizer.ggml.tokens"])
    head_dim = get("attention.key_length") or get("rope.dimension_count") or dim // heads
    return cls(
        vocab_size=int(vocab),
        dim=dim,
        num_layers=int(get("block_count")),
        num_heads=heads,
        num_kv_heads=int(get("attention.head_count_kv", heads)),
        head_dim=int(head_dim),
        ffn_dim=int(get("feed_forward_length")),
        rope_theta=float(get("rope.freq_base", 10_000.0)),
        norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-6)),
        qkv_bias=bool(metadata.get("_has_qkv_bias", arch == "qwen2")),
        o_bias=bool(metadata.get("_has_o_bias", False)),
        qk_norm=arch == "qwen3",
        tie_embeddings=not metadata.get("_has_output_weight", False),
        max_position=int(get("context_length", 32_768)),
        dtype=dtype or "float32",
        name=str(metadata.get("general.name", arch)),
    )


def _qwen3(name: str, dim: int, layers: int, heads: int, ffn: int, tied: bool) -> ModelConfig:
  return ModelConfig(
      vocab_size=151_936, dim=dim, num_layers=layers, num_heads=heads, num_kv_heads=8,
      head_dim=128, ffn_dim=ffn, rope_theta=1_000_000.0, norm_eps=1e-6, qk_norm=True,
      tie_embeddings=tied, max_position=40_960, dtype="bfloat16", name=name)


# Real Qwen3 dense sizes (config.json of the Qwen/Qwen3-* checkpoints).
QWEN3_0_6B = _qwen3("Qwen3-0.6B", 1024, 28, 16, 3072, tied=True)
QWEN3_1_7B = _qwen3("Qwen3-1.7B", 2048, 28, 16, 6144, tied=True)
QWEN3_4B = _qwen3("Qwen3-4B", 2560, 36, 32, 9728, tied=True)
QWEN3_8B = _qwen3("Qwen3-8B", 4096, 36, 32, 12288, tied=False)
QWEN3_14B = _qwen3("Qwen3-14B", 5120, 40, 40, 17408, tied=False)
QWEN3_32B = _qwen3("Qwen3-32B", 5120, 64, 64, 25600, tied=False)

# SmolLM2-135M(-Instruct), the embedded default model (Llama architecture).
SMOLLM2_135M = ModelConfig(
    vocab_size=49_152, dim=576, num_layers=30, num_heads=9, num_kv_heads=3, head_dim=64,
    ffn_dim=1536, rope_theta=100_000.0, norm_eps=1e-5, tie_embeddings=True,
    max_position=8192, name="SmolLM2-135M-Instruct")

PRESETS = {c.name: c for c in (QWEN3_0_6B, QWEN3_1_7B, QWEN3_4B, QWEN3_8B, QWEN3_14B,
                               QWEN3_32B, SMOLLM2_135M)}
