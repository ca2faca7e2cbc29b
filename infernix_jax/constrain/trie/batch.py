"""Vectorized lookahead for a batch of trie sessions: one pass per draft position, one mask fill.

``ic.fill_batch`` hands the trie rows of a batch to the trie backend, which calls this module:
the result of per-row ``lookahead`` for all rows of an automaton at once (B x K vectorized
steps, then one ``fill_many`` over the B x (K+1) states), which is what keeps a 128-row batch
under a millisecond of host time.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from infernix_jax import mask_layout
from infernix_jax.constrain.trie.session import TrieSession


def lookahead_many(automaton, nodes: np.ndarray, drafts: np.ndarray, n_drafts: np.ndarray,
                   out: np.ndarray) -> np.ndarray:
  """Lookahead of many rows of one automaton (the TrieSession.lookahead semantics).

  Args:
    automaton: the TrieAutomaton.
    nodes: int [R] current node of each row (``automaton.end`` for a terminated row).
    drafts: int [R, K] draft tokens.
    n_drafts: int [R] drafts to check per row (0..K).
    out: int32 [R, K+1, W] C-contiguous buffer; every position is written (Unreachable and
      DeadEnd rows with zeros).

  Returns:
    int8 [R, K+1] states.
  """
  a = automaton
  r, k = drafts.shape
  path = np.empty((r, k + 1), dtype=np.int64)   # [R, P] node after drafts[:i]
  path[:, 0] = nodes
  for i in range(k):
    nxt = a.step_many(path[:, i], drafts[:, i])
    path[:, i + 1] = np.where(i < n_drafts, nxt, a.dead)
  nonempty = a.fill_many(path.reshape(-1), out.reshape(r * (k + 1), -1)).reshape(r, k + 1)
  reached = path < a.n_nodes
  return np.where(reached, np.where(nonempty, mask_layout.READY, mask_layout.DEAD_END),
                  mask_layout.UNREACHABLE).astype(np.int8)


def fill_batch(sessions: Sequence, drafts: np.ndarray, n_drafts: np.ndarray,
               out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """``ic.fill_batch`` for rows that are TrieSessions (or None), vectorized per automaton.

  Args:
    sessions: B entries, TrieSession or None (unconstrained row: not filled).
    drafts: int32 [B, K]; n_drafts: int [B]; out: int32 [B, K+1, W] C-contiguous.

  Returns:
    (states int8 [B, K+1], enabled bool [B]), exactly as ``ic.fill_batch``.

  Raises:
    TypeError: a row holds another kind of session (use ``ic.fill_batch`` for mixed batches).
    RuntimeError: a session has an uncommitted preview.
  """
  b = len(sessions)
  drafts = np.asarray(drafts)
  n_drafts = np.asarray(n_drafts).reshape(-1)
  if out.ndim != 3 or out.shape[0] != b or drafts.shape != (b, out.shape[1] - 1):
    raise ValueError(f"out {out.shape} must be [B={b}, K+1, W] and drafts {drafts.shape} [B, K]")
  if not out.flags.c_contiguous or out.dtype != np.int32:
    raise ValueError("out must be a C-contiguous int32 array")
  states = np.full((b, out.shape[1]), mask_layout.READY, np.int8)
  enabled = np.array([s is not None for s in sessions], bool)
  groups: dict[int, list[int]] = {}
  for i, s in enumerate(sessions):
    if s is None:
      continue
    if not isinstance(s, TrieSession):
      raise TypeError(f"row {i} is a {type(s).__name__}, not a TrieSession")
    if s.previewing:
      raise RuntimeError(f"row {i}: lookahead while a preview is uncommitted")
    groups.setdefault(id(s.automaton), []).append(i)
  for rows in groups.values():
    a = sessions[rows[0]].automaton
    nodes = np.array([sessions[i].node for i in rows], dtype=np.int64)
    if len(rows) == b:     # every row: write straight into the caller's buffer
      states[:] = lookahead_many(a, nodes, drafts, n_drafts, out)
    else:
      idx = np.asarray(rows)
      tmp = np.empty((len(rows),) + out.shape[1:], np.int32)
      states[idx] = lookahead_many(a, nodes, drafts[idx], n_drafts[idx], tmp)
      out[idx] = tmp
  return states, enabled
