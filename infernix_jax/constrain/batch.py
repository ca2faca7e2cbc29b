"""fill_batch: many sessions' lookahead masks into one [B, K+1, W] buffer, disabled rows skipped."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from infernix_jax import mask_layout
from infernix_jax.constrain import _xgr


def fill_batch(sessions: Sequence, drafts: np.ndarray, n_drafts: np.ndarray, out: np.ndarray,
               *, batch_threads: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """Fills per-position masks for a batch of rows.

  Args:
    sessions: B entries, each an OutputSession (or any object with ``lookahead(drafts, out)``,
      e.g. a trie session) or None for an unconstrained row.
    drafts: int32 [B, K] proposed ids (row b uses its first ``n_drafts[b]``).
    n_drafts: int [B] real proposal extent per row (0..K).
    out: C-contiguous int32 numpy buffer [B, K+1, W].
    batch_threads: when > 0, position 0 of the xgrammar-backed rows whose committed mask is
      not cached yet is filled by xgrammar's BatchGrammarMatcher with this many threads
      (worth it for large B on a machine with idle cores); 0 = per-row filling only.

  Returns:
    (states int8 [B, K+1], enabled bool [B]). A disabled row (None) is not filled: its
    ``out`` row is left as is, ``enabled[b]`` is False and its states are READY (ignored).
    Positions past a row's ``n_drafts[b]`` are UNREACHABLE with zeroed mask words.
  """
  b_size = len(sessions)
  drafts = np.asarray(drafts)
  n_drafts = np.asarray(n_drafts).reshape(-1)
  if out.ndim != 3 or out.shape[0] != b_size:
    raise ValueError(f"out {out.shape} must be [B={b_size}, K+1, W]")
  if drafts.ndim != 2 or drafts.shape[0] != b_size or drafts.shape[1] + 1 != out.shape[1]:
    raise ValueError(f"drafts {drafts.shape} must be [B={b_size}, K={out.shape[1] - 1}]")
  if n_drafts.shape != (b_size,) or (n_drafts < 0).any() or (n_drafts > drafts.shape[1]).any():
    raise ValueError(f"n_drafts {n_drafts} must be [B] with values in 0..{drafts.shape[1]}")
  if b_size == 0:
    return np.zeros((0, out.shape[1]), np.int8), np.zeros(0, bool)
  _xgr.check_buffer(out, out.shape[-1])
  states = np.full((b_size, out.shape[1]), mask_layout.READY, np.int8)
  enabled = np.array([s is not None for s in sessions], bool)
  if batch_threads > 0:
    _prefill_frontiers(sessions, out, batch_threads)
  for b, s in enumerate(sessions):
    if s is None:
      continue
    n = int(n_drafts[b])
    row = s.lookahead(drafts[b, :n], out=out[b, :n + 1])
    states[b, :n + 1] = row
    if n + 1 < out.shape[1]:
      states[b, n + 1:] = mask_layout.UNREACHABLE
      out[b, n + 1:] = 0
  return states, enabled


def _prefill_frontiers(sessions: Sequence, out: np.ndarray, threads: int) -> None:
  """Computes the uncached committed-state masks of xgrammar sessions in one batch call."""
  from infernix_jax.constrain.session import OutputSession

  rows = [b for b, s in enumerate(sessions) if isinstance(s, OutputSession)
          and s._frontier is None and s._pending is None and not s._m.is_terminated()]
  if len(rows) < 2:
    return
  matcher = sessions[rows[0]].vocab.lazy(f"constrain.batch_matcher.{threads}",
                                         lambda: _xgr.batch_matcher(threads))
  flat = out.reshape(-1, out.shape[-1])  # [B*(K+1), W] view of the same memory
  p = out.shape[1]
  matcher.batch_fill_next_token_bitmask([sessions[b]._m for b in rows], flat, [b * p for b in rows])
  for b in rows:
    sessions[b]._set_frontier(out[b, :1].copy())
