"""Suffix decoding: token trees from the workload's earlier outputs and the prompt (host).

SuffixDecoding (Oliaro et al., arXiv 2411.04975): two suffix tries per lane give candidate
speculation trees continuing the lane's context, and the higher-scoring one is proposed:
- the request's own tree: its prompt and its output so far;
- the shared history: the outputs of every request with the same history key, kept while the
  engine lives (finished ones and those still running on other lanes, which extend it token
  by token as they commit), capped in size (oldest outputs evicted first).

History keys (`GenerationRequest.draft_history`): "auto" keys a request by its constraint
(kind + a hash of the schema / grammar / choices) or by its tools' names, so requests that
fill the same schema share their outputs; unconstrained requests share one history. Any
other string names a history; None keeps the request out (it reads and adds nothing, and
drafts from its own prompt and output only). Histories belong to one engine (its drafter
state) and are never written to disk.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np

from infernix_jax.pallas import OneHotQ
from infernix_jax.runtime.drafters._suffix_index import SuffixIndex, Speculation
from infernix_jax.runtime.drafters.base import (Drafter, DrafterOptions, OptionError, Proposal,
                                                check_overdraft)


@dataclasses.dataclass
class _Lane:
  """One running request: its context, its history and its own trie."""

  tokens: list[int]
  key: str | None
  seq: int  # its output's id in the shared history
  own: SuffixIndex  # prompt + output


@dataclasses.dataclass
class SuffixState:
  """The drafter's host state: per-lane requests and the shared histories by key."""

  lanes: list
  histories: dict = dataclasses.field(default_factory=dict)
  keys: dict = dataclasses.field(default_factory=dict)  # lane -> key of the next admission
  ids: Any = dataclasses.field(default_factory=itertools.count)


@dataclasses.dataclass(frozen=True, eq=False)
class SuffixDrafter(Drafter):
  """Suffix decoding over each lane's prompt and its workload's earlier outputs; q one-hot.

  A round's proposal is the better of the two tries' best-first trees (up to k nodes, depth
  at most the lane's limit); with tree=False, the most probable root path of that tree (a
  chain of up to k). Under jump-forward the forced tokens come first and the tree continues
  them (their context included).
  """

  k: int = 8
  tree: bool = True  # a token tree of up to k nodes; False: its best root path (a chain)
  max_depth: int = 40  # substrings counted per trie (matched suffix + continuation)
  max_match: int = 20  # the longest context suffix matched
  min_score: float = 0.0  # nodes must score above it (a path's empirical probability)
  max_nodes: int = 400_000  # the most trie nodes of one history (oldest outputs evicted)
  overdraft: int = 2  # a tree proposes overdraft * k nodes; the k best legal ones are verified

  name = "suffix"

  @property
  def candidates(self):  # type: ignore[override]
    return self.k * self.overdraft if self.tree else self.k

  def init(self, spec):
    return None, SuffixState(lanes=[None] * spec.lanes)

  def admit(self, state, keys):
    state.keys.update(keys)
    return state

  def _history(self, state: SuffixState, key: str) -> SuffixIndex:
    index = state.histories.get(key)
    if index is None:
      index = state.histories[key] = SuffixIndex(self.max_depth, self.max_nodes)
    return index

  def extend(self, params, state, rows, hidden, reset):
    for lane, tokens in rows.items():
      tokens = [int(t) for t in tokens]
      x = state.lanes[lane]
      if reset or x is None:
        key = state.keys.pop(lane, "unconstrained")
        x = state.lanes[lane] = _Lane([], key, next(state.ids),
                                      SuffixIndex(self.max_depth, self.max_nodes))
        x.tokens.extend(tokens)
        x.own.extend(0, tokens)
        continue
      self._append(state, x, tokens)  # a forced close is output
    return state

  def _append(self, state: SuffixState, x: _Lane, tokens: list[int]) -> None:
    x.tokens.extend(tokens)
    x.own.extend(0, tokens)
    if x.key is not None:
      self._history(state, x.key).extend(x.seq, tokens)

  def propose(self, params, state, inp):
    b = len(state.lanes)
    drafts = np.zeros((b, self.candidates), np.int32)
    parents = np.full((b, self.candidates), -1, np.int32)
    n = np.zeros((b,), np.int32)
    for i, x in enumerate(state.lanes):
      limit = int(inp.limit[i])
      if x is None or limit <= 0:
        continue
      extra = inp.forced[i, :int(inp.n_forced[i])].tolist()
      budget = (self.candidates if self.tree else self.k) - len(extra)
      if budget <= 0:
        continue
      spec = self._speculate(state, x, x.tokens + extra, budget, limit)
      tokens, up = (spec.tokens, spec.parents) if self.tree else _best_path(spec)
      m = len(tokens)
      drafts[i, :m] = tokens
      parents[i, :m] = up if self.tree else np.arange(-1, m - 1)
      n[i] = m
    return Proposal(drafts, n, OneHotQ(), parents if self.tree else None), state

  def _speculate(self, state, x: _Lane, context, budget: int, depth: int) -> Speculation:
    """The higher-scoring tree of the shared history and the lane's own trie."""
    kw = dict(max_depth=depth, min_score=self.min_score, max_match=self.max_match)
    best = x.own.speculate(context, budget, **kw)
    if x.key is not None and x.key in state.histories:
      shared = state.histories[x.key].speculate(context, budget, **kw)
      if shared.score > best.score:
        best = shared
    return best

  def advance(self, params, state, committed):
    for i, x in enumerate(state.lanes):
      c = int(committed.counts[i])
      if x is not None and c:
        self._append(state, x, committed.tokens[i, :c].tolist())
    return state

  def clear(self, state, rows):
    """Lanes that went non-finite: their output leaves the shared history."""
    for i in np.flatnonzero(np.asarray(rows)):
      x = state.lanes[i]
      if x is not None and x.key is not None and x.key in state.histories:
        state.histories[x.key].remove(x.seq)
      state.lanes[i] = None
    return state


