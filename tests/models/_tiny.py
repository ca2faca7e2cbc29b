"""Tiny random Hugging Face checkpoints (Qwen2, Qwen3, Llama) written to temporary dirs."""

from __future__ import annotations

from pathlib import Path

VOCAB = 101  # deliberately not a multiple of 32

# family -> attention kind -> (heads, kv heads)
ATTENTION = {"mha": (4, 4), "gqa": (4, 2), "mqa": (4, 1)}


def hf_config(family: str, attention: str, tie: bool):
  """A transformers config object for a 2-layer model of the given family."""
  import transformers  # pylint: disable=import-outside-toplevel

  heads, kv = ATTENTION[attention]
  common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=256,
                rms_norm_eps=1e-6, tie_word_embeddings=tie)
  if family == "qwen2":
    return transformers.Qwen2Config(rope_theta=20_000.0, use_sliding_window=False, **common)
  if family == "qwen3":  # head_dim 24 != hidden/heads, as in real Qwen3 sizes
    return transformers.Qwen3Config(head_dim=24, rope_theta=1_000_000.0, **common)
  return transformers.LlamaConfig(rope_theta=50_000.0, attention_bias=family == "llama-bias",
                                  **common)


def make_hf_checkpoint(family: str, attention: str, tie: bool, directory: Path, seed: int = 0):
  """Builds a random HF causal LM, perturbs norms and biases away from 1/0, saves it.

  Returns:
    The torch model (eval mode, float32) whose files now live in `directory`.
  """
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel

  torch.manual_seed(seed)
  config = hf_config(family, attention, tie)
  model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
  with torch.no_grad():
    for name, param in model.named_parameters():
      if "norm" in name:
        param.copy_(1.0 + 0.2 * torch.randn_like(param))
      elif name.endswith("bias"):
        param.copy_(0.1 * torch.randn_like(param))
      else:
        param.copy_(0.08 * torch.randn_like(param))
  model.save_pretrained(directory, safe_serialization=True)
  return model
