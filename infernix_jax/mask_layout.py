"""The packed token-mask layout shared by the host (constrain/) and the device (pallas/).

Numpy only: both sides import it, and constrain/ must never import jax.

Layout (DESIGN.md section 3): int32 words, ``word = id // 32``, ``bit = id % 32``, least
significant bit = smaller id, 1 = allowed, bits past the tokenizer's V are 0. The vocabulary
dimension is the tokenizer's V, never the logits' padded width.

Per-position states for a constrained row (int8 codes, ``[B, P]``):
  READY: the prefix is legal and its mask is built.
  DEAD_END: the prefix has no legal next token (fails the row only if verification reaches it).
  UNREACHABLE: an earlier draft was illegal or EOS was accepted; the column is filler.
"""

from __future__ import annotations

import numpy as np

READY = np.int8(0)
DEAD_END = np.int8(1)
UNREACHABLE = np.int8(2)


def mask_words(vocab_size: int) -> int:
  """W = ceil(V / 32): int32 words needed for a vocabulary of ``vocab_size`` tokens."""
  if vocab_size <= 0:
    raise ValueError(f"{vocab_size=} must be positive")
  return (vocab_size + 31) // 32


def pack(allowed: np.ndarray) -> np.ndarray:
  """Packs a bool array ``[..., V]`` into int32 words ``[..., ceil(V/32)]``."""
  allowed = np.asarray(allowed, dtype=bool)
  v = allowed.shape[-1]
  w = mask_words(v)
  padded = np.zeros(allowed.shape[:-1] + (w * 32,), dtype=bool)
  padded[..., :v] = allowed
  bits = np.packbits(padded.reshape(allowed.shape[:-1] + (w, 4, 8)), axis=-1, bitorder="little")
  return np.ascontiguousarray(bits.reshape(allowed.shape[:-1] + (w * 4,))).view("<i4").astype(np.int32)


def unpack(words: np.ndarray, vocab_size: int) -> np.ndarray:
  """Unpacks int32 words ``[..., W]`` into a bool array ``[..., vocab_size]``."""
  words = np.ascontiguousarray(np.asarray(words, dtype="<i4"))
  w = words.shape[-1]
  if vocab_size > w * 32:
    raise ValueError(f"{vocab_size=} needs {mask_words(vocab_size)} words, got {w}")
  bits = np.unpackbits(words.view(np.uint8).reshape(words.shape[:-1] + (w * 4, 1)), axis=-1,
                       bitorder="little")
  return bits.reshape(words.shape[:-1] + (w * 32,))[..., :vocab_size].astype(bool)


def bit(words: np.ndarray, token: int) -> bool:
  """Whether ``token``'s bit is set in the packed words ``[W]`` (int32 or uint32); False for
  an id outside ``0..32*W-1`` (a negative id must not wrap to the last word)."""
  if not 0 <= token < 32 * words.shape[-1]:
    return False
  return bool((int(words[token >> 5]) >> (token & 31)) & 1)


def allows(words: np.ndarray, token: int, vocab_size: int) -> bool:
  """Whether ``token`` is legal under the packed words ``[W]`` of a vocabulary of
  ``vocab_size`` (V) tokens: its bit is set and it is a tokenizer id.

  The one range rule for draft ids: an id outside ``0..V-1`` (negative, in the logits'
  padding ``V..Vm-1``, past the logits, or past the mask words) is never legal, so a draft
  holding one is an illegal draft at its position like any other.
  """
  return 0 <= token < vocab_size and bool((int(words[token >> 5]) >> (token & 31)) & 1)


def bits(words: np.ndarray, ids: np.ndarray) -> np.ndarray:
  """Whether each of ``ids`` (int array [n]) has its bit set in the packed words ``[W]``
  (False for ids outside ``0..32*W-1``)."""
  u = words.view(np.uint32)
  ids = np.asarray(ids)
  inside = (ids >= 0) & (ids < 32 * u.shape[-1])
  safe = np.where(inside, ids, 0)
  return inside & ((u[safe >> 5] >> (safe & 31).astype(np.uint32)) & 1).astype(bool)


def clear_bit(words: np.ndarray, token: int) -> None:
  """Clears ``token``'s bit in the packed words ``[W]`` in place (int32 or uint32)."""
  words.view(np.uint32)[token >> 5] &= np.uint32(0xFFFFFFFF ^ (1 << (token & 31)))


def clear_spare_bits(words: np.ndarray, vocab_size: int) -> None:
  """Zeroes, in place, the bits of ids ``vocab_size..32*W-1`` in words ``[..., W]``.

  A matcher library may set them (the last word is filled whole); the layout says they are 0.
  """
  r = vocab_size & 31
  last = mask_words(vocab_size) - 1
  if r:
    words[..., last] &= (1 << r) - 1
  if words.shape[-1] > last + 1:
    words[..., last + 1:] = 0
