"""Host drafters whose drafts a test chooses: a function of each lane's context (prompt +
committed output) gives the chain, or the tree, a round verifies."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from infernix_jax.pallas import OneHotQ
from infernix_jax.runtime.drafters.base import Drafter, Proposal


@dataclasses.dataclass(frozen=True, eq=False)
class Scripted(Drafter):
  """Drafts `script(context, limit)`: a list of ids, cut to `limit` (any ids: padding, EOS,
  special tokens). State: each lane's context, a tuple (None for a free lane)."""

  script: Callable[[tuple[int, ...], int], Any] = None

  name = "scripted"

  def init(self, spec):
    return None, (None,) * spec.lanes

  def _proposal(self, state, inp, width):
    b = len(state)
    drafts = np.zeros((b, width), np.int32)  # [B, C]
    parents = np.full((b, width), -1, np.int32)
    n = np.zeros((b,), np.int32)
    for i, context in enumerate(state):
      limit = int(inp.limit[i])
      if context is None or limit <= 0:
        continue
      got, up = self._script(context, limit)
      got, up = list(got)[:width], list(up)[:width]
      drafts[i, :len(got)], parents[i, :len(up)], n[i] = got, up, len(got)
    return drafts, parents, n

  def _script(self, context, limit):
    chain = list(self.script(context, limit))[:limit]
    return chain, [j - 1 for j in range(len(chain))]

  def propose(self, params, state, inp):
    drafts, _, n = self._proposal(state, inp, self.k)
    return Proposal(drafts, n, OneHotQ()), state

  def advance(self, params, state, committed):
    return tuple(None if c is None else c + tuple(int(t) for t in
                                                  committed.tokens[i, :int(committed.counts[i])])
                 for i, c in enumerate(state))

  def extend(self, params, state, rows, hidden, reset):
    state = list(state)
    for lane, tokens in rows.items():
      base = () if reset or state[lane] is None else state[lane]
      state[lane] = base + tuple(int(t) for t in tokens)
    return tuple(state)


@dataclasses.dataclass(frozen=True, eq=False)
class ScriptedTree(Scripted):
  """A tree drafter: `script(context, limit)` -> (drafts, parents), parents first, parent
  -1 for the anchor, depth at most `limit` (the script's duty)."""

  name = "scripted-tree"
  tree = True

  def _script(self, context, limit):
    return self.script(context, limit)

  def propose(self, params, state, inp):
    drafts, parents, n = self._proposal(state, inp, self.k)
    return Proposal(drafts, n, OneHotQ(), parents), state