def _best_path(spec: Speculation) -> tuple[list[int], list[int]]:
  """The root path through the highest-scoring child at every level of a speculation tree."""
  children: dict[int, list[int]] = {}
  for j, p in enumerate(spec.parents):
    children.setdefault(p, []).append(j)
  path, at = [], -1
  while at in children:
    at = max(children[at], key=lambda j: (spec.scores[j], -j))
    path.append(spec.tokens[at])
  return path, list(range(-1, len(path) - 1))


@dataclasses.dataclass(frozen=True)
class Options(DrafterOptions):
  """Suffix decoding's options."""

  k: int = 8  # the most nodes of a tree (chain: tokens) per round
  tree: bool = True  # propose a token tree; false: its best root path
  max_depth: int = 40  # substrings counted per trie (matched suffix + continuation)
  max_match: int = 20  # the longest context suffix matched
  min_score: float = 0.0  # a node's path probability must exceed it
  max_nodes: int = 400_000  # the most trie nodes of one history (oldest outputs evicted)
  overdraft: int = 2  # a tree proposes overdraft * k nodes; the k best legal ones are verified

  def validate(self) -> None:
    super().validate()
    check_overdraft(self.overdraft)
    if not isinstance(self.tree, bool):
      raise OptionError("tree", f"tree={self.tree!r} must be true or false")
    for name, low in (("max_depth", 2), ("max_match", 1)):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise OptionError(name, f"{name}={value!r} must be an integer >= {low}")
    if self.max_match >= self.max_depth:
      raise OptionError("max_match", f"max_match={self.max_match} must be < max_depth="
                                     f"{self.max_depth} (a match leaves max_depth - max_match "
                                     f"tree levels)")
    if not isinstance(self.min_score, (int, float)) or not 0 <= self.min_score < 1:
      raise OptionError("min_score", f"min_score={self.min_score!r} must be in [0, 1)")
    least = self.max_depth * (self.max_depth + 1) // 2
    if isinstance(self.max_nodes, bool) or not isinstance(self.max_nodes, int) or (
        self.max_nodes < least):
      raise OptionError("max_nodes", f"max_nodes={self.max_nodes!r} must be an integer >= "
                                     f"{least} (max_depth * (max_depth + 1) / 2)")


def build(options: Options, context) -> SuffixDrafter:
  return SuffixDrafter(k=options.k, tree=options.tree, max_depth=options.max_depth,
                       max_match=options.max_match, min_score=float(options.min_score),
                       max_nodes=options.max_nodes, overdraft=options.overdraft)
