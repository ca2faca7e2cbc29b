"""GGUF loader on llama, qwen2 and qwen3 files written the way llama.cpp's converter does
(tiny random HF models -> gguf.GGUFWriter), checked against the HF model's logits."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from infernix_jax import models as im
from tests.models import _tiny
from tests.models._np_oracle import llama_cpp_permute

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")

_NAMES = {  # HF name inside model.layers.{i}. -> GGUF name inside blk.{i}.
    "input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.bias": "attn_output.bias", "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
}


def _write_gguf(hf_model, arch, path):
  cfg = hf_model.config
  head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
  writer = gguf.GGUFWriter(str(path), arch)
  writer.add_block_count(cfg.num_hidden_layers)
  writer.add_context_length(cfg.max_position_embeddings)
  writer.add_embedding_length(cfg.hidden_size)
  writer.add_feed_forward_length(cfg.intermediate_size)
  writer.add_head_count(cfg.num_attention_heads)
  writer.add_head_count_kv(cfg.num_key_value_heads)
  writer.add_key_length(head_dim)
  writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]
                                  if getattr(cfg, "rope_parameters", None) else cfg.rope_theta))
  writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
  writer.add_tokenizer_model("gpt2")
  writer.add_token_list([f"t{i}" for i in range(cfg.vocab_size)])
  for name, value in hf_model.state_dict().items():
    value = value.detach().numpy().astype(np.float32)
    if name == "model.embed_tokens.weight":
      writer.add_tensor("token_embd.weight", value)
    elif name == "model.norm.weight":
      writer.add_tensor("output_norm.weight", value)
    elif name == "lm_head.weight":
      if not cfg.tie_word_embeddings:
        writer.add_tensor("output.weight", value)
    else:
      layer, rest = name[len("model.layers."):].split(".", 1)
      if arch == "llama" and rest.startswith(("self_attn.q_proj", "self_attn.k_proj")):
        heads = cfg.num_attention_heads if "q_proj" in rest else cfg.num_key_value_heads
        value = llama_cpp_permute(value if value.ndim == 2 else value[:, None], heads)
        value = value if "weight" in rest else value[:, 0]
      writer.add_tensor(f"blk.{layer}.{_NAMES[rest]}", value)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()


@pytest.mark.parametrize("arch,family,tie", [("llama", "llama-bias", False),
                                             ("qwen2", "qwen2", True), ("qwen3", "qwen3", False)])
def test_gguf_archs_match_transformers(tmp_path, arch, family, tie):
  hf_model = _tiny.make_hf_checkpoint(family, "gqa", tie, tmp_path / "hf")
  _write_gguf(hf_model, arch, tmp_path / "m.gguf")
  cfg, model, source = im.load_gguf(tmp_path / "m.gguf")
  assert source == tmp_path / "m.gguf" and cfg.tie_embeddings == tie
  assert cfg.qk_norm == (arch == "qwen3") and cfg.qkv_bias == (arch != "qwen3")
  tokens = np.random.default_rng(1).integers(0, _tiny.VOCAB, (2, 7)).astype(np.int32)
  logits, _ = im.forward(*nnx.split(model), jnp.asarray(tokens))
  with torch.no_grad():
    expected = hf_model(torch.tensor(tokens, dtype=torch.long)).logits.numpy()
  np.testing.assert_allclose(np.asarray(logits), expected, atol=1e-5, rtol=1e-5)
