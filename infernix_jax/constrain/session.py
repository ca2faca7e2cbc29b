"""OutputSession: one request's matcher with lookahead, preview/commit/discard and jump-forward.

Transactions (DESIGN.md section 4):

  ===============  ====================================  =================================
  operation        temporary state                       becomes committed
  ===============  ====================================  =================================
  lookahead        accepts drafts, rolls back at the end  never
  preview(tokens)  accepts the produced prefix            on commit(); discard() undoes it
  ===============  ====================================  =================================

Preview and lookahead exclude each other; everything that can fail happens in preview, and
commit allocates and checks nothing. Flags kept apart: ``can_continue`` (a non-EOS token is
legal), ``complete`` (may end now), ``terminated`` (EOS accepted).

Mask of position i (lookahead, DESIGN.md section 3), written into ``out[i]`` (int32 [W]):
Ready = the legal set of the prefix ``drafts[:i]``; DeadEnd = that prefix has no legal token
(``out[i]`` all zero); Unreachable = an earlier draft was illegal or EOS was accepted
(``out[i]`` all zero: a filler no kernel may commit). The first illegal draft's position is
Ready with the legal prefix's mask.

The mask of the committed state is cached: preview computes it (to report ``dead_end``) and
the next lookahead reuses it for position 0, so a round fills each distinct state once.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from infernix_jax import mask_layout
from infernix_jax.constrain import _xgr
from infernix_jax.constrain.errors import PrefixError
from infernix_jax.constrain.vocab import ORDINARY

READY, DEAD_END, UNREACHABLE = mask_layout.READY, mask_layout.DEAD_END, mask_layout.UNREACHABLE


@dataclasses.dataclass(frozen=True)
class PreviewResult:
  """Outcome of ``preview(tokens)``.

  Attributes:
    accepted: tokens accepted (a prefix of the produced tokens; stops at the first illegal
      token or after EOS).
    complete: the output may end after them (or EOS was accepted).
    terminated: EOS was accepted.
    dead_end: the state reached has no legal next token (and is not terminated).
  """

  accepted: int
  complete: bool
  terminated: bool
  dead_end: bool


def _bit(words: np.ndarray, token: int) -> bool:
  return bool((int(words[token >> 5]) >> (token & 31)) & 1)


class OutputSession:
  """One request's grammar state (one matcher, never shared). Not thread-safe: one caller.

  Create through `CompiledConstraint.new_session(prefix=...)`.
  """

  backend = "xgrammar"  # the registry name of the backend that opens it

  def __init__(self, compiled, prefix: bytes | str = b""):
    self.compiled = compiled
    self.vocab = compiled.vocab
    self._v = self.vocab.size
    self._w = self.vocab.mask_words
    self._m = _xgr.new_matcher(compiled._entry.grammar)
    self._pending: int | None = None  # tokens accepted by an uncommitted preview
    self._frontier: np.ndarray | None = None  # int32 [1, W] mask of the committed state
    self._frontier_nonempty: bool | None = None
    self._pending_frontier: tuple[np.ndarray, bool] | None = None
    # Two scratch rows, double-buffered: the committed mask lives in one while a preview
    # fills the other (no allocation per round).
    self._bufs = (np.zeros((1, self._w), np.int32), np.zeros((1, self._w), np.int32))
    self._eos_bits = [(i >> 5, i & 31) for i in self.vocab.eos_ids]
    self.tokens_committed = 0
    if isinstance(prefix, str):
      prefix = prefix.encode("utf-8")
    self.prefix = bytes(prefix)
    if self.prefix:
      self._accept_prefix(self.prefix)

  # --- flags -----------------------------------------------------------------------------------

  @property
  def terminated(self) -> bool:
    """EOS was accepted (committed or previewed state)."""
    return bool(self._m.is_terminated())

  @property
  def complete(self) -> bool:
    """The output may end now (EOS is legal) or has ended."""
    return self.terminated or bool(self._m.is_completed())

  @property
  def can_continue(self) -> bool:
    """Some non-EOS token is legal now ("may end" is not "must end")."""
    if self.terminated:
      return False
    words = self._pending_frontier[0] if self._pending is not None else self._frontier_mask()
    allowed = mask_layout.unpack(words, self._v)[0]
    allowed[list(self.vocab.eos_ids)] = False
    return bool(allowed.any())

  @property
  def previewing(self) -> bool:
    """An uncommitted preview exists (lookahead is refused until commit or discard)."""
    return self._pending is not None

  # --- masks -----------------------------------------------------------------------------------

  def fill_mask(self, out: np.ndarray) -> bool:
    """Writes the committed state's legal set into ``out`` (int32 [W]); False when empty."""
    if self._pending is not None:
      raise RuntimeError("fill_mask while a preview is uncommitted: commit() or discard() first")
    out[...] = self._frontier_mask()[0]
    return bool(out.any())

  def _frontier_mask(self) -> np.ndarray:
    if self._frontier is None:
      buf = self._spare()
      if self._m.is_terminated():
        buf.fill(0)
      else:
        self._m.fill_next_token_bitmask(buf, 0)
      self._set_frontier(buf)
    return self._frontier

  def _spare(self) -> np.ndarray:
    """The scratch row that does not hold the committed mask."""
    return self._bufs[1] if self._frontier is self._bufs[0] else self._bufs[0]

  def _set_frontier(self, words: np.ndarray | None, nonempty: bool | None = None) -> None:
    """Caches the committed state's mask (int32 [1, W]; None = drop the cache) and, if
    known, whether it is non-empty."""
    self._frontier = words
    self._frontier_nonempty = nonempty

  def _frontier_ready(self) -> bool:
    if self._frontier_nonempty is None:
      self._frontier_nonempty = np.count_nonzero(self._frontier_mask()) != 0
    return self._frontier_nonempty

  def lookahead(self, drafts, out: np.ndarray) -> np.ndarray:
    """Per-position masks and states for a draft chain, with no persistent side effect.

    Args:
      drafts: int [K] proposed token ids (only new proposals, not the anchor).
      out: C-contiguous int32 numpy buffer [K+1, W] (more rows allowed; they are untouched).

    Returns:
      int8 [K+1] states (READY / DEAD_END / UNREACHABLE) of positions 0..K.
    """
    if self._pending is not None:
      raise RuntimeError("lookahead while a preview is uncommitted: commit() or discard() first")
    if isinstance(drafts, np.ndarray):
      drafts = drafts.reshape(-1)
    elif not isinstance(drafts, (list, tuple)):
      drafts = list(drafts)
    k = len(drafts)
    _xgr.check_buffer(out, self._w)
    if out.ndim != 2 or out.shape[0] < k + 1:
      raise ValueError(f"out {out.shape} must be [K+1={k + 1}, W={self._w}]")
    states = np.empty(k + 1, np.int8)
    states.fill(UNREACHABLE)
    if self._m.is_terminated():
      out[:k + 1] = 0
      return states
    m = self._m
    accepted = 0
    filled = 0  # rows 0..filled-1 of out were written (the rest get the zero filler)
    try:
      for i in range(k + 1):
        if i == 0 and self._frontier is not None:  # cached by the last preview/commit
          np.copyto(out[0], self._frontier[0])
          nonempty = self._frontier_ready()
        else:
          m.fill_next_token_bitmask(out, i)
          nonempty = None
          if i == 0:  # cache the committed mask: a repeated lookahead (redraw) reuses it
            spare = self._spare()
            np.copyto(spare, out[0:1])
            self._set_frontier(spare)
        filled = i + 1
        if i < k:
          d = int(drafts[i])
          legal = 0 <= d < self._v and _bit(out[i], d)
          if legal:
            nonempty = True  # the draft's own bit proves the set non-empty (no scan)
        if not (nonempty if nonempty is not None else np.count_nonzero(out[i])):
          states[i] = DEAD_END
          break
        states[i] = READY
        if i == k or not legal or not m.accept_token(d):
          break
        accepted += 1
        if m.is_terminated():
          break
    finally:
      if accepted:
        m.rollback(accepted)
      if filled < k + 1:
        out[filled:k + 1] = 0
    return states

  # --- transactions ----------------------------------------------------------------------------

  def preview(self, tokens) -> PreviewResult:
    """Provisionally accepts the produced tokens (longest legal prefix, stopping after EOS).

    Returns:
      A `PreviewResult` for the state after the accepted prefix.
    """
    if self._pending is not None:
      raise RuntimeError("preview while another preview is uncommitted")
    m = self._m
    accepted = 0
    if isinstance(tokens, np.ndarray):
      tokens = tokens.reshape(-1).tolist()
    for t in tokens:
      t = int(t)
      if m.is_terminated() or not 0 <= t < self._v or not m.accept_token(t):
        break
      accepted += 1
    self._pending = accepted
    terminated = bool(m.is_terminated())
    buf = self._spare()
    if terminated:
      buf.fill(0)
    else:
      m.fill_next_token_bitmask(buf, 0)
    if terminated:
      complete = True
    elif self._eos_bits:  # the matcher allows EOS exactly when the output may end
      complete = any((int(buf[0, w]) >> b) & 1 for w, b in self._eos_bits)
    else:
      complete = bool(m.is_completed())
    nonempty = not terminated and (complete or np.count_nonzero(buf) != 0)
    self._pending_frontier = (buf, nonempty)
    return PreviewResult(accepted=accepted, complete=complete, terminated=terminated,
                         dead_end=not terminated and not nonempty)

  def commit(self) -> None:
    """Confirms the preview (allocates and checks nothing)."""
    if self._pending is None:
      return
    if self._pending:
      self._set_frontier(*self._pending_frontier)
    self.tokens_committed += self._pending
    self._pending = None
    self._pending_frontier = None

  def discard(self) -> None:
    """Returns to the state before the preview."""
    if self._pending is None:
      return
    if self._pending:
      self._m.rollback(self._pending)
    self._pending = None
    self._pending_frontier = None

  def accept(self, tokens) -> PreviewResult:
    """preview + commit in one step (forced control, tests)."""
    r = self.preview(tokens)
    self.commit()
    return r

  # --- jump-forward ----------------------------------------------------------------------------

  def forced_tokens(self, max_n: int) -> list[int]:
    """Tokens the grammar forces next, for jump-forward drafting (may be ``[]``).

    Method: xgrammar's ``find_jump_forward_string`` (the longest byte string every legal
    continuation starts with) tokenised greedily by the longest ordinary token whose bytes
    prefix the remaining forced bytes and that the matcher accepts. Only whole tokens inside
    the forced string are proposed, so each is legal; which tokenisation the target prefers
    is left to verification (the drafts are one-hot and verified, so output stays exact).
    Never proposes EOS. No persistent side effect. When the forced bytes end inside a UTF-8
    sequence the library cannot return them as text; then the fallback is a single-legal-
    token walk (accept while exactly one non-EOS token is legal).
    """
    if max_n <= 0 or self._pending is not None or self._m.is_terminated():
      return []
    try:
      forced = self._m.find_jump_forward_string()
    except UnicodeDecodeError:
      return self._single_legal_walk(max_n)
    data = forced.encode("utf-8", errors="surrogateescape") if isinstance(forced, str) else forced
    if not data:
      return []
    table, longest = self._ordinary_table()
    out: list[int] = []
    pos = 0
    try:
      while pos < len(data) and len(out) < max_n:
        for n in range(min(longest, len(data) - pos), 0, -1):
          t = table.get(data[pos:pos + n])
          if t is not None and self._m.accept_token(t):
            out.append(t)
            pos += n
            break
        else:
          break
    finally:
      if out:
        self._m.rollback(len(out))
    return out

  def _single_legal_walk(self, max_n: int) -> list[int]:
    """Tokens accepted while the legal set is exactly one non-EOS token (then rolled back)."""
    buf = np.zeros((1, self._w), np.int32)
    eos = set(self.vocab.eos_ids)
    out: list[int] = []
    try:
      while len(out) < max_n and not self._m.is_terminated():
        self._m.fill_next_token_bitmask(buf, 0)
        nz = np.flatnonzero(buf[0])
        if len(nz) != 1:
          break
        word = int(buf[0, nz[0]]) & 0xFFFFFFFF
        if word & (word - 1):
          break
        t = int(nz[0]) * 32 + word.bit_length() - 1
        if t in eos or not self._m.accept_token(t):
          break
        out.append(t)
    finally:
      if out:
        self._m.rollback(len(out))
    return out

  def _ordinary_table(self):
    def build():
      table: dict[bytes, int] = {}
      cls = self.vocab.token_class
      for i in range(self._v - 1, -1, -1):
        b = self.vocab.token_bytes[i]
        if cls[i] == ORDINARY and b:
          table[b] = i
      return table, max((len(b) for b in table), default=1)

    return self.vocab.lazy("constrain.ordinary_table", build)

  # --- continuation ----------------------------------------------------------------------------

  def _accept_prefix(self, prefix: bytes) -> None:
    if self._m.accept_string(prefix):
      return
    # Locate the first byte the constraint refuses (on a fork; the session's matcher is fresh).
    probe = _xgr.new_matcher(self.compiled._entry.grammar)
    good = 0
    for i in range(len(prefix)):
      if not probe.accept_string(prefix[i:i + 1]):
        break
      good = i + 1
    raise PrefixError(f"the continuation prefix cannot start an output of this constraint: "
                      f"byte {good} ({prefix[good:good + 8]!r}...) is not allowed there",
                      str(good))
