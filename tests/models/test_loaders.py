"""Loader pieces: GGUF Q/K row order, orbax round trip, tokenizer.json sources, errors."""

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from infernix_jax import models as im
from infernix_jax.models import _gguf
from tests.models import _np_oracle


@pytest.mark.parametrize("heads,head_dim", [(3, 8), (1, 4), (4, 6)])
def test_unpermute_inverts_llama_cpp_permute(heads, head_dim):
  w = np.random.default_rng(0).normal(size=(heads * head_dim, 5)).astype(np.float32)
  permute = _np_oracle.llama_cpp_permute
  np.testing.assert_array_equal(_gguf.unpermute_rows(permute(w, heads), heads), w)
  bias = w[:, 0].copy()
  np.testing.assert_array_equal(
      _gguf.unpermute_rows(permute(bias[:, None], heads)[:, 0], heads), bias)


def test_orbax_round_trip(tmp_path):
  cfg = im.ModelConfig(vocab_size=67, dim=32, num_layers=2, num_heads=2, num_kv_heads=1,
                       head_dim=16, ffn_dim=48, qkv_bias=True, tie_embeddings=False)
  model = im.Transformer(cfg, rngs=nnx.Rngs(1))
  directory = im.save_checkpoint(tmp_path / "ckpt", cfg, model, vocab_source="/x/tok.json")
  cfg2, model2, source = im.load_checkpoint(directory)
  assert cfg2 == cfg and str(source) == "/x/tok.json"
  tokens = jnp.asarray(np.arange(10, dtype=np.int32)[None] % 67)
  a, _ = im.forward(*nnx.split(model), tokens)
  b, _ = im.forward(*nnx.split(model2), tokens)
  np.testing.assert_array_equal(a, b)
  with pytest.raises(FileNotFoundError, match="not an infernix checkpoint"):
    im.load_checkpoint(tmp_path)


def test_tokenizer_json_source(tmp_path):
  tokenizers = pytest.importorskip("tokenizers")
  backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(
      {"<unk>": 0, "hello": 1, "world": 2, "</s>": 3}, unk_token="<unk>"))
  backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
  backend.save(str(tmp_path / "tokenizer.json"))
  (tmp_path / "tokenizer_config.json").write_text('{"eos_token": "</s>", "chat_template": "x"}')
  tok = im.load_tokenizer(tmp_path)
  assert tok.encode("hello world") == [1, 2] and tok.eos_id == 3 and tok.chat_template == "x"
  with pytest.raises(FileNotFoundError, match="tokenizer"):
    im.load_tokenizer(tmp_path / "missing.json")


def test_missing_files_raise_clear_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match="config.json"):
    im.load_hf_dir(tmp_path)
  with pytest.raises(FileNotFoundError, match="does not exist"):
    im.load_gguf(tmp_path / "nope.gguf")


QWEN3_DIR = Path(__file__).resolve().parents[2] / "../shared/data/tokenizers/qwen3"


@pytest.mark.skipif(not QWEN3_DIR.exists(), reason="shared data absent")
def test_qwen3_tokenizer_and_chat_template_match_transformers():
  transformers = pytest.importorskip("transformers")
  ours = im.load_tokenizer(QWEN3_DIR)
  theirs = transformers.AutoTokenizer.from_pretrained(str(QWEN3_DIR))
  messages = [{"role": "system", "content": "Be brief."},
              {"role": "user", "content": "Capital of France? Answer in JSON: {\"city\": ...}"},
              {"role": "assistant", "content": "<think>\nEasy.\n</think>\n\n{\"city\": \"Paris\"}"},
              {"role": "user", "content": "And 12 * 7?"}]
  for extra in ({}, {"enable_thinking": False}):
    expected = theirs.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                          **extra)
    text = ours.apply_chat_template(messages, add_generation_prompt=True, **extra)
    assert text == expected
    assert ours.encode(text) == theirs.encode(text, add_special_tokens=False)
  assert ours.eos_id == theirs.eos_token_id


def test_hf_checkpoint_missing_lm_head_is_reported(tmp_path):
  safetensors_numpy = pytest.importorskip("safetensors.numpy")
  cfg = {"model_type": "llama", "vocab_size": 8, "hidden_size": 4, "num_hidden_layers": 1,
         "num_attention_heads": 1, "intermediate_size": 4, "tie_word_embeddings": False}
  (tmp_path / "config.json").write_text(__import__("json").dumps(cfg))
  f = lambda *shape: np.zeros(shape, np.float32)
  layer = {"input_layernorm.weight": f(4), "post_attention_layernorm.weight": f(4),
           **{f"self_attn.{n}_proj.weight": f(4, 4) for n in "qkvo"},
           "mlp.gate_proj.weight": f(4, 4), "mlp.up_proj.weight": f(4, 4),
           "mlp.down_proj.weight": f(4, 4)}
  tensors = {f"model.layers.0.{k}": v for k, v in layer.items()}
  tensors.update({"model.embed_tokens.weight": f(8, 4), "model.norm.weight": f(4)})
  safetensors_numpy.save_file(tensors, str(tmp_path / "model.safetensors"))
  with pytest.raises(ValueError, match="lm_head.weight.*tie_word_embeddings"):
    im.load_hf_dir(tmp_path)
  del tensors["model.layers.0.mlp.up_proj.weight"]
  tensors["lm_head.weight"] = f(8, 4)
  safetensors_numpy.save_file(tensors, str(tmp_path / "model.safetensors"))
  with pytest.raises(ValueError, match="'up' for layers \\[0\\]"):
    im.load_hf_dir(tmp_path)


@pytest.mark.skipif(not QWEN3_DIR.exists(), reason="shared data absent")
def test_gguf_tokenizer_with_qwen2_pre_tokenizer_matches_tokenizer_json(tmp_path):
  """A GGUF file carrying Qwen3's vocabulary the way llama.cpp writes it (pre = "qwen2")
  encodes like the original tokenizer.json."""
  gguf = pytest.importorskip("gguf")
  tokenizers = pytest.importorskip("tokenizers")
  data = __import__("json").loads((QWEN3_DIR / "tokenizer.json").read_text())
  tokens = [None] * (len(data["model"]["vocab"]) + len(data["added_tokens"]))
  types = [1] * len(tokens)
  for text, i in data["model"]["vocab"].items():
    tokens[i] = text
  for added in data["added_tokens"]:
    tokens[added["id"]] = added["content"]
    types[added["id"]] = 3 if added["special"] else 4
  writer = gguf.GGUFWriter(str(tmp_path / "tok.gguf"), "qwen3")
  writer.add_tokenizer_model("gpt2")
  writer.add_tokenizer_pre("qwen2")
  writer.add_token_list(tokens)
  writer.add_token_types(types)
  writer.add_token_merges([" ".join(m) for m in data["model"]["merges"]])
  writer.add_eos_token_id(151645)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  ours = im.load_tokenizer(tmp_path / "tok.gguf")
  reference = tokenizers.Tokenizer.from_file(str(QWEN3_DIR / "tokenizer.json"))
  texts = ["Hello world! 12345 apples", "<|im_start|>user\nÇa va? 東京<|im_end|>\n<think>\n",
           "def f(x):\n\treturn x**2  # done\n\n\n", "  leading spaces and 'quotes' I'll",
           "emoji 😀👍🏽 and \u00a0nbsp\r\nCRLF"]
  for text in texts:
    assert ours.encode(text) == reference.encode(text, add_special_tokens=False).ids, text
  assert ours.vocab_size == 151_669 and ours.eos_id == 151645
