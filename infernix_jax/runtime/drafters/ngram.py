"""Prompt lookup (n-gram copy): drafts the continuation of the latest earlier match (host)."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from infernix_jax.pallas import OneHotQ
from infernix_jax.runtime.drafters.base import Drafter, DrafterOptions, OptionError, Proposal


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


@dataclasses.dataclass(frozen=True, eq=False)
class NGramDrafter(Drafter):
  """Prompt lookup over each lane's context (prompt + committed output); greedy, q one-hot.

  State: one `NGramIndex` per lane (None for a free lane), on the host. Forced tokens in the
  input (jump-forward) count as context: the continuation is looked up after them.
  """

  k: int = 4
  n: int = 3  # longest n-gram matched (tried first)
  min_n: int = 1  # shortest n-gram matched

  name = "ngram"

  def __post_init__(self):
    super().__post_init__()
    if not 1 <= self.min_n <= self.n:
      raise ValueError(f"n-gram sizes must satisfy 1 <= min_n <= n, got n={self.n} "
                       f"min_n={self.min_n}")

  def init(self, spec):
    return None, (None,) * spec.lanes

  def propose(self, params, state, inp):
    b = len(state)
    drafts = np.zeros((b, self.k), np.int32)  # [B, K]
    n = np.zeros((b,), np.int32)
    for i, index in enumerate(state):
      limit = int(inp.limit[i])
      if index is None or limit <= 0:
        continue
      extra = inp.forced[i, :int(inp.n_forced[i])].tolist()
      got = index.propose(limit, extra)
      drafts[i, :len(got)] = got
      n[i] = len(got)
    return Proposal(drafts, n, OneHotQ()), state

  def advance(self, params, state, committed):
    for i, index in enumerate(state):
      c = int(committed.counts[i])
      if index is not None and c:
        index.extend(committed.tokens[i, :c].tolist())
    return state

  def extend(self, params, state, rows, hidden, reset):
    state = list(state)
    for lane, tokens in rows.items():
      if reset or state[lane] is None:
        state[lane] = NGramIndex(self.n, self.min_n)
      state[lane].extend(tokens)
    return tuple(state)


@dataclasses.dataclass(frozen=True)
class Options(DrafterOptions):
  """Prompt lookup's options."""

  n: int = 3  # the longest n-gram matched (tried first)
  min_n: int = 1  # the shortest n-gram matched

  def validate(self) -> None:
    super().validate()
    for name in ("n", "min_n"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise OptionError(name, f"{name}={value!r} must be an integer >= 1")
    if self.min_n > self.n:
      raise OptionError("min_n", f"min_n={self.min_n} must be <= n={self.n}")


def build(options: Options, context) -> NGramDrafter:
  return NGramDrafter(k=options.k, n=options.n, min_n=options.min_n)
