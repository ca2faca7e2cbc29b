"""Numpy export of a trie automaton: the arrays a device-resident automaton uploads as they are.

The export is plain numpy (constrain/ never imports jax); ``runtime/device_automaton.py`` turns
it into device arrays with jnp ``step`` and ``mask`` functions.

States S = N + 2: trie nodes ``0..N-1``, ``end = N`` (EOS accepted), ``dead = N + 1`` (an illegal
token was taken). Masks come either as one packed row per state (``masks``, when that fits a
byte budget) or as the host's compact form (non-zero words per narrow state, packed rows for
wide ones).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from infernix_jax.constrain.trie._automaton import TrieAutomaton

# Dense per-state masks up to this many bytes (S * W * 4); above it the compact form is used.
DEFAULT_DENSE_LIMIT_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True)
class AutomatonTables:
  """The automaton as int32 numpy arrays (S states, E legal pairs, W mask words).

  Attributes:
    row_ptr: int32 [S + 1], legal pairs of state s are ``row_ptr[s]:row_ptr[s+1]``.
    ids: int32 [E], legal token ids, ascending within a state.
    next: int32 [E], the state each legal token leads to (EOS -> ``end``).
    terminal: bool [S], states where a value ends (EOS legal).
    masks: int32 [S, W] packed mask per state, or None in the compact form.
    word_ptr: int32 [S + 1] (compact form) non-zero words of narrow states.
    word_idx: int32 [Ew] word index of each stored word.
    word_val: int32 [Ew] word value of each stored word.
    dense_of: int32 [S], row of a wide state in ``dense``, else -1.
    dense: int32 [Nd, W], packed masks of wide states.
    vocab_size: V.
    end: the EOS-accepted sink.
    dead: the illegal-token sink.
    max_row: the longest legal-token list (binary-search depth on device).
    max_words: the most stored words of a narrow state.
  """

  row_ptr: np.ndarray
  ids: np.ndarray
  next: np.ndarray
  terminal: np.ndarray
  masks: np.ndarray | None
  word_ptr: np.ndarray
  word_idx: np.ndarray
  word_val: np.ndarray
  dense_of: np.ndarray
  dense: np.ndarray
  vocab_size: int
  end: int
  dead: int
  max_row: int
  max_words: int

  @property
  def n_states(self) -> int:
    return int(self.terminal.shape[0])

  @property
  def mask_words(self) -> int:
    return int(self.dense.shape[1]) if self.masks is None else int(self.masks.shape[1])

  def nbytes(self) -> int:
    """Bytes of all arrays (what a device upload costs)."""
    arrays = [self.row_ptr, self.ids, self.next, self.terminal, self.word_ptr, self.word_idx,
              self.word_val, self.dense_of, self.dense]
    if self.masks is not None:
      arrays.append(self.masks)
    return int(sum(a.nbytes for a in arrays))


def export(automaton: TrieAutomaton, *, dense_limit_bytes: int = DEFAULT_DENSE_LIMIT_BYTES,
           dense: bool | None = None) -> AutomatonTables:
  """Exports a TrieAutomaton as device-ready int32 arrays.

  Args:
    automaton: the compiled automaton.
    dense_limit_bytes: use one packed row per state when ``S * W * 4`` is at most this.
    dense: force (True) or forbid (False) the per-state rows; None decides by the limit.

  Returns:
    AutomatonTables.
  """
  a = automaton
  s = a.n_nodes + 2
  w = a.mask_words
  if dense is None:
    dense = s * w * 4 <= dense_limit_bytes
  masks = None
  if dense:
    masks = np.zeros((s, w), dtype=np.int32)   # [S, W]
    a.fill_many(np.arange(s), masks)
  row_len = np.diff(a.row_ptr)
  word_len = np.diff(a.word_ptr)
  i32 = lambda x: np.ascontiguousarray(x, dtype=np.int32)  # noqa: E731
  return AutomatonTables(
      row_ptr=i32(a.row_ptr), ids=i32(a.ids), next=i32(a.next), terminal=a.terminal.copy(),
      masks=masks, word_ptr=i32(a.word_ptr), word_idx=i32(a.word_idx), word_val=i32(a.word_val),
      dense_of=i32(a.dense_of), dense=i32(a.dense.reshape(-1, w)), vocab_size=a.vocab_size,
      end=a.end, dead=a.dead, max_row=int(row_len.max()) if row_len.size else 0,
      max_words=int(word_len.max()) if word_len.size else 0)


def combine(parts: "list[AutomatonTables]") -> tuple[AutomatonTables, np.ndarray]:
  """One automaton holding several (compact form), so rows of different tries share tables.

  The trie nodes of each part are laid out one after the other and the parts' sinks merge
  into one ``end`` and one ``dead``. A row of part i at node n sits at ``offsets[i] + n``.

  Args:
    parts: compact-form tables (``export(..., dense=False)``) of one vocabulary.

  Returns:
    (combined AutomatonTables, offsets int64 [len(parts)]).
  """
  if not parts:
    raise ValueError("combine needs at least one automaton")
  if any(p.masks is not None for p in parts):
    raise ValueError("combine takes compact tables: export(..., dense=False)")
  w = parts[0].mask_words
  sizes = np.array([p.end for p in parts], np.int64)  # N_i trie nodes (end = N_i)
  offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
  n = int(sizes.sum())
  end, dead = n, n + 1
  row_len, ids, nxt, terminal = [], [], [], []
  word_len, word_idx, word_val, dense_of, dense = [], [], [], [], []
  dense_rows = 0
  for p, off in zip(parts, offsets):
    nodes = p.end
    e = p.row_ptr[nodes]  # edges of the trie nodes (sink rows are empty)
    row_len.append(np.diff(p.row_ptr[:nodes + 1]))
    ids.append(p.ids[:e])
    tgt = p.next[:e].astype(np.int64)
    nxt.append(np.where(tgt == p.end, end, np.where(tgt == p.dead, dead, tgt + off)))
    terminal.append(p.terminal[:nodes])
    ew = p.word_ptr[nodes]
    word_len.append(np.diff(p.word_ptr[:nodes + 1]))
    word_idx.append(p.word_idx[:ew])
    word_val.append(p.word_val[:ew])
    d = p.dense_of[:nodes]
    dense_of.append(np.where(d >= 0, d + dense_rows, -1))
    dense.append(p.dense.reshape(-1, w))
    dense_rows += p.dense.reshape(-1, w).shape[0]
  i32 = lambda parts_, extra=(): np.ascontiguousarray(  # noqa: E731
      np.concatenate(list(parts_) + [np.asarray(extra, np.int64)]), dtype=np.int32)
  rows = np.concatenate(row_len + [np.zeros(2, np.int64)])
  words = np.concatenate(word_len + [np.zeros(2, np.int64)])
  combined = AutomatonTables(
      row_ptr=i32([np.cumsum(np.concatenate([[0], rows]))]), ids=i32(ids), next=i32(nxt),
      terminal=np.concatenate(terminal + [np.zeros(2, bool)]), masks=None,
      word_ptr=i32([np.cumsum(np.concatenate([[0], words]))]), word_idx=i32(word_idx),
      word_val=i32(word_val), dense_of=i32(dense_of, (-1, -1)),
      dense=np.ascontiguousarray(np.concatenate(dense).reshape(-1, w), dtype=np.int32),
      vocab_size=parts[0].vocab_size, end=end, dead=dead,
      max_row=max(p.max_row for p in parts), max_words=max(p.max_words for p in parts))
  return combined, offsets
