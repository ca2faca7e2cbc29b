"""fill_batch: many sessions' lookahead masks into one [B, K+1, W] buffer, one call per backend."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from infernix_jax import mask_layout
from infernix_jax.constrain import backends


# enabled masks of all-constrained batches: _ALL_ENABLED[B] is bool [B] all True (copied).
_ALL_ENABLED = tuple(np.ones(b, bool) for b in range(257))


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
  # Written for the cold caches this runs in (once per round, between matcher fills that
  # evict them): plain loops and attribute reads, few numpy entry points, no comprehensions.
  if type(drafts) is not np.ndarray:
    drafts = np.asarray(drafts)
  if type(n_drafts) is not np.ndarray or n_drafts.ndim != 1:
    n_drafts = np.asarray(n_drafts).reshape(-1)
  shape = out.shape
  if len(shape) != 3 or shape[0] != b_size:
    raise ValueError(f"out {shape} must be [B={b_size}, K+1, W]")
  k = shape[1] - 1
  if drafts.shape != (b_size, k):
    raise ValueError(f"drafts {drafts.shape} must be [B={b_size}, K={k}]")
  n_list = n_drafts.tolist()
  if len(n_list) != b_size or (b_size and (min(n_list) < 0 or max(n_list) > k)):
    raise ValueError(f"n_drafts {n_drafts} must be [B={b_size}] with values in 0..{k}")
  # The buffer is checked by each backend, which knows what it writes through.
  name = first = None  # the backend name of the first session row
  mixed = disabled = False
  for s in sessions:
    if s is None:
      disabled = True
      continue
    try:
      got = s.backend
    except AttributeError:
      got = None  # no backend: filled by its own lookahead
    if first is None:
      first, name = s, got
    elif got != name:
      mixed = True
  if disabled:
    enabled = np.array([s is not None for s in sessions], bool)
  elif b_size < len(_ALL_ENABLED):
    enabled = _ALL_ENABLED[b_size].copy()
  else:
    enabled = np.ones(b_size, bool)
  if first is not None and not mixed:  # one backend (the usual batch): it sees every row
    states = _fill_group(name, sessions, drafts, n_drafts, out, batch_threads)
    if disabled:
      states[~enabled] = mask_layout.READY
    return states, enabled
  states = np.full((b_size, shape[1]), mask_layout.READY, np.int8)  # [B, P]
  groups: dict[str | None, list[int]] = {}
  for b, s in enumerate(sessions):
    if s is not None:
      groups.setdefault(getattr(s, "backend", None), []).append(b)
  for name, rows in groups.items():
    part = [None] * b_size
    for b in rows:
      part[b] = sessions[b]
    states[rows] = _fill_group(name, part, drafts, n_drafts, out, batch_threads)[rows]
  return states, enabled


def _fill_group(name: str | None, sessions: Sequence, drafts: np.ndarray, n_drafts: np.ndarray,
                out: np.ndarray, threads: int) -> np.ndarray:
  """One backend's `ConstraintBackend.fill_batch` (None: sessions without a backend name, by
  their own lookahead)."""
  if name is None:
    return backends.fill_rows(sessions, drafts, n_drafts, out)
  return backends.get(name).fill_batch(sessions, drafts, n_drafts, out, threads=threads)
