"""Frequency-counting suffix trie over token sequences and best-first speculation trees (host).

SuffixDecoding (Oliaro et al., "SuffixDecoding: Extreme Speculative Decoding for Emerging AI
Applications", arXiv 2411.04975) drafts from a suffix tree over earlier outputs: it matches
the end of the current context in the tree, reads the empirical distribution of what followed
that match, and grows a speculation tree best first, scoring each node by the product of
conditional frequencies along its path (the expected number of its tokens that verification
accepts when the data follow the empirical model). `SuffixIndex` is that tree, cut at a depth
and capped in size; it holds no device state and imports no jax.
"""

from __future__ import annotations

import dataclasses
import heapq
import threading
from typing import Hashable, Sequence

_ROOT = 0


@dataclasses.dataclass(frozen=True)
class Speculation:
  """A speculation tree hanging off the context's last token.

  Attributes:
    tokens: the draft token of each node, parents before children.
    parents: each node's parent, -1 for a child of the root (the context's last token), else
      the index of an earlier node.
    scores: each node's score: the product of the empirical conditional probabilities along
      its path from the root.
    match_len: how many context tokens the matched suffix spans (0: no match, empty tree).
    score: the sum of the node scores, the tree's expected accepted tokens under the
      empirical model.
  """

  tokens: list[int]
  parents: list[int]
  scores: list[float]
  match_len: int
  score: float

  def __len__(self) -> int:
    return len(self.tokens)


@dataclasses.dataclass
class _Seq:
  """One held sequence: its tokens from `start` on are counted in the trie."""

  tokens: list[int]
  start: int = 0
  # Nodes of the suffixes of length 1 .. max_depth - 1 that end at the last token, shortest
  # first: the parents of the nodes the next token creates or counts.
  active: list[int] = dataclasses.field(default_factory=list)


