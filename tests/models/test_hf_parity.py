"""Our Transformer vs Hugging Face transformers on tiny random Qwen2 / Qwen3 / Llama models."""

import json

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from infernix_jax import models as im
from tests.models import _tiny

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

TOKENS = np.random.default_rng(0).integers(0, _tiny.VOCAB, size=(2, 9)).astype(np.int32)


def _hf_logits(model, tokens):
  with torch.no_grad():
    return model(torch.tensor(tokens, dtype=torch.long)).logits.numpy()


@pytest.mark.parametrize("attention", ["mha", "gqa", "mqa"])
@pytest.mark.parametrize("family,tie", [("qwen2", False), ("qwen3", True), ("llama", False)])
def test_logits_match_transformers(tmp_path, family, attention, tie):
  _check_parity(tmp_path, family, attention, tie)


def test_llama_attention_bias_matches_transformers(tmp_path):
  """Llama with attention_bias=True: biases on q, k, v and the output projection."""
  _check_parity(tmp_path, "llama-bias", "gqa", True)


def _check_parity(tmp_path, family, attention, tie):
  hf_model = _tiny.make_hf_checkpoint(family, attention, tie, tmp_path)
  cfg, model, _ = im.load_hf_dir(tmp_path)
  assert cfg.qkv_bias == (family in ("qwen2", "llama-bias"))
  assert cfg.o_bias == (family == "llama-bias")
  assert cfg.qk_norm == (family == "qwen3")
  assert cfg.tie_embeddings == tie
  assert cfg.num_kv_heads == _tiny.ATTENTION[attention][1]
  graphdef, state = nnx.split(model)
  logits, hidden = im.forward(graphdef, state, jnp.asarray(TOKENS))
  expected = _hf_logits(hf_model, TOKENS)
  assert logits.shape == (2, 9, _tiny.VOCAB) and hidden.shape == (2, 9, cfg.dim)
  np.testing.assert_allclose(np.asarray(logits), expected, atol=1e-5, rtol=1e-5)


def test_sharded_safetensors_and_bf16(tmp_path):
  """Index-json sharded checkpoints load; bf16 stays close to the f32 oracle."""
  import transformers  # pylint: disable=import-outside-toplevel

  hf_model = _tiny.make_hf_checkpoint("qwen3", "gqa", True, tmp_path / "f32")
  hf_model.to(torch.bfloat16).save_pretrained(tmp_path / "bf16", max_shard_size="40KB")
  assert (tmp_path / "bf16" / "model.safetensors.index.json").exists()
  hf_model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "f32").float()
  expected = _hf_logits(hf_model, TOKENS)
  cfg, model, _ = im.load_hf_dir(tmp_path / "bf16", dtype="bfloat16")
  assert cfg.dtype == "bfloat16"
  graphdef, state = nnx.split(model)
  assert state["embed"][...].dtype == jnp.bfloat16
  logits, _ = im.forward(graphdef, state, jnp.asarray(TOKENS))
  scale = np.abs(expected).max()
  assert np.abs(np.asarray(logits) - expected).max() < 0.05 * scale


def test_config_from_hf_rejects_unsupported():
  base = json.loads(_tiny.hf_config("llama", "gqa", True).to_json_string())
  with pytest.raises(ValueError, match="rope_scaling"):
    im.ModelConfig.from_hf({**base, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
  with pytest.raises(ValueError, match="model_type"):
    im.ModelConfig.from_hf({**base, "model_type": "gpt2"})
  with pytest.raises(ValueError, match="num_kv_heads"):
    im.ModelConfig.from_hf({**base, "num_key_value_heads": 3})


# (total, non-embedding) parameters in billions, from the Qwen3 model cards.
QWEN3_CARDS = {"Qwen3-0.6B": (0.6, 0.44), "Qwen3-1.7B": (1.7, 1.4), "Qwen3-4B": (4.0, 3.6),
               "Qwen3-8B": (8.2, 6.95), "Qwen3-14B": (14.8, 13.2), "Qwen3-32B": (32.8, 31.2)}


@pytest.mark.parametrize("name", sorted(QWEN3_CARDS))
def test_qwen3_presets_have_the_published_parameter_counts(name):
  import jax  # pylint: disable=import-outside-toplevel

  cfg = im.PRESETS[name]
  model = nnx.eval_shape(lambda: im.Transformer(cfg, rngs=nnx.Rngs(0)))  # shapes only
  total = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.to_pure_dict(nnx.state(model))))
  embeddings = cfg.vocab_size * cfg.dim * (1 if cfg.tie_embeddings else 2)
  card_total, card_body = QWEN3_CARDS[name]
  assert abs(total / 1e9 - card_total) < 0.05 * card_total
  assert abs((total - embeddings) / 1e9 - card_body) < 0.02 * card_body
  assert cfg.qk_norm and cfg.head_dim == 128 and cfg.vocab_size == 151_936
