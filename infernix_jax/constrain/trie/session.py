"""TrieSession: the OutputSession contract over a trie automaton (state = one node id).

Same transactions as the XGrammar-backed sessions (DESIGN.md section 4, CONTRACTS.md):
lookahead (temporary, rolled back), preview (temporary until commit/discard), commit,
discard, continuation prefix. Rollback is a stack of node ids: accepting a token pushes the
node it leads to, rolling back pops.
"""

from __future__ import annotations

import numpy as np

from infernix_jax import mask_layout
from infernix_jax.constrain.errors import PrefixError
from infernix_jax.constrain.trie._automaton import TrieAutomaton
from infernix_jax.constrain.trie._result import PreviewResult


class TrieSession:
  """One matcher over a compiled trie automaton (never shared between requests).

  Attributes:
    automaton: the immutable tables shared by every session of the constraint.
  """

  def __init__(self, automaton: TrieAutomaton, prefix: bytes = b""):
    """Starts at the root, then follows the continuation ``prefix`` byte by byte.

    Raises:
      PrefixError: ``prefix`` is not a prefix of any value (location: the first bad byte).
    """
    self.automaton = automaton
    node = 0
    prefix = bytes(prefix)
    if prefix:
      for i in range(len(prefix)):
        nxt = automaton.walk_bytes(prefix[i:i + 1], node)
        if nxt == automaton.dead:
          raise PrefixError(f"continuation prefix {prefix[:i + 1]!r} is not the start of any "
                            "choice value", str(i))
        node = nxt
    self._stack = [node]          # committed path of node ids; top = current state
    self._mark: int | None = None  # stack depth at preview start (None: no preview open)
    self._in_lookahead = False

  # --- state -----------------------------------------------------------------------------------

  @property
  def node(self) -> int:
    """Current node id (trie node, ``automaton.end`` after EOS)."""
    return self._stack[-1]

  @property
  def terminated(self) -> bool:
    """EOS was accepted."""
    return self._stack[-1] == self.automaton.end

  @property
  def complete(self) -> bool:
    """The output may end now (a value is complete), or it already ended."""
    n = self._stack[-1]
    return n == self.automaton.end or bool(self.automaton.terminal[n])

  @property
  def can_continue(self) -> bool:
    """Some non-EOS token is legal (the output can grow)."""
    a = self.automaton
    n = self._stack[-1]
    if n >= a.n_nodes:
      return False
    return bool(a.trie.child_ptr[n + 1] > a.trie.child_ptr[n])

  # --- masks -----------------------------------------------------------------------------------

  def fill_mask(self, out: np.ndarray) -> bool:
    """Writes the current legal mask into ``out`` (int32 [W]); returns whether it is non-empty."""
    return self.automaton.fill(self._stack[-1], out)

  def accepts(self, token: int) -> bool:
    """Whether ``token`` is legal now."""
    return self.automaton.step(self._stack[-1], int(token)) != self.automaton.dead

  def lookahead(self, drafts, out: np.ndarray) -> np.ndarray:
    """Masks for each draft position; the session is unchanged afterwards.

    Args:
      drafts: sequence of K draft token ids.
      out: int32 [K + 1, W] buffer (C-contiguous).

    Returns:
      int8 [K + 1] states (READY / DEAD_END / UNREACHABLE). Unreachable rows are all zero.
    """
    if self._mark is not None:
      raise RuntimeError("lookahead while a preview is open: commit() or discard() first")
    drafts = [int(t) for t in drafts]
    k = len(drafts)
    if out.shape[0] < k + 1:
      raise ValueError(f"out has {out.shape[0]} rows, lookahead of {k} drafts needs {k + 1}")
    states = np.full(k + 1, mask_layout.UNREACHABLE, dtype=np.int8)
    a = self.automaton
    node = self._stack[-1]
    i = 0
    while True:
      if not a.fill(node, out[i]):
        states[i] = mask_layout.DEAD_END
        break
      states[i] = mask_layout.READY
      if i == k:
        break
      node = a.step(node, drafts[i])
      if node >= a.n_nodes:      # illegal draft (dead) or EOS accepted (end): rest unreachable
        break
      i += 1
    out[i + 1:k + 1] = 0
    return states

  # --- transactions ----------------------------------------------------------------------------

  def preview(self, tokens) -> PreviewResult:
    """Accepts the produced tokens temporarily (until commit or discard).

    Stops at the first illegal token (not accepted) or right after an accepted EOS.

    Returns:
      PreviewResult(accepted, complete, terminated, dead_end).
    """
    if self._mark is not None:
      raise RuntimeError("preview already open: commit() or discard() first")
    self._mark = len(self._stack)
    a = self.automaton
    accepted = 0
    for t in tokens:
      nxt = a.step(self._stack[-1], int(t))
      if nxt == a.dead:
        break
      self._stack.append(nxt)
      accepted += 1
      if nxt == a.end:
        break
    n = self._stack[-1]
    return PreviewResult(accepted=accepted, complete=self.complete, terminated=n == a.end,
                         dead_end=n < a.n_nodes and a.legal_count(n) == 0)

  def commit(self) -> None:
    """Makes the open preview permanent (allocates and checks nothing)."""
    self._mark = None

  def discard(self) -> None:
    """Returns to the state before the open preview."""
    if self._mark is not None:
      del self._stack[self._mark:]
      self._mark = None

  def rollback(self, n: int) -> None:
    """Pops the last ``n`` committed tokens."""
    if self._mark is not None:
      raise RuntimeError("rollback while a preview is open")
    if not 0 <= n < len(self._stack):
      raise ValueError(f"cannot roll back {n} tokens, {len(self._stack) - 1} were accepted")
    if n:
      del self._stack[-n:]

  def forced_tokens(self, max_n: int) -> list[int]:
    """Tokens the constraint forces from the current state (jump-forward drafts).

    A token is forced where it is the only legal token and is not EOS; follows at most
    ``max_n`` of them without changing the session.
    """
    a = self.automaton
    out: list[int] = []
    node = self._stack[-1]
    while len(out) < max_n and node < a.n_nodes and a.legal_count(node) == 1:
      tok = int(a.legal_ids(node)[0])
      nxt = a.step(node, tok)
      if nxt >= a.n_nodes:
        break
      out.append(tok)
      node = nxt
    return out
