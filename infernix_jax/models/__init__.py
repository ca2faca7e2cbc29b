"""Flax NNX Qwen-family models: config, KV cache, jitted phases, loaders, drafter networks."""

from infernix_jax.models.config import (
    PRESETS, QWEN3_0_6B, QWEN3_1_7B, QWEN3_4B, QWEN3_8B, QWEN3_14B, QWEN3_32B, SMOLLM2_135M,
    ModelConfig)
from infernix_jax.models import layers  # the pure layer functions drafters and training reuse
from infernix_jax.models.kv_cache import KVCache
from infernix_jax.models.loaders import (
    default_model_path, load_checkpoint, load_default, load_gguf, load_hf_dir, load_model,
    model_source, restore_params, save_checkpoint, save_params)
from infernix_jax.models.phases import decode, forward, prefill, tree_verify, verify
from infernix_jax.models.sharding import make_mesh, shard_cache, shard_state
from infernix_jax.models.tokenizer import Tokenizer, load_tokenizer
from infernix_jax.models.transformer import Transformer
from infernix_jax.models import drafters  # after the core: drafters build on it

__all__ = [
    "PRESETS", "QWEN3_0_6B", "QWEN3_1_7B", "QWEN3_4B", "QWEN3_8B", "QWEN3_14B", "QWEN3_32B",
    "SMOLLM2_135M", "ModelConfig", "drafters", "layers", "KVCache", "Transformer", "Tokenizer", "decode",
    "default_model_path", "forward", "load_checkpoint", "load_default", "load_gguf",
    "load_hf_dir", "load_model", "load_tokenizer", "make_mesh", "model_source", "prefill",
    "restore_params", "save_checkpoint", "save_params", "shard_cache", "shard_state",
    "tree_verify", "verify",
]
