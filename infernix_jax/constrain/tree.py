"""Lookahead masks for the nodes of a draft tree: one packed mask row per node.

Axis letters (docs/CONTRACTS.md): B rows, N drafted nodes, W mask words.

A draft tree of one row is drafts[0..n-1] with parents[j] in {-1 (the root: the committed
state), 0..j-1} (topological order). Row 0 of the output is the root's position (the
committed state's legal set); row j + 1 is the position after node j's root path. The walk
calls the session's chain `lookahead` once per leaf, on the leaf's root path: the session's
own preview / rollback does the forking, so every backend (and its UTF-8 and jump-forward
state) behaves as for a chain, and a chain-shaped tree is exactly one chain lookahead.
Nodes shared by several leaves get the same row from each of them.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from infernix_jax import mask_layout


def root_paths(parents: Sequence[int], n: int) -> list[list[int]]:
  """The root path (node indices, root first excluded) of every leaf among nodes 0..n-1."""
  has_child = [False] * n
  for j in range(n):
    p = int(parents[j])
    if not -1 <= p < j:
      raise ValueError(f"parents[{j}]={p} must be -1 (the root) or a node index < {j}")
    if p >= 0:
      has_child[p] = True
  paths = []
  for leaf in range(n):
    if has_child[leaf]:
      continue
    path, j = [], leaf
    while j >= 0:
      path.append(j)
      j = int(parents[j])
    paths.append(path[::-1])
  return paths


def tree_lookahead(session, drafts, parents, n: int, out: np.ndarray) -> np.ndarray:
  """Masks and states of the root and of nodes 0..n-1 of one row's draft tree.

  Args:
    session: the row's constraint session (its `lookahead(drafts, out)` does each path).
    drafts: int [N] node tokens; parents: int [N] (see the module docstring); n: real nodes.
    out: C-contiguous int32 [N + 1, W]; rows past n are zeroed.

  Returns:
    int8 [N + 1] states (READY / DEAD_END / UNREACHABLE); past n: UNREACHABLE.
  """
  rows = out.shape[0]
  states = np.full(rows, mask_layout.UNREACHABLE, np.int8)
  paths = root_paths(parents, n) if n else [[]]
  depth = max(len(p) for p in paths)
  scratch = np.zeros((depth + 1, out.shape[1]), np.int32)
  for path in paths:
    got = session.lookahead([int(drafts[j]) for j in path], out=scratch[:len(path) + 1])
    out[0] = scratch[0]
    states[0] = got[0]
    for i, j in enumerate(path):
      out[j + 1] = scratch[i + 1]
      states[j + 1] = got[i + 1]
  out[n + 1:] = 0
  return states


def illegal_nodes(drafts, parents, n: int, mask: np.ndarray, states: np.ndarray) -> np.ndarray:
  """bool [n]: nodes the grammar rules out (their token is not in the legal set of their
  parent's position, or that position is not READY), with every descendant of such a node.

  mask: int32 [N + 1, W] and states int8 [N + 1] of `tree_lookahead` for the row.
  """
  out = np.zeros(n, bool)
  for j in range(n):
    p = int(parents[j])
    if p >= 0 and out[p]:
      out[j] = True
      continue
    row = p + 1
    d = int(drafts[j])
    # (bits of ids >= V are 0 by the layout; `bit` is False outside the words)
    legal = states[row] == mask_layout.READY and mask_layout.bit(mask[row], d)
    out[j] = not legal
  return out
