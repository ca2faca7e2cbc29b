"""Per-vocabulary multi-pattern index: a byte trie over every ordinary token, built once and cached.

The trie backend asks one question of the vocabulary, many times at once: "which tokens spell
this byte path?". The index answers it for a whole frontier of (vocabulary-trie node, byte)
pairs with a few vectorized numpy passes: shallow nodes use a dense transition table, deeper
ones an open-addressing hash of the trie's edges. It plays the role of the paper's Aho-Corasick
automaton (section 4.2): it depends only on the tokenizer and is shared by every choice compiled
against it (``get_index`` caches it by vocabulary identity).
"""

from __future__ import annotations

import threading
import time

import numpy as np

from infernix_jax.constrain.trie import _bytetrie

_HASH_MULT = np.uint64(0x9E3779B97F4A7C15)
# Vocabulary-trie nodes (breadth-first ids) that get a dense [256] transition row: covers the
# root and depth-1 nodes of every real vocabulary, where most frontier lookups land.
_DENSE_NODES = 4096


class VocabIndex:
  """Byte trie over the token strings of a vocabulary with batched transition lookups.

  Control tokens, EOS tokens and tokens with no bytes are left out: they never spell text
  inside a value.

  Attributes:
    vocab_size: V, the tokenizer's vocabulary size.
    n_nodes: M, nodes of the vocabulary trie.
    term_ptr: int64 [M + 1], tokens ending at node m are ``term_ids[term_ptr[m]:term_ptr[m+1]]``.
    term_ids: int32 [*], token ids grouped by trie node, ascending within a node.
    has_children: bool [M], whether a longer token continues from node m.
    build_seconds: wall time spent building the index.
    build_cpu_seconds: CPU time of this process spent building it.
  """

  def __init__(self, token_bytes, excluded_ids=()):
    """Builds the index.

    Args:
      token_bytes: sequence of ``bytes`` [V], the raw bytes of each token id.
      excluded_ids: ids never legal inside a value (control and EOS tokens).
    """
    t0, c0 = time.perf_counter(), time.process_time()
    self.vocab_size = len(token_bytes)
    excluded = set(int(i) for i in excluded_ids)
    ids = [i for i, tb in enumerate(token_bytes) if tb and i not in excluded]
    strings = [bytes(token_bytes[i]) for i in ids]
    trie = _bytetrie.build(strings)
    pos = {s: k for k, s in enumerate(trie.strings)}
    tok_node = trie.terminal[np.fromiter((pos[s] for s in strings), dtype=np.int64,
                                         count=len(strings))].astype(np.int64)
    tok_ids = np.asarray(ids, dtype=np.int64)
    order = np.argsort(tok_node * self.vocab_size + tok_ids, kind="stable")
    m = trie.n_nodes
    self.n_nodes = m
    self.max_token_len = int(trie.depth.max()) if m > 1 else 0
    self.term_ids = tok_ids[order].astype(np.int32)
    self.term_ptr = np.searchsorted(tok_node[order], np.arange(m + 1)).astype(np.int64)
    self.has_children = np.diff(trie.child_ptr) > 0
    term_cnt = np.diff(self.term_ptr)
    # Vocabularies whose ids all have distinct bytes (the usual case) take a gather fast path.
    self._multi_term = bool((term_cnt > 1).any())
    self._term_first = np.where(term_cnt > 0, self.term_ids[np.minimum(
        self.term_ptr[:-1], max(self.term_ids.size - 1, 0))] if self.term_ids.size else -1,
                                -1).astype(np.int32)
    self._build_tables(trie)
    self.build_seconds = time.perf_counter() - t0
    self.build_cpu_seconds = time.process_time() - c0

  def _build_tables(self, trie) -> None:
    m = trie.n_nodes
    nd = min(m, _DENSE_NODES)
    dense = np.full((nd, 256), -1, dtype=np.int32)   # [Nd, 256] child or -1
    child = np.arange(1, m, dtype=np.int64)
    par = trie.parent[1:].astype(np.int64)
    shallow = par < nd
    dense[par[shallow], trie.byte[1:][shallow]] = child[shallow]
    self._dense = dense
    self._n_dense = nd
    keys = par[~shallow] * 256 + trie.byte[1:][~shallow]
    vals = child[~shallow].astype(np.int32)
    bits = max(4, int(np.ceil(np.log2(max(2 * keys.shape[0], 1)))) + 1)   # load <= 0.25
    size = 1 << bits
    self._shift = np.uint64(64 - bits)
    self._hmask = size - 1
    tk = np.full(size, -1, dtype=np.int64)
    tv = np.full(size, -1, dtype=np.int32)
    slot = self._hash(keys)
    pending = np.arange(keys.shape[0])
    while pending.size:
      s = slot[pending]
      free = tk[s] < 0
      cand, cs = pending[free], s[free]
      _, first = np.unique(cs, return_index=True)
      win = cand[first]
      tk[cs[first]] = keys[win]
      tv[cs[first]] = vals[win]
      placed = np.zeros(keys.shape[0], dtype=bool)
      placed[win] = True
      pending = pending[~placed[pending]]
      slot[pending] = (slot[pending] + 1) & self._hmask
    self._tk, self._tv = tk, tv

  def _hash(self, keys: np.ndarray) -> np.ndarray:
    return ((keys.astype(np.uint64) * _HASH_MULT) >> self._shift).astype(np.int64)

  def step(self, nodes: np.ndarray, bytes_: np.ndarray) -> np.ndarray:
    """Batched transition of the vocabulary trie.

    Args:
      nodes: int [F] vocabulary-trie nodes.
      bytes_: uint8 or int [F] bytes to follow.

    Returns:
      int64 [F]: the child node, or -1 where no token continues with that byte.
    """
    nodes = np.asarray(nodes, dtype=np.int64)
    bytes_ = np.asarray(bytes_, dtype=np.int64)
    out = np.full(nodes.shape[0], -1, dtype=np.int64)
    shallow = nodes < self._n_dense
    if shallow.all():
      return self._dense[nodes, bytes_].astype(np.int64)
    out[shallow] = self._dense[nodes[shallow], bytes_[shallow]]
    deep = np.flatnonzero(~shallow)
    keys = nodes[deep] * 256 + bytes_[deep]
    slot = self._hash(keys)
    while deep.size:
      k = self._tk[slot]
      hit = k == keys
      out[deep[hit]] = self._tv[slot[hit]]
      more = ~hit & (k >= 0)
      deep, keys, slot = deep[more], keys[more], (slot[more] + 1) & self._hmask
    return out

  def tokens_at(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tokens spelled exactly by the given vocabulary-trie nodes.

    Args:
      nodes: int [F].

    Returns:
      (rows int64 [C], ids int32 [C]): token ``ids[j]`` ends at ``nodes[rows[j]]``.
    """
    if not self._multi_term:   # every node spells at most one token: a single gather
      tid = self._term_first[nodes]
      rows = np.flatnonzero(tid >= 0)
      return rows, tid[rows]
    start = self.term_ptr[nodes]
    cnt = self.term_ptr[nodes + 1] - start
    rows = np.repeat(np.arange(nodes.shape[0], dtype=np.int64), cnt)
    first = np.cumsum(cnt) - cnt
    flat = np.arange(rows.shape[0], dtype=np.int64) - np.repeat(first - start, cnt)
    return rows, self.term_ids[flat]

  def memory_bytes(self) -> int:
    """Bytes held by the index tables."""
    return int(sum(a.nbytes for a in (self.term_ids, self.term_ptr, self.has_children,
                                      self._dense, self._tk, self._tv)))


_CACHE: dict = {}
_LOCK = threading.Lock()


def get_index(vocab) -> VocabIndex:
  """The cached index of a vocabulary (built on first use, keyed by ``vocab.identity``).

  Args:
    vocab: a ``constrain.Vocabulary`` (``token_bytes``, ``control_ids``, ``eos_ids``,
      ``identity``).
  """
  key = vocab.identity
  with _LOCK:
    idx = _CACHE.get(key)
    if idx is None:
      # Only ordinary tokens spell text: control, EOS and unused ids are left out.
      excluded = np.flatnonzero(np.asarray(vocab.token_class) != 0)
      idx = VocabIndex(vocab.token_bytes, excluded.tolist())
      _CACHE[key] = idx
    return idx


def is_cached(vocab) -> bool:
  """Whether the index of ``vocab`` is built already (the next compile is warm)."""
  return vocab.identity in _CACHE


def clear_cache() -> None:
  """Drops every cached index (the next compile rebuilds it: a cold compile)."""
  with _LOCK:
    _CACHE.clear()
