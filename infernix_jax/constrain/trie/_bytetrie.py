"""Vectorized construction of a byte trie over a set of byte strings (numpy, no Python loop per byte).

Both tries of the backend use it: the per-vocabulary trie over token byte strings (the matching
index) and the per-constraint trie over the choice values.

Node ids are assigned level by level (breadth first); within a level, in the lexicographic order
of the prefixes. Hence the children of a node are contiguous and sorted by byte, and the parent
array is non-decreasing, so the child table is a CSR found by one ``searchsorted``.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class ByteTrie:
  """A byte trie; node 0 is the root (the empty prefix).

  Attributes (N nodes, U unique strings):
    parent: int32 [N], parent node (-1 for the root); non-decreasing over ids 1..N-1.
    byte: uint8 [N], byte on the edge into each node (0 for the root).
    depth: int32 [N], prefix length of each node.
    child_ptr: int64 [N + 1], children of node n are ids ``child_ptr[n]:child_ptr[n+1]``.
    strings: list[bytes] [U], the unique strings, sorted.
    terminal: int32 [U], node where each sorted unique string ends.
    n_chars: total bytes of the unique strings.
  """

  parent: np.ndarray
  byte: np.ndarray
  depth: np.ndarray
  child_ptr: np.ndarray
  strings: list
  terminal: np.ndarray
  n_chars: int

  @property
  def n_nodes(self) -> int:
    return int(self.parent.shape[0])

  def walk(self, data: bytes, node: int = 0) -> int:
    """Follows ``data`` from ``node``; returns the node reached or -1 when it leaves the trie."""
    for b in data:
      lo, hi = int(self.child_ptr[node]), int(self.child_ptr[node + 1])
      j = lo + int(np.searchsorted(self.byte[lo:hi], b))
      if j >= hi or self.byte[j] != b:
        return -1
      node = j
    return node


def build(strings, *, presorted: bool = False) -> ByteTrie:
  """Builds the trie of a collection of byte strings (duplicates are merged).

  Args:
    strings: iterable of ``bytes``.
    presorted: the strings are already sorted and distinct (skips dedupe and sort).

  Returns:
    The ByteTrie; ``terminal[i]`` is the node of ``strings_sorted[i]``.
  """
  uniq = list(strings) if presorted else sorted(set(strings))
  u = len(uniq)
  lens = np.fromiter(map(len, uniq), dtype=np.int64, count=u)
  n_chars = int(lens.sum())
  flat = np.frombuffer(b"".join(uniq), dtype=np.uint8)
  offs = np.zeros(u, dtype=np.int64)
  if u > 1:
    np.cumsum(lens[:-1], out=offs[1:])
  node_of = np.zeros(u, dtype=np.int64)     # current node of each string
  parents = [np.array([-1], dtype=np.int64)]
  bytes_ = [np.zeros(1, dtype=np.uint8)]
  depths = [np.zeros(1, dtype=np.int32)]
  next_id = 1
  alive = np.arange(u, dtype=np.int64)
  d = 0
  while True:
    alive = alive[lens[alive] > d]
    if alive.size == 0:
      break
    cur = node_of[alive]
    b = flat[offs[alive] + d]
    # Sorted strings make (node, byte) keys non-decreasing along `alive`: new nodes are
    # where the key changes (no sort needed).
    key = cur * 256 + b
    new = np.empty(key.shape[0], dtype=bool)
    new[0] = True
    np.not_equal(key[1:], key[:-1], out=new[1:])
    ids = next_id - 1 + np.cumsum(new)
    node_of[alive] = ids
    parents.append(cur[new])
    bytes_.append(b[new])
    n_new = int(ids[-1]) - next_id + 1
    depths.append(np.full(n_new, d + 1, dtype=np.int32))
    next_id += n_new
    d += 1
  parent = np.concatenate(parents).astype(np.int32)
  n = parent.shape[0]
  child_ptr = np.empty(n + 1, dtype=np.int64)
  child_ptr[:] = np.searchsorted(parent[1:], np.arange(n + 1), side="left") + 1
  child_ptr[0] = 1
  return ByteTrie(parent=parent, byte=np.concatenate(bytes_), depth=np.concatenate(depths),
                  child_ptr=child_ptr, strings=uniq, terminal=node_of.astype(np.int32),
                  n_chars=n_chars)


def expand_children(child_ptr: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """All (row, child) pairs of the given nodes, rows in order.

  Args:
    child_ptr: int64 [N + 1] CSR of a ByteTrie.
    nodes: int [F] node ids.

  Returns:
    (rows int64 [C], children int64 [C]): ``children[j]`` is a child of ``nodes[rows[j]]``.
  """
  start = child_ptr[nodes]
  cnt = child_ptr[nodes + 1] - start
  if bool((cnt == 1).all()):   # chains (most of a trie): one child each, no expansion
    return np.arange(nodes.shape[0], dtype=np.int64), start
  total = int(cnt.sum())
  rows = np.repeat(np.arange(nodes.shape[0], dtype=np.int64), cnt)
  if total == 0:
    return rows, np.zeros(0, dtype=np.int64)
  # children = start[row] + rank within the row
  first = np.cumsum(cnt) - cnt
  children = np.arange(total, dtype=np.int64) - np.repeat(first - start, cnt)
  return rows, children
