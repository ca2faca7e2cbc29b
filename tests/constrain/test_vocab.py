"""Vocabulary adaptation against independent oracles (HF tokenizers round trips, file facts)."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax.constrain import vocab as vmod
from tests.constrain.conftest import QWEN3_DIR, TOY_TOKENS, toy_vocab

TEXTS = [
    "Hello, world! {\"a\": [1, 2.5e-3, null]}\n\t  trailing  ",
    "naïve café – 東京タワー 😀🚀 Ünïcödé\r\n",
    "def f(x):\n    return x ** 2  # comment\n",
    "\x00\x01\x7f control bytes and \u2028 separators \ufeff",
]


def test_toy_classes_and_lookup():
  v = toy_vocab(padded_size=40)
  assert v.size == len(TOY_TOKENS) and v.padded_size == 40
  assert v.mask_words == 1
  assert v.eos_ids == (0,) and v.control_ids == frozenset({0, 1})
  # A control token and an ordinary token with the same spelling stay distinct.
  assert v.token_id("<c>", control=True) == 1
  assert v.token_id("<c>") == 26
  assert v.token_id(b"\xc3") == 23
  with pytest.raises(ic.TokenReferenceError):
    v.token_id("zz")
  assert v.decode([15, 2, 16, 21]) == b'{"a":1'
  with pytest.raises(ValueError):
    v.decode([v.size])  # padding ids have no bytes
  assert list(v.ordinary_ids) == [i for i in range(v.size) if i not in (0, 1)]


def test_identity_changes_with_every_fact():
  base = toy_vocab().identity
  assert toy_vocab().identity == base
  assert toy_vocab(padded_size=64).identity != base
  other = list(TOY_TOKENS)
  other[5] = b"ac"
  assert ic.Vocabulary.from_tokens(other, eos_ids=[0], control=[1]).identity != base
  assert ic.Vocabulary.from_tokens(TOY_TOKENS, eos_ids=[0], control=[1, 2]).identity != base


def test_byte_level_table_is_gpt2():
  # Independent statement of the GPT-2 table: printable bytes map to themselves.
  for b in range(256):
    ch = bytes([b]).decode("latin-1")
    if ch.isprintable() and ch not in (" ", "\xad") and b not in range(0x7f, 0xa1):
      assert vmod.byte_level_to_bytes(ch) == bytes([b])
  assert vmod.byte_level_to_bytes("Ġ") == b" " and vmod.byte_level_to_bytes("Ċ") == b"\n"
  with pytest.raises(ValueError):
    vmod.byte_level_to_bytes("\u4e00")
  assert vmod.sentencepiece_to_bytes("<0x0A>", is_byte=True) == b"\n"
  assert vmod.sentencepiece_to_bytes("▁hi", is_byte=False) == b" hi"


def test_qwen3_round_trips_through_hf_tokenizers(qwen3_vocab):
  tokenizers = pytest.importorskip("tokenizers")
  tok = tokenizers.Tokenizer.from_file(str(QWEN3_DIR / "tokenizer.json"))
  v = qwen3_vocab
  assert v.size == 151669 and v.padded_size == 151936 and v.mask_words == 4740
  assert v.eos_ids == (151643, 151645)
  assert v.control_ids == frozenset(range(151643, 151669))
  assert v.token_id("</think>", control=True) == 151668
  for text in TEXTS:
    ids = tok.encode(text, add_special_tokens=False).ids
    # NFC normalisation is the tokenizer's; the bytes of the ids must be exactly its output.
    import unicodedata
    assert v.decode(ids) == unicodedata.normalize("NFC", text).encode("utf-8")
  # Partial UTF-8 tokens are kept as raw bytes (no replacement characters anywhere).
  partial = [b for b, c in zip(v.token_bytes, v.token_class) if c == vmod.ORDINARY
             and not _is_utf8(b)]
  assert len(partial) > 1000
  assert all(b"\xef\xbf\xbd" not in b or _is_utf8(b) for b in partial)
  assert len(set(v.token_bytes[:151643])) == 151643  # every ordinary token's bytes unique


def _is_utf8(b: bytes) -> bool:
  try:
    b.decode("utf-8")
    return True
  except UnicodeDecodeError:
    return False


def test_smollm2_gguf_round_trips(smollm2_vocab):
  tokenizers = pytest.importorskip("tokenizers")
  import gguf

  v = smollm2_vocab
  assert v.size == 49152 and v.eos_ids == (2,)
  assert v.control_ids == frozenset(range(17))
  assert v.token_id("<|im_end|>", control=True) == 2
  # Oracle: HF tokenizers BPE built from the GGUF's own spellings + merges (byte-level).
  reader = gguf.GGUFReader(str(ic.smollm2_gguf_path()))
  f = reader.fields["tokenizer.ggml.tokens"]
  spellings = [bytes(f.parts[i]).decode() for i in f.data]
  m = reader.fields["tokenizer.ggml.merges"]
  merges = [tuple(bytes(m.parts[i]).decode().split(" ", 1)) for i in m.data]
  model = tokenizers.models.BPE({s: i for i, s in enumerate(spellings)}, merges)
  tok = tokenizers.Tokenizer(model)
  tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  for text in TEXTS:
    ids = tok.encode(text).ids
    assert v.decode(ids) == text.encode("utf-8")


def test_tiktoken_matches_tokenizer_json(qwen3_vocab, tmp_path):
  # Qwen's tokenizer is tiktoken-derived: writing its bytes as a rank file must give the same
  # vocabulary (bytes, classes, identity) through the tiktoken constructor.
  v = qwen3_vocab
  path = tmp_path / "qwen.tiktoken"
  with open(path, "wb") as out:
    for i in range(151643):
      out.write(base64.b64encode(v.token_bytes[i]) + b" %d\n" % i)
  specials = {v.token_bytes[i].decode(): i for i in range(151643, 151669)}
  t = ic.Vocabulary.from_tiktoken(path, specials, eos_ids=[151643, 151645], padded_size=151936)
  assert t.token_bytes == v.token_bytes
  assert t.identity == v.identity
  d = ic.Vocabulary.from_tiktoken({b"a": 0, b"b": 2}, {"<|endoftext|>": 3})
  assert d.size == 4 and d.unused_ids == frozenset({1}) and d.eos_ids == (3,)


def test_tokenizer_json_holes_and_byte_fallback(tmp_path):
  spec = {
      "added_tokens": [{"id": 5, "content": "</s>", "special": True}],
      "model": {"type": "BPE", "byte_fallback": True,
                "vocab": {"<0x0A>": 0, "▁a": 1, "b": 2, "<0xE4>": 3, "</s>": 5}, "merges": []},
      "pre_tokenizer": {"type": "Metaspace"}, "decoder": {"type": "Sequence", "decoders": []},
  }
  (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
  v = ic.Vocabulary.from_tokenizer_json(tmp_path)
  assert v.token_bytes[:4] == (b"\n", b" a", b"b", b"\xe4")
  assert v.unused_ids == frozenset({4}) and v.eos_ids == (5,)
  assert np.array_equal(v.token_class, [0, 0, 0, 0, vmod.UNUSED, vmod.EOS])


def test_gguf_llama_spm_vocabulary(tmp_path):
  # A tiny sentencepiece-style GGUF written with the gguf package itself: ▁ is a space,
  # <0xNN> BYTE tokens are single raw bytes, CONTROL/UNUSED/UNKNOWN ids are classified.
  import gguf

  tokens = ["<unk>", "<s>", "</s>", "<0x0A>", "<0xE2>", "▁hi", "lo", "<|eot_id|>", "[PAD]"]
  types = [2, 3, 3, 6, 6, 1, 1, 3, 5]
  path = tmp_path / "tiny.gguf"
  w = gguf.GGUFWriter(str(path), "llama")
  w.add_tokenizer_model("llama")
  w.add_token_list(tokens)
  w.add_token_types(types)
  w.add_eos_token_id(2)
  w.add_eot_token_id(7)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  v = ic.Vocabulary.from_gguf(path)
  assert v.token_bytes[3:7] == (b"\n", b"\xe2", b" hi", b"lo")
  assert v.eos_ids == (2, 7) and v.control_ids == frozenset({1, 2, 7})
  assert v.unused_ids == frozenset({0, 8})
  assert v.token_id(" hi") == 5 and v.decode([5, 6, 3]) == b" hilo\n"


def test_gguf_reader_is_parsed_once_per_file_version(tmp_path):
  """Loads of one file share its parsed reader; a file rewritten at the same path is read
  again (never a stale vocabulary); a missing file is named."""
  import gguf

  from infernix_jax import gguf_reader

  path = tmp_path / "v.gguf"

  def write(tokens):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([1] * len(tokens))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

  write(["a", "b"])
  first = gguf_reader.open_reader(path)
  assert gguf_reader.open_reader(str(path)) is first
  assert ic.Vocabulary.from_gguf(path).token_bytes == (b"a", b"b")
  write(["a", "b", "cd"])
  assert gguf_reader.open_reader(path) is not first
  assert ic.Vocabulary.from_gguf(path).token_bytes == (b"a", b"b", b"cd")
  with pytest.raises(FileNotFoundError, match="nowhere.gguf does not exist"):
    gguf_reader.open_reader(tmp_path / "nowhere.gguf")
