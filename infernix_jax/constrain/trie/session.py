"""TrieSession: the `MatcherSession` transactions over a trie automaton (state = one node id).

Axis letters (docs/CONTRACTS.md): N rows of a buffer, V vocabulary, W mask words. The trie
implements only the `Matcher` primitives (`TrieMatcher`); its rollback is a stack of node
ids: accepting a token pushes the node it leads to, rolling back pops.
"""

from __future__ import annotations

import numpy as np

from infernix_jax.constrain.session import MatcherSession, PreviewResult
from infernix_jax.constrain.trie._automaton import TrieAutomaton

__all__ = ["PreviewResult", "TrieMatcher", "TrieSession"]


class TrieMatcher:
  """The `Matcher` primitives over a `TrieAutomaton` (backends/base.py).

  The values are UTF-8 text, so every trie path is strict UTF-8 (no filter needed); a token
  is accepted exactly when its mask bit is set; emptiness and "can continue" are a count of
  the node's edges (no mask is built for them).
  """

  strict_utf8 = True
  exact_accept = True

  def __init__(self, automaton: TrieAutomaton):
    self.automaton = automaton
    self.stack = [0]  # path of node ids; top = current state (preview and lookahead included)

  @property
  def node(self) -> int:
    return self.stack[-1]

  def fill(self, out: np.ndarray, row: int) -> None:
    """The node's mask into ``out[row]`` (int32 [N, W]); RuntimeError after EOS."""
    node = self.stack[-1]
    if node >= self.automaton.n_nodes:
      raise RuntimeError("the trie session accepted EOS: no token is legal")
    self.automaton.fill(node, out[row])

  def accept(self, token: int) -> bool:
    a = self.automaton
    node = self.stack[-1]
    nxt = a.step(node, int(token)) if node < a.n_nodes else a.dead
    if nxt == a.dead:
      return False
    self.stack.append(nxt)
    return True

  def rollback(self, n: int) -> None:
    if n:
      del self.stack[-n:]

  def is_terminated(self) -> bool:
    return self.stack[-1] == self.automaton.end

  def is_completed(self) -> bool:
    n = self.stack[-1]
    return n == self.automaton.end or bool(self.automaton.terminal[n])

  def has_legal(self) -> bool:
    n = self.stack[-1]
    return n < self.automaton.n_nodes and self.automaton.legal_count(n) > 0

  def can_continue(self) -> bool:
    return self.automaton.can_continue(self.stack[-1])

  def forced_bytes(self) -> bytes | None:
    """The bytes of the chain of single-child, non-final trie nodes from the current node
    (every legal continuation starts with them); None when they end inside a character."""
    a = self.automaton
    trie = a.trie
    forced = bytearray()
    m = self.stack[-1]
    while not a.terminal[m] and trie.child_ptr[m + 1] - trie.child_ptr[m] == 1:
      m = int(trie.child_ptr[m])
      forced.append(int(trie.byte[m]))
    try:
      forced.decode("utf-8")
    except UnicodeDecodeError:
      return None
    return bytes(forced)

  def accept_prefix(self, data: bytes) -> int:
    """Follows ``data`` byte by byte; the count of bytes taken (the first refused one)."""
    a = self.automaton
    node = self.stack[-1]
    for i in range(len(data)):
      nxt = a.walk_bytes(data[i:i + 1], node)
      if nxt == a.dead:
        return i
      node = nxt
    self.stack[-1] = node  # the prefix is not a token: it is the start state, not a push
    return len(data)


class TrieSession(MatcherSession):
  """One matcher over a compiled trie automaton (never shared between requests).

  Attributes:
    automaton: the immutable tables shared by every session of the constraint (the trie
      backend ``exports_automaton``: the runtime may run it on device from ``node``).
  """

  backend = "trie"  # the registry name of the backend that opens it

  def __init__(self, automaton: TrieAutomaton, prefix: bytes | str = b"", compiled=None):
    """Starts at the root, then follows the continuation ``prefix`` byte by byte.

    Args:
      automaton: the compiled tables.
      prefix: bytes (or str, UTF-8 encoded) already emitted of the value.
      compiled: the compiled constraint this session belongs to (a CompiledConstraint, or
        the CompiledTrie of `compile_choice`; its ``vocab`` is read).

    Raises:
      PrefixError: ``prefix`` is not a prefix of any value (location: the first bad byte).
    """
    self.automaton = automaton
    super().__init__(TrieMatcher(automaton), compiled, prefix)

  @property
  def node(self) -> int:
    """Current node id (trie node, ``automaton.end`` after EOS)."""
    return self.matcher.stack[-1]

  def automaton_tables(self):
    """(automaton, node): the tables a device automaton runs and this session's state."""
    return self.automaton, self.node

  def accepts(self, token: int) -> bool:
    """Whether ``token`` is legal now."""
    a = self.automaton
    return self.node < a.n_nodes and a.step(self.node, int(token)) != a.dead
