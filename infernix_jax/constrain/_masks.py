"""Mask-buffer helpers of the session core: buffer checks, emptiness probes, token tables.

Axis letters (docs/CONTRACTS.md): V vocabulary, W mask words.
"""

from __future__ import annotations

import collections

import numpy as np

from infernix_jax.constrain.vocab import ORDINARY

_INT32 = np.dtype(np.int32)
try:  # numpy's C count: ``np.count_nonzero`` adds ~0.6 us of Python dispatch to a ~0.8 us count
  from numpy._core.multiarray import count_nonzero
except ImportError:
  count_nonzero = np.count_nonzero


def check_buffer(buf: np.ndarray, words: int) -> None:
  """Raises ValueError unless ``buf`` is a C-contiguous writable int32 numpy array [..., W]."""
  if (type(buf) is np.ndarray and buf.dtype is _INT32 and buf.flags.carray
      and buf.shape[-1] == words):
    return  # the common buffer: four cheap tests (the ones below also accept subclasses)
  if not isinstance(buf, np.ndarray):
    raise ValueError(f"mask buffer must be a numpy array, got {type(buf).__name__}")
  if buf.dtype != np.int32 or not buf.flags.c_contiguous or not buf.flags.writeable:
    raise ValueError(f"mask buffer must be C-contiguous writable int32, got {buf.dtype} "
                     f"contiguous={buf.flags.c_contiguous} writeable={buf.flags.writeable}")
  if buf.shape[-1] != words:
    raise ValueError(f"mask buffer last axis {buf.shape[-1]} must be W={words}")


def probe_words(vocab) -> tuple[int, ...]:
  """Up to three mask words an emptiness test reads before counting the whole mask: the
  words holding the most single-byte printable-ASCII tokens (punctuation, digits, letters),
  one of which is legal in most states of a text grammar (Qwen3: words 0..2)."""

  def build():
    counts = collections.Counter(
        i >> 5 for i, b in enumerate(vocab.token_bytes)
        if len(b) == 1 and 0x21 <= b[0] <= 0x7E and vocab.token_class[i] == ORDINARY)
    return tuple(sorted(word for word, _ in counts.most_common(3)))

  return vocab.lazy("constrain.probe_words", build)


def ordinary_table(vocab) -> tuple[dict[bytes, int], int]:
  """bytes -> smallest id of the ordinary token spelling them, and the longest spelling
  (per vocabulary, built once): the greedy tokenizer of jump-forward bytes."""

  def build():
    table: dict[bytes, int] = {}
    cls = vocab.token_class
    for i in range(vocab.size - 1, -1, -1):
      b = vocab.token_bytes[i]
      if cls[i] == ORDINARY and b:
        table[b] = i
    return table, max((len(b) for b in table), default=1)

  return vocab.lazy("constrain.ordinary_table", build)