class SuffixIndex:
  """Counts every substring of length <= max_depth of the sequences it holds (a suffix trie
  cut at max_depth), each node carrying how many times its substring occurs.

  Appending a token to a sequence counts the (at most max_depth) substrings that end at it:
  O(max_depth) node updates. Sequences are independent: extending several of them
  interleaved, token by token, gives the same counts as inserting them one after another.

  Size cap: after each appended token, while more than `max_nodes` nodes are in use, whole
  sequences are evicted oldest first (in the order they were first extended), never the one
  being extended. If that one alone is still too large, its own oldest positions are
  forgotten (the substrings starting there), keeping at least its last max_depth - 1 tokens;
  `max_nodes >= max_depth * (max_depth + 1) // 2` makes the cap hard. An evicted id is no
  longer held; extending it again starts a fresh sequence, and removing it does nothing.

  Threads: one lock serialises every call (extend, remove, speculate, the sizes), so lanes on
  different threads may share an index.
  """

  def __init__(self, max_depth: int = 32, max_nodes: int = 200_000):
    """Builds an empty index.

    Args:
      max_depth: the longest substring counted; a matched suffix spans at most
        max_depth - 1 tokens so that it can have a continuation.
      max_nodes: the most trie nodes (distinct substrings) held; see the class docstring.
    """
    if max_depth < 2:
      raise ValueError(f"{max_depth=} must be at least 2 (a matched token and one continuation)")
    if max_nodes < max_depth * (max_depth + 1) // 2:
      raise ValueError(f"{max_nodes=} must be at least max_depth * (max_depth + 1) // 2 = "
                       f"{max_depth * (max_depth + 1) // 2}, the nodes of one max_depth window; "
                       "raise max_nodes or lower max_depth")
    self.max_depth, self.max_nodes = max_depth, max_nodes
    # Node i: children (token -> node), count (occurrences of its substring) and cont (the
    # sum of its children's counts: occurrences that continue; count minus those at a
    # sequence's end or at max_depth). Freed ids are reused through _free.
    self._children: list[dict[int, int] | None] = [{}]
    self._count: list[int] = [0]
    self._cont: list[int] = [0]
    self._free: list[int] = []
    self._seqs: dict[Hashable, _Seq] = {}  # insertion order = eviction order
    self._lock = threading.Lock()

  def __contains__(self, seq_id: Hashable) -> bool:
    with self._lock:
      return seq_id in self._seqs

  def __len__(self) -> int:
    """The number of sequences held."""
    with self._lock:
      return len(self._seqs)

  @property
  def nodes(self) -> int:
    """Trie nodes in use (distinct substrings held; the root not counted)."""
    with self._lock:
      return self._nodes()

  def count(self, substring: Sequence[int]) -> int:
    """Occurrences of `substring` (1 to max_depth tokens) in the held sequences."""
    with self._lock:
      node = self._find([int(t) for t in substring])
      return 0 if node is None or node == _ROOT else self._count[node]

  def extend(self, seq_id: Hashable, tokens: Sequence[int]) -> None:
    """Appends tokens to sequence `seq_id`; an id not held starts a new sequence.

    Args:
      seq_id: any hashable id (e.g. a request id).
      tokens: the tokens to append, in order.
    """
    tokens = [int(t) for t in tokens]
    with self._lock:
      seq = self._seqs.get(seq_id)
      if seq is None:
        seq = self._seqs[seq_id] = _Seq(tokens=[])
      for t in tokens:
        self._append(seq, t)
        if self._nodes() > self.max_nodes:
          self._shrink(seq_id, seq)

  def remove(self, seq_id: Hashable) -> None:
    """Forgets sequence `seq_id` (its counts, and nodes left empty); unknown ids are ignored."""
    with self._lock:
      seq = self._seqs.pop(seq_id, None)
      if seq is not None:
        for i in range(seq.start, len(seq.tokens)):
          self._forget(seq.tokens[i:i + self.max_depth])

  def speculate(self, context: Sequence[int], budget: int, *, max_depth: int | None = None,
                min_score: float = 0.0, max_match: int | None = None) -> Speculation:
    """A best-first speculation tree continuing `context`.

    The longest suffix of `context` (at most max_depth - 1 tokens of the index, and at most
    `max_match`) that occurs with at least one continuation is matched; its continuations
    are the candidates. A candidate's score is its parent's (1 at the root) times the
    fraction of the parent's continuing occurrences that continue with it. The best
    candidate joins the tree and its children become candidates, until the tree has `budget`
    nodes or no candidate scores above `min_score`. Ties go to the smaller token, then the
    earlier parent, so equal indexes give equal trees. A match of n tokens leaves at most
    max_depth - n tree levels: `max_match` trades matched context for tree depth.

    Args:
      context: the tokens so far (prompt + committed output + any hypothetical tokens).
      budget: the most tree nodes.
      max_depth: the deepest tree level (the root's children are level 1); None: no cap
        beyond the index's depth.
      min_score: nodes must score above it.
      max_match: the longest suffix to match; None: max_depth - 1 of the index.

    Returns:
      The tree, parents first; empty (match_len 0) when no suffix matches.
    """
    limit = self.max_depth - 1 if max_match is None else min(max_match, self.max_depth - 1)
    suffix = [int(t) for t in context[max(len(context) - limit, 0):]] if limit > 0 else []
    with self._lock:
      match_len, node = self._match(suffix)
      tokens: list[int] = []
      parents: list[int] = []
      scores: list[float] = []
      if match_len == 0:
        return Speculation(tokens, parents, scores, 0, 0.0)
      depth_cap = self.max_depth if max_depth is None else max_depth
      heap: list[tuple[float, int, int, int, int]] = []
      self._push(heap, node, -1, 1.0, 0, depth_cap, min_score)
      while heap and len(tokens) < budget:
        neg, tok, parent, child, depth = heapq.heappop(heap)
        tokens.append(tok)
        parents.append(parent)
        scores.append(-neg)
        self._push(heap, child, len(tokens) - 1, -neg, depth, depth_cap, min_score)
    return Speculation(tokens, parents, scores, match_len, float(sum(scores)))

  # -- internals (callers hold the lock) --------------------------------------------------------

  def _nodes(self) -> int:
    return len(self._children) - 1 - len(self._free)

  def _find(self, path: list[int]) -> int | None:
    """The node of `path` (the root for an empty one), None if it does not occur."""
    node = _ROOT
    for t in path:
      node = self._children[node].get(t)
      if node is None:
        return None
    return node

  def _match(self, suffix: list[int]) -> tuple[int, int]:
    """The longest tail of `suffix` that occurs with a continuation: (its length, node).

    "Occurs with a continuation" holds for every shorter tail once it holds for one (if
    s + c is counted, so is s[1:] + c), so a binary search over the length finds it.
    """
    lo, hi, best = 0, len(suffix), _ROOT
    while lo < hi:
      mid = (lo + hi + 1) // 2
      node = self._find(suffix[len(suffix) - mid:])
      if node is not None and self._cont[node] > 0:
        lo, best = mid, node
      else:
        hi = mid - 1
    return lo, best

  def _push(self, heap, node: int, index: int, score: float, depth: int, depth_cap: int,
            min_score: float) -> None:
    """Adds the children of `node` (tree node `index`, at `depth`) as candidates."""
    if depth >= depth_cap:
      return
    cont = self._cont[node]
    for tok, child in self._children[node].items():
      s = score * self._count[child] / cont
      if s > min_score:
        heapq.heappush(heap, (-s, tok, index, child, depth + 1))

  def _new_node(self) -> int:
    if self._free:
      node = self._free.pop()
      self._children[node], self._count[node], self._cont[node] = {}, 0, 0
      return node
    self._children.append({})
    self._count.append(0)
    self._cont.append(0)
    return len(self._children) - 1

  def _append(self, seq: _Seq, t: int) -> None:
    """Counts the substrings ending at the new last token `t` of `seq`."""
    active = []
    for parent in [_ROOT] + seq.active:
      children = self._children[parent]
      child = children.get(t)
      if child is None:
        child = children[t] = self._new_node()
      self._count[child] += 1
      self._cont[parent] += 1
      active.append(child)
    # The longest one is max_depth long once enough tokens arrived: it never gets a child.
    seq.active = active[:self.max_depth - 1]
    seq.tokens.append(t)

  def _forget(self, path: list[int]) -> None:
    """Uncounts one occurrence of each prefix of `path`, freeing nodes left at zero."""
    node, trail = _ROOT, []
    for t in path:
      child = self._children[node][t]
      self._count[child] -= 1
      self._cont[node] -= 1
      trail.append((node, t, child))
      node = child
    for k, (parent, t, child) in enumerate(trail):
      if self._count[child] == 0:
        # A child never counts more than its parent, so every deeper node on the path is at
        # zero too (and nodes are freed the moment they reach it: no others hang below).
        del self._children[parent][t]
        for _, _, dead in trail[k:]:
          self._children[dead] = None
          self._free.append(dead)
        return

  def _shrink(self, keep: Hashable, seq: _Seq) -> None:
    """Evicts sequences oldest first, then trims `seq`'s own front, until the cap holds."""
    for seq_id in [s for s in self._seqs if s != keep]:
      if self._nodes() <= self.max_nodes:
        return
      old = self._seqs.pop(seq_id)
      for i in range(old.start, len(old.tokens)):
        self._forget(old.tokens[i:i + self.max_depth])
    # Only occurrences that start before every active suffix are dropped, so each active node
    # keeps its own occurrence and stays alive.
    while self._nodes() > self.max_nodes and seq.start + self.max_depth <= len(seq.tokens):
      self._forget(seq.tokens[seq.start:seq.start + self.max_depth])
      seq.start += 1
    if seq.start > 1024 and 2 * seq.start > len(seq.tokens):  # drop the forgotten tokens
      del seq.tokens[:seq.start]
      seq.start = 0
