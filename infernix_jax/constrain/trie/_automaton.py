"""The trie automaton: byte trie over the choice values with precomputed per-node legal token sets.

Construction (paper section 4.2, vectorized): every trie node n starts a walk of the vocabulary
index; the frontier of (start node, trie node, index node) triples advances one trie edge per
round for all walks at once. A token is recorded in ``valid[start]`` when the index node spells
it; the walk's trie node is where the token lands. Walks only follow trie edges, so tokens that
overshoot a leaf or leave the trie are never recorded; landing on any node is fine because every
trie node is a prefix of some value. EOS ids are legal exactly at nodes where a value ends (also
when that value prefixes another).

Storage (E legal (node, token) pairs, N nodes):
  * transitions: per node, token ids ascending and the node each leads to (EOS -> ``end``);
  * narrow nodes: the non-zero mask words as (word index, word value) pairs;
  * wide nodes (many non-zero words): a packed row of W words.
Per step the host does a lookup and a copy into the caller's buffer.
"""

from __future__ import annotations

import bisect
import dataclasses
import time

import numpy as np

from infernix_jax import mask_layout
from infernix_jax.constrain.trie import _bytetrie


class TrieAutomaton:
  """Immutable per-constraint tables; sessions only hold a node id.

  Node ids: ``0 .. n_nodes-1`` trie nodes (0 = root, the empty prefix), ``end = n_nodes``
  (EOS accepted), ``dead = n_nodes + 1`` (an illegal token was taken). Neither sink has a
  legal token.

  Attributes:
    vocab_size: V.
    n_nodes: N trie nodes.
    n_values: K unique values.
    n_chars: total bytes of the unique values.
    row_ptr: int64 [N + 3], legal pairs of node n are ``row_ptr[n]:row_ptr[n+1]``.
    ids: int32 [E], legal token ids, ascending per node.
    next: int32 [E], the node each legal token leads to.
    terminal: bool [N + 2], nodes where a value ends.
    word_ptr, word_idx, word_val: CSR of the non-zero mask words of each narrow node.
    dense_of: int32 [N + 2], row in ``dense`` of a wide node, else -1.
    dense: int32 [Nd, W], packed masks of wide nodes.
    build_seconds: wall time of ``build``.
  """

  def __init__(self, **tables):
    for k, v in tables.items():
      setattr(self, k, v)
    self.end = self.n_nodes
    self.dead = self.n_nodes + 1
    self.mask_words = mask_layout.mask_words(self.vocab_size)
    for name in ("row_ptr", "ids", "next", "terminal", "word_ptr", "word_idx", "word_val",
                 "dense_of", "dense"):
      getattr(self, name).flags.writeable = False   # shared by every session: read-only
    # memoryviews make the per-step scalar lookups cheap (indexing yields Python ints, no
    # numpy scalar boxing) with no copy and no per-element objects.
    self._wp = memoryview(self.word_ptr)
    self._rp = memoryview(self.row_ptr)
    self._dense_of = memoryview(self.dense_of)
    self._ids = memoryview(self.ids)
    self._next = memoryview(self.next)
    self._wi = memoryview(self.word_idx)
    self._wv = memoryview(self.word_val)

  @classmethod
  def build(cls, values, index, eos_ids, *, dense_fraction: float = 1 / 16,
            presorted: bool = False) -> "TrieAutomaton":
    """Compiles a set of byte strings against a vocabulary index.

    Args:
      values: iterable of ``bytes`` (duplicates are merged).
      index: the vocabulary's ``VocabIndex``.
      eos_ids: ids legal where a value ends.
      dense_fraction: a node whose mask has more than this fraction of W non-zero words is
        stored as a packed row.
      presorted: ``values`` is already a sorted list of distinct bytes (skips a sort).
    """
    t0 = time.perf_counter()
    trie = _bytetrie.build(values, presorted=presorted)
    n = trie.n_nodes
    v_size = index.vocab_size
    w = mask_layout.mask_words(v_size)
    starts, toks, dests = [], [], []
    # Frontier: walk start node, current trie node, current index node.
    f_start = np.arange(n, dtype=np.int64)
    f_node = f_start
    f_idx = np.zeros(n, dtype=np.int64)
    while f_start.size:
      rows, child = _bytetrie.expand_children(trie.child_ptr, f_node)
      nxt = index.step(f_idx[rows], trie.byte[child])
      ok = nxt >= 0
      rows, child, nxt = rows[ok], child[ok], nxt[ok]
      s = f_start[rows]
      trow, tid = index.tokens_at(nxt)
      starts.append(s[trow])
      toks.append(tid.astype(np.int64))
      dests.append(child[trow])
      cont = index.has_children[nxt]
      f_start, f_node, f_idx = s[cont], child[cont], nxt[cont]
    term_nodes = trie.terminal.astype(np.int64)   # distinct: one per unique value
    eos = np.asarray(sorted(set(int(e) for e in eos_ids)), dtype=np.int64)
    if eos.size and term_nodes.size:
      starts.append(np.repeat(term_nodes, eos.size))
      toks.append(np.tile(eos, term_nodes.size))
      dests.append(np.full(term_nodes.size * eos.size, n, dtype=np.int64))
    s, t, d = _sort_pairs(starts, toks, dests, n, v_size)
    row_ptr = _ptr(s, n + 2)
    # Mask words: group (node, word) runs of the sorted pairs and OR their bits.
    word = t >> 5
    key = s * w + word
    brk = np.empty(key.shape[0], dtype=bool)
    if key.size:
      brk[0] = True
      np.not_equal(key[1:], key[:-1], out=brk[1:])
    gstart = np.flatnonzero(brk)
    bits = np.left_shift(np.uint32(1), (t & 31).astype(np.uint32))
    wval = (np.bitwise_or.reduceat(bits, gstart) if gstart.size else np.zeros(0, np.uint32))
    wval = wval.view(np.int32)
    widx = word[gstart].astype(np.int32)
    wnode = s[gstart]
    nwords = np.bincount(wnode, minlength=n + 2)
    wide = np.flatnonzero(nwords > max(1, int(w * dense_fraction)))
    dense_of = np.full(n + 2, -1, dtype=np.int32)
    dense_of[wide] = np.arange(wide.size, dtype=np.int32)
    dense = np.zeros((wide.size, w), dtype=np.int32)   # [Nd, W]
    in_wide = dense_of[wnode] >= 0
    dense[dense_of[wnode[in_wide]], widx[in_wide]] = wval[in_wide]
    if wide.size:
      keep = ~in_wide
      widx, wval, wnode = widx[keep], wval[keep], wnode[keep]
    word_ptr = _ptr(wnode, n + 2)
    terminal = np.zeros(n + 2, dtype=bool)
    terminal[term_nodes] = True
    return cls(vocab_size=v_size, n_nodes=n, n_eos=int(eos.size), n_values=len(trie.strings),
               n_chars=trie.n_chars,
               row_ptr=row_ptr, ids=t, next=d,
               terminal=terminal, word_ptr=word_ptr, word_idx=widx, word_val=wval,
               dense_of=dense_of, dense=dense, trie=dataclasses.replace(trie, strings=()),
               build_seconds=time.perf_counter() - t0)

  # --- queries ---------------------------------------------------------------------------------

  @property
  def prefix_sharing(self) -> float:
    """r = trie nodes / total characters (the paper's prefix-sharing ratio; root excluded)."""
    return (self.n_nodes - 1) / max(self.n_chars, 1)

  def step(self, node: int, token: int) -> int:
    """The node reached by ``token`` from ``node`` (``dead`` when it is illegal)."""
    hi = self._rp[node + 1]
    j = bisect.bisect_left(self._ids, token, self._rp[node], hi)
    if j < hi and self._ids[j] == token:
      return self._next[j]
    return self.dead

  def step_many(self, nodes: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Vectorized ``step``: int [F] nodes and tokens -> int64 [F] next nodes (dead if illegal).

    One ``searchsorted`` over the pairs' (node, token) keys, which the build leaves ascending.
    """
    nodes = np.asarray(nodes, dtype=np.int64)
    tokens = np.asarray(tokens, dtype=np.int64)
    keys = self._pair_keys()
    v = self.vocab_size
    ok = (tokens >= 0) & (tokens < v) & (nodes >= 0) & (nodes <= self.dead)
    q = np.where(ok, nodes * v + tokens, -1)
    if keys.size == 0:
      return np.full(q.shape, self.dead, dtype=np.int64)
    j = np.minimum(np.searchsorted(keys, q), keys.size - 1)
    found = ok & (keys[j] == q)
    return np.where(found, self.next[j], self.dead).astype(np.int64)

  def _pair_keys(self) -> np.ndarray:
    """int64 [E] ``node * V + token`` of every legal pair (built on first batched step)."""
    keys = getattr(self, "_keys", None)
    if keys is None:
      rows = np.repeat(np.arange(self.n_nodes + 2, dtype=np.int64), np.diff(self.row_ptr))
      keys = self._keys = rows * self.vocab_size + self.ids
    return keys

  def walk_bytes(self, data: bytes, node: int = 0) -> int:
    """The trie node after the bytes ``data`` from ``node`` (``dead`` if they leave the trie)."""
    if node >= self.n_nodes:
      return self.dead if data else node
    got = self.trie.walk(data, node)
    return self.dead if got < 0 else got

  def can_continue(self, node: int) -> bool:
    """Whether some non-EOS token is legal at ``node``."""
    if node >= self.n_nodes:
      return False
    return self.legal_count(node) > (self.n_eos if self.terminal[node] else 0)

  def legal_count(self, node: int) -> int:
    """Number of legal tokens at ``node`` (EOS included)."""
    return self._rp[node + 1] - self._rp[node]

  def legal_ids(self, node: int) -> np.ndarray:
    """int32 ascending legal token ids at ``node``."""
    return self.ids[self._rp[node]:self._rp[node + 1]]

  def legal_next(self, node: int) -> np.ndarray:
    """int32 node each legal token at ``node`` leads to (aligned with ``legal_ids``)."""
    return self.next[self._rp[node]:self._rp[node + 1]]

  def fill(self, node: int, out: np.ndarray) -> bool:
    """Writes the packed mask of ``node`` into ``out`` (int32 [W]); returns whether it is non-empty."""
    r = self._dense_of[node]
    if r >= 0:
      out[:] = self.dense[r]
      return True
    out.fill(0)
    lo, hi = self._wp[node], self._wp[node + 1]
    if hi - lo <= 4:
      # Deep nodes have a few words: scalar stores beat any numpy indexing call.
      wi, wv = self._wi, self._wv
      for j in range(lo, hi):
        out[wi[j]] = wv[j]
      return hi > lo
    out.put(self.word_idx[lo:hi], self.word_val[lo:hi])   # put: ~2x faster than fancy assign
    return True

  def write_row(self, node: int, out: np.ndarray, row: int) -> bool:
    """Writes the mask of ``node`` into ``out[row]`` (int32 [R, W]) assuming that row is zero.

    The lookahead clears all its rows with one call and then only writes non-zero words, which
    saves a W-word clear per position. Returns whether the mask is non-empty.
    """
    r = self._dense_of[node]
    if r >= 0:
      out[row] = self.dense[r]
      return True
    lo, hi = self._wp[node], self._wp[node + 1]
    if hi - lo <= 4:
      wi, wv = self._wi, self._wv
      for j in range(lo, hi):
        out[row, wi[j]] = wv[j]
      return hi > lo
    out[row].put(self.word_idx[lo:hi], self.word_val[lo:hi])
    return True

  def fill_many(self, nodes: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Batched fill: ``out[i] = mask(nodes[i])``.

    Args:
      nodes: int [B] node ids (sinks allowed).
      out: int32 [B, W] C-contiguous buffer.

    Returns:
      bool [B]: whether each mask is non-empty.
    """
    nodes = np.asarray(nodes, dtype=np.int64)
    if nodes.shape[0] < 8:   # the vectorized path has ~10 us of fixed cost: loop small batches
      return np.array([self.fill(n, out[i]) for i, n in enumerate(nodes.tolist())], dtype=bool)
    out.fill(0)
    d = self.dense_of[nodes]
    wide = d >= 0
    if wide.any():
      out[wide] = self.dense[d[wide]]
    rows, flat = _segments(self.word_ptr, nodes)
    out[rows, self.word_idx[flat]] = self.word_val[flat]
    return self.row_ptr[nodes + 1] > self.row_ptr[nodes]

  def memory_bytes(self) -> int:
    """Bytes of the per-constraint tables (transitions, words, dense rows, trie arrays)."""
    t = self.trie
    arrays = (self.row_ptr, self.ids, self.next, self.terminal, self.word_ptr, self.word_idx,
              self.word_val, self.dense_of, self.dense, t.parent, t.byte, t.depth, t.child_ptr)
    return int(sum(a.nbytes for a in arrays))


def _sort_pairs(starts, toks, dests, n, v_size):
  """Concatenates the per-round (start, token, dest) arrays sorted by (start, token).

  Each round's output is already sorted by start; one stable sort of packed int64 values
  ``(start * V + token) << 21 | dest`` (no argsort indirection) orders everything when the
  sizes fit 63 bits, else a stable argsort of the key.
  """
  s = np.concatenate(starts) if starts else np.zeros(0, np.int64)
  t = np.concatenate(toks) if toks else np.zeros(0, np.int64)
  d = np.concatenate(dests) if dests else np.zeros(0, np.int64)
  key = s * v_size + t
  if (n + 2) < (1 << 21) and (n + 2) * v_size < (1 << 42):
    packed = np.sort((key << 21) | d, kind="stable")
    d = packed & ((1 << 21) - 1)
    key = packed >> 21
    s = key // v_size
    t = key - s * v_size
  else:
    order = np.argsort(key, kind="stable")
    s, t, d = s[order], t[order], d[order]
  return s, t.astype(np.int32), d.astype(np.int32)


def _ptr(sorted_rows: np.ndarray, n_rows: int) -> np.ndarray:
  """CSR pointers int64 [n_rows + 1] of a sorted row-id array (counting, no search)."""
  ptr = np.zeros(n_rows + 1, dtype=np.int64)
  np.cumsum(np.bincount(sorted_rows, minlength=n_rows), out=ptr[1:])
  return ptr


def _segments(ptr: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(row, flat index) for every element of the CSR segments of ``nodes``."""
  start = ptr[nodes]
  cnt = ptr[nodes + 1] - start
  rows = np.repeat(np.arange(nodes.shape[0], dtype=np.int64), cnt)
  first = np.cumsum(cnt) - cnt
  flat = np.arange(rows.shape[0], dtype=np.int64) - np.repeat(first - start, cnt)
  return rows, flat
