"""Prompt-lookup (n-gram copy) index: proposes the continuation of the latest earlier match."""

from __future__ import annotations

from typing import Sequence


class NGramIndex:
  """Incremental index of one request's context (prompt + committed output).

  For each n in [min_n, max_n] it maps an n-gram to the end of its most recent occurrence
  whose continuation already exists, so the current suffix never matches itself. Lookups try
  the longest n first. Appending a token costs O(max_n); a proposal O(max_n + k).
  """

  def __init__(self, max_n: int = 3, min_n: int = 1):
    if not 1 <= min_n <= max_n:
      raise ValueError(f"n-gram sizes must satisfy 1 <= min_n <= max_n, got {min_n=} {max_n=}")
    self.max_n, self.min_n = max_n, min_n
    self.tokens: list[int] = []
    self._last: list[dict[tuple[int, ...], int]] = [dict() for _ in range(max_n + 1)]

  def extend(self, tokens: Sequence[int]) -> None:
    """Appends committed tokens to the context."""
    for t in tokens:
      i = len(self.tokens)  # index of the new token = continuation start of n-grams ending here
      for n in range(self.min_n, self.max_n + 1):
        if i >= n:
          self._last[n][tuple(self.tokens[i - n:i])] = i
      self.tokens.append(int(t))

  def propose(self, k: int, extra: Sequence[int] = ()) -> list[int]:
    """Up to k tokens following the latest earlier occurrence of the context's suffix.

    Args:
      k: the most tokens to propose.
      extra: hypothetical tokens after the committed context (e.g. jump-forward drafts); the
        suffix is taken over context + extra, continuations may run into extra.
    """
    if k <= 0:
      return []
    ctx = self.tokens + list(extra) if extra else self.tokens
    for n in range(min(self.max_n, len(ctx)), self.min_n - 1, -1):
      pos = self._last[n].get(tuple(ctx[len(ctx) - n:]))
      if pos is not None:
        return [int(t) for t in ctx[pos:pos + k]]
    return []
