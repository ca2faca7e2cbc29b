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
from infernix_jax.constrain.session import PreviewResult


class TrieSession:
  """One matcher over a compiled trie automaton (never shared between requests).

  Attributes:
    automaton: the immutable tables shared by every session of the constraint.
  """

  backend = "trie"  # the registry name of the backend that opens it

  def __init__(self, automaton: TrieAutomaton, prefix: bytes | str = b"", compiled=None):
    """Starts at the root, then follows the continuation ``prefix`` byte by byte.

    Args:
      automaton: the compiled tables.
      prefix: bytes (or str, UTF-8 encoded) already emitted of the value.
      compiled: the compiled constraint this session belongs to (a CompiledConstraint, or
        the CompiledTrie of `compile_choice`; kept for reference, its ``vocab`` read).

    Raises:
      PrefixError: ``prefix`` is not a prefix of any value (location: the first bad byte).
    """
    self.automaton = automaton
    self.compiled = compiled
    self.vocab = getattr(compiled, "vocab", None)
    if isinstance(prefix, str):
      prefix = prefix.encode("utf-8")
    self.prefix = bytes(prefix)
    node = 0
    for i in range(len(self.prefix)):
      nxt = automaton.walk_bytes(self.prefix[i:i + 1], node)
      if nxt == automaton.dead:
        raise PrefixError(f"the continuation prefix cannot start an output of this constraint: "
                          f"byte {i} ({self.prefix[i:i + 8]!r}...) is not allowed there", str(i))
      node = nxt
    self._stack = [node]           # path of node ids; top = current state
    self._mark: int | None = None  # stack depth when the open preview started
    self.tokens_committed = 0

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
  def previewing(self) -> bool:
    """An uncommitted preview exists (lookahead is refused until commit or discard)."""
    return self._mark is not None

  @property
  def can_continue(self) -> bool:
    """Some non-EOS token is legal (the output can grow)."""
    return self.automaton.can_continue(self._stack[-1])

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
      raise RuntimeError("lookahead while a preview is uncommitted: commit() or discard() first")
    drafts = np.asarray(drafts).reshape(-1).tolist()
    k = len(drafts)
    a = self.automaton
    if (not isinstance(out, np.ndarray) or out.dtype != np.int32 or out.ndim != 2
        or out.shape[0] < k + 1 or out.shape[1] != a.mask_words or not out.flags.c_contiguous):
      raise ValueError(f"out must be a C-contiguous int32 array [K+1={k + 1}, W={a.mask_words}]")
    states = np.full(k + 1, mask_layout.UNREACHABLE, dtype=np.int8)
    node = self._stack[-1]
    out[:k + 1].fill(0)            # one clear for every position; then only non-zero words
    if node == a.end:              # EOS already accepted: nothing is reachable
      return states
    i = 0
    while True:
      if not a.write_row(node, out, i):
        states[i] = mask_layout.DEAD_END
        break
      states[i] = mask_layout.READY
      if i == k:
        break
      node = a.step(node, drafts[i])
      if node >= a.n_nodes:      # illegal draft (dead) or EOS accepted (end): rest unreachable
        break
      i += 1
    return states

  # --- transactions ----------------------------------------------------------------------------

  def preview(self, tokens) -> PreviewResult:
    """Accepts the produced tokens temporarily (until commit or discard).

    Stops at the first illegal token (not accepted) or right after an accepted EOS.

    Returns:
      PreviewResult(accepted, complete, terminated, dead_end).
    """
    if self._mark is not None:
      raise RuntimeError("preview while another preview is uncommitted")
    self._mark = len(self._stack)
    a = self.automaton
    for t in np.asarray(tokens).reshape(-1).tolist():
      cur = self._stack[-1]
      if cur == a.end:
        break
      nxt = a.step(cur, t)
      if nxt == a.dead:
        break
      self._stack.append(nxt)
    n = self._stack[-1]
    return PreviewResult(accepted=len(self._stack) - self._mark, complete=self.complete,
                         terminated=n == a.end, dead_end=n < a.n_nodes and a.legal_count(n) == 0)

  def commit(self) -> None:
    """Makes the open preview permanent (allocates and checks nothing)."""
    if self._mark is not None:
      self.tokens_committed += len(self._stack) - self._mark
      self._mark = None

  def discard(self) -> None:
    """Returns to the state before the open preview."""
    if self._mark is not None:
      del self._stack[self._mark:]
      self._mark = None

  def accept(self, tokens) -> PreviewResult:
    """preview + commit in one step (forced control, tests)."""
    r = self.preview(tokens)
    self.commit()
    return r

  def rollback(self, n: int) -> None:
    """Pops the last ``n`` committed tokens (the node stack makes this O(n))."""
    if self._mark is not None:
      raise RuntimeError("rollback while a preview is uncommitted")
    if not 0 <= n <= self.tokens_committed:
      raise ValueError(f"cannot roll back {n} tokens, {self.tokens_committed} were committed")
    if n:
      del self._stack[-n:]
      self.tokens_committed -= n

  def forced_tokens(self, max_n: int) -> list[int]:
    """Tokens the constraint forces next, for jump-forward drafting (may be ``[]``).

    Same method as the XGrammar-backed session: the forced bytes are the chain of
    single-child, non-final trie nodes from the current state (every legal continuation
    starts with them); they are tokenized greedily by the longest legal token lying inside
    them. When the forced bytes are not valid UTF-8 (they end inside a character), the
    fallback is a single-legal-token walk, as there. Never proposes EOS. No side effect.
    """
    a = self.automaton
    node = self._stack[-1]
    if max_n <= 0 or self._mark is not None or node >= a.n_nodes:
      return []
    trie = a.trie
    forced = bytearray()
    m = node
    while not a.terminal[m] and trie.child_ptr[m + 1] - trie.child_ptr[m] == 1:
      m = int(trie.child_ptr[m])
      forced.append(int(trie.byte[m]))
    out: list[int] = []
    try:
      forced.decode("utf-8")
    except UnicodeDecodeError:
      while len(out) < max_n and a.legal_count(node) == 1:
        nxt = int(a.legal_next(node)[0])
        if nxt >= a.n_nodes:          # the only legal token is EOS
          break
        out.append(int(a.legal_ids(node)[0]))
        node = nxt
      return out
    depth_end = int(trie.depth[node]) + len(forced)
    while int(trie.depth[node]) < depth_end and len(out) < max_n:
      best, best_len, best_next = -1, 0, -1
      for tok, nxt in zip(a.legal_ids(node).tolist(), a.legal_next(node).tolist()):
        if nxt < a.n_nodes:
          ln = int(trie.depth[nxt]) - int(trie.depth[node])
          if best_len < ln and trie.depth[nxt] <= depth_end:
            best, best_len, best_next = tok, ln, nxt
      if best < 0:
        break
      out.append(best)
      node = best_next
    return out
