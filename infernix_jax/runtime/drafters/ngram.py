"""Prompt lookup (n-gram copy): drafts the continuation of the latest earlier match (host)."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from infernix_jax.pallas import OneHotQ
from infernix_jax.runtime.drafters.base import (Drafter, DrafterOptions, OptionError, Proposal,
                                                check_overdraft)


class NGramIndex:
  """Incremental index of one request's context (prompt + committed output).

  For each n in [min_n, max_n] it maps an n-gram to the ends of its occurrences whose
  continuation already exists (most recent last), so the current suffix never matches
  itself. Lookups try the longest n first. Appending a token costs O(max_n); a chain proposal
  O(max_n + k); a tree proposal O(max_n + occurrences * depth).
  """

  TREE_OCCURRENCES = 64  # a tree merges the continuations of at most this many latest matches


  def __init__(self, max_n: int = 3, min_n: int = 1):
    if not 1 <= min_n <= max_n:
      raise ValueError(f"n-gram sizes must satisfy 1 <= min_n <= max_n, got {min_n=} {max_n=}")
    self.max_n, self.min_n = max_n, min_n
    self.tokens: list[int] = []
    self._ends: list[dict[tuple[int, ...], list[int]]] = [dict() for _ in range(max_n + 1)]

  def extend(self, tokens: Sequence[int]) -> None:
    """Appends committed tokens to the context."""
    for t in tokens:
      i = len(self.tokens)  # index of the new token = continuation start of n-grams ending here
      for n in range(self.min_n, self.max_n + 1):
        if i >= n:
          self._ends[n].setdefault(tuple(self.tokens[i - n:i]), []).append(i)
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
    ctx, ends = self._matches(extra)
    return [int(t) for t in ctx[ends[-1]:ends[-1] + k]] if ends else []

  def _matches(self, extra: Sequence[int]) -> tuple[list[int], list[int]]:
    """(context + extra, continuation starts of the longest matched suffix n-gram)."""
    ctx = self.tokens + list(extra) if extra else self.tokens
    for n in range(min(self.max_n, len(ctx)), self.min_n - 1, -1):
      ends = self._ends[n].get(tuple(ctx[len(ctx) - n:]))
      if ends:
        return ctx, ends
    return ctx, []

  def propose_tree(self, nodes: int, depth: int, extra: Sequence[int] = ()
                   ) -> tuple[list[int], list[int]]:
    """The continuations of every match of the suffix merged into a token tree.

    The latest `TREE_OCCURRENCES` matches of the longest matched n-gram each give a
    continuation of up to `depth` tokens; merged, they form a trie whose node counts how many
    continuations pass through it. The tree keeps the `nodes` most travelled nodes, best
    first (a node's count is at most its parent's, so parents come first; ties go to the
    latest match). With one match it is that match's chain.

    Returns:
      (tokens, parents): node j hangs off parents[j] (-1: the context's last token).
    """
    if nodes <= 0 or depth <= 0:
      return [], []
    ctx, ends = self._matches(extra)
    trie: dict[tuple[int, int], int] = {}  # (trie parent, token) -> trie node
    count: list[int] = []
    latest: list[int] = []  # the rank of the latest match through each trie node
    parent_of: list[int] = []
    token_of: list[int] = []
    for rank, end in enumerate(reversed(ends[-self.TREE_OCCURRENCES:])):
      at = -1
      for t in ctx[end:end + depth]:
        key = (at, int(t))
        node = trie.get(key)
        if node is None:
          node = trie[key] = len(count)
          count.append(0)
          latest.append(rank)
          parent_of.append(at)
          token_of.append(int(t))
        count[node] += 1
        at = node
    order = sorted(range(len(count)), key=lambda i: (-count[i], latest[i], i))[:nodes]
    chosen = set(order)
    order = [i for i in order if parent_of[i] < 0 or parent_of[i] in chosen]
    index = {node: j for j, node in enumerate(order)}
    return [token_of[i] for i in order], [index.get(parent_of[i], -1) for i in order]


@dataclasses.dataclass(frozen=True, eq=False)
class NGramDrafter(Drafter):
  """Prompt lookup over each lane's context (prompt + committed output); greedy, q one-hot.

  State: one `NGramIndex` per lane (None for a free lane), on the host. Forced tokens in the
  input (jump-forward) count as context: the continuation is looked up after them.
  """

  k: int = 4
  n: int = 3  # longest n-gram matched (tried first)
  min_n: int = 1  # shortest n-gram matched
  tree: bool = False  # a token tree of up to k nodes (every match's continuation merged)
  overdraft: int = 2  # a tree proposes overdraft * k nodes; the k best legal ones are verified

  name = "ngram"

  @property
  def candidates(self):  # type: ignore[override]
    return self.k * self.overdraft if self.tree else self.k

  def __post_init__(self):
    super().__post_init__()
    if not 1 <= self.min_n <= self.n:
      raise ValueError(f"n-gram sizes must satisfy 1 <= min_n <= n, got n={self.n} "
                       f"min_n={self.min_n}")

  def init(self, spec):
    return None, (None,) * spec.lanes

  def propose(self, params, state, inp):
    b = len(state)
    drafts = np.zeros((b, self.candidates), np.int32)  # [B, K] (a tree: [B, candidates])
    n = np.zeros((b,), np.int32)
    parents = np.full((b, self.candidates), -1, np.int32)
    for i, index in enumerate(state):
      limit = int(inp.limit[i])
      if index is None or limit <= 0:
        continue
      extra = inp.forced[i, :int(inp.n_forced[i])].tolist()
      if self.tree:
        got, up = index.propose_tree(self.candidates - len(extra), limit, extra)
        parents[i, :len(up)] = up
      else:
        got = index.propose(limit, extra)
      drafts[i, :len(got)] = got
      n[i] = len(got)
    return Proposal(drafts, n, OneHotQ(), parents if self.tree else None), state

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
  tree: bool = False  # a token tree of up to k nodes: every match's continuation, merged
  overdraft: int = 2  # a tree proposes overdraft * k nodes; the k best legal ones are verified

  def validate(self) -> None:
    super().validate()
    check_overdraft(self.overdraft)
    for name in ("n", "min_n"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise OptionError(name, f"{name}={value!r} must be an integer >= 1")
    if self.min_n > self.n:
      raise OptionError("min_n", f"min_n={self.min_n} must be <= n={self.n}")
    if not isinstance(self.tree, bool):
      raise OptionError("tree", f"tree={self.tree!r} must be true or false")


def build(options: Options, context) -> NGramDrafter:
  return NGramDrafter(k=options.k, n=options.n, min_n=options.min_n, tree=options.tree,
                      overdraft=options.overdraft)
