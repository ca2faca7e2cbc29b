"""fill_batch: many sessions' lookahead masks into one [B, K+1, W] buffer, one call per backend."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from infernix_jax import mask_layout
from infernix_jax.constrain import _xgr, backends


def fill_batch(sessions: Sequence, drafts: np.ndarray, n_drafts: np.ndarray, out: np.ndarray,
               *, batch_threads: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """Fills per-position masks for a batch of rows.

  Rows are grouped by their session's ``backend`` and each backend fills its rows in one
  `ConstraintBackend.fill_batch` call (the other rows passed as None, so nothing is copied).

  Args:
    sessions: B entries, each a session (``session.backend`` names its backend) or None for
      an unconstrained row. A session without a ``backend`` attribute is filled by its own
      ``lookahead``.
    drafts: int32 [B, K] proposed ids (row b uses its first ``n_drafts[b]``).
    n_drafts: int [B] real proposal extent per row (0..K).
    out: C-contiguous int32 numpy buffer [B, K+1, W].
    batch_threads: host threads a backend may use (xgrammar: position 0 of rows whose
      committed mask is not cached yet comes from one BatchGrammarMatcher call, worth it for
      large B on a machine with idle cores); 0 = the calling thread only.

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
  states = np.full((b_size, out.shape[1]), mask_layout.READY, np.int8)  # [B, P]
  enabled = np.array([s is not None for s in sessions], bool)
  groups: dict[str | None, list[int]] = {}
  for b, s in enumerate(sessions):
    if s is not None:
      groups.setdefault(getattr(s, "backend", None), []).append(b)
  for name, rows in groups.items():
    if len(rows) == b_size:
      part = sessions
    else:
      part = [None] * b_size
      for b in rows:
        part[b] = sessions[b]
    if name is None:
      got = backends.fill_rows(part, drafts, n_drafts, out)
    else:
      got = backends.get(name).fill_batch(part, drafts, n_drafts, out, threads=batch_threads)
    states[rows] = got[rows]
  return states, enabled
