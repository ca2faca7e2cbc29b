"""MatcherSession: the session transactions, written once over a backend matcher's primitives.

Axis letters (docs/CONTRACTS.md): K drafts, P = K + 1 positions, N rows of a buffer, V
vocabulary, W mask words.

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

A backend supplies a `Matcher` (`backends/base.py`): fill the next mask into a row, accept one
token, roll back n tokens, is terminated / completed, accept a continuation prefix, and
optional hints (jump-forward bytes or tokens, a cheap emptiness test). Everything else lives
here, once:

Mask of position i (lookahead, DESIGN.md section 3), written into ``out[i]`` (int32 [W]):
Ready = the legal set of the prefix ``drafts[:i]``; DeadEnd = that prefix has no legal token
(``out[i]`` all zero); Unreachable = an earlier draft was illegal or EOS was accepted
(``out[i]`` all zero: a filler no kernel may commit). The first illegal draft's position is
Ready with the legal prefix's mask.

The mask of the committed state is cached: preview computes it (to report ``dead_end``) and
the next lookahead reuses it for position 0, so a round fills each distinct state once. A
lookahead on an uncached state (a new session's first) fills position 0 without caching it.
A matcher with a cheap emptiness test (``has_legal``) skips the preview mask.

Every mask the matcher fills is corrected before anyone reads it: the bits of ids past V are
cleared (the layout says they are 0; xgrammar may set them in the last word), and, unless the
matcher's masks are strict UTF-8 already (``strict_utf8``), the strict UTF-8 filter of `_utf8`
is applied for the decoder state at that position (tracked over committed, previewed and
lookahead tokens). preview, jump-forward and the continuation prefix refuse what the filter
refuses, so a token is legal exactly when its mask bit is set. A matcher whose ``accept``
is looser than its mask (``exact_accept = False``) has each previewed token checked against the
mask first (the last lookahead's legal chain is not checked twice).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import numpy as np

from infernix_jax import mask_layout
from infernix_jax.constrain import _utf8
from infernix_jax.constrain._forced import ForcedTokens
from infernix_jax.constrain._masks import check_buffer, probe_words
from infernix_jax.constrain._masks import count_nonzero as _count_nonzero
from infernix_jax.constrain.errors import PrefixError

READY, DEAD_END, UNREACHABLE = mask_layout.READY, mask_layout.DEAD_END, mask_layout.UNREACHABLE
_INT32 = np.dtype(np.int32)
# lookahead's states templates: _FILLERS[K] is int8 [K+1] all UNREACHABLE (copied per call).
_FILLERS = tuple(np.full(k + 1, UNREACHABLE, np.int8) for k in range(33))


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


class MatcherSession(ForcedTokens):
  """One request's constraint state over one backend `Matcher` (never shared). Not
  thread-safe: one caller. Backends subclass it only to build their matcher and name
  themselves (``backend``); open sessions through `CompiledConstraint.new_session`.

  Attributes:
    matcher: the backend's primitives (batch fills reach the library through it).
    compiled: the compiled constraint; ``vocab`` its vocabulary.
    tokens_committed: tokens committed so far (the continuation prefix excluded).
  """

  backend = ""  # the registry name of the backend that opens it (set by each subclass)

  def __init__(self, matcher, compiled, prefix: bytes | str = b"", *,
               utf8_switch: Mapping[int, int] | None = None, utf8_start: int = _utf8.CLEAN):
    """Starts a session after the continuation ``prefix``.

    Args:
      matcher: the backend's `Matcher`, fresh (at the start of the output).
      compiled: the compiled constraint (its ``vocab`` is read).
      prefix: bytes (or str, UTF-8 encoded) the output already holds.
      utf8_switch: token id -> UTF-8 filter state after that token whatever the state before
        (framing: ``<think>`` -> `_utf8.FREE`, the token-level reasoning that is not filtered;
        ``</think>`` -> `_utf8.CLEAN`). None: every token is text.
      utf8_start: the filter state at the start of the output (`_utf8.FREE` when the output
        starts inside reasoning).

    Raises:
      PrefixError: no output of the constraint starts with ``prefix``, or it is not UTF-8.
    """
    self.matcher = matcher
    self.compiled = compiled
    self.vocab = compiled.vocab
    self._v = self.vocab.size
    self._w = self.vocab.mask_words
    # The per-mask path calls the matcher's primitives bound once.
    self._fill_words = matcher.fill
    self._accept_token = matcher.accept
    self._rollback = matcher.rollback
    self._is_terminated = matcher.is_terminated
    self._exact = bool(matcher.exact_accept)
    self._eos_complete = bool(getattr(matcher, "eos_marks_complete", False))
    self._has_legal = getattr(matcher, "has_legal", None)
    self._filtering = not matcher.strict_utf8
    self._utf8 = _utf8.tables(self.vocab) if self._filtering else None
    self._clean_filter = self._filtering and bool(self._utf8.clean_bad.size)
    start = utf8_start if self._filtering else _utf8.CLEAN
    self._u8 = start  # UTF-8 decoder state after the matcher's tokens (preview included)
    self._u8_mark = start  # ... and after the committed tokens, while a preview is open
    self._u8_log: list[int] = []  # the state after each accepted token (rollback restores it)
    self._u8_base = start  # ... and before the first one
    self._u8_switch = dict(utf8_switch) if utf8_switch and self._filtering else None
    self._pending: int | None = None  # tokens accepted by an uncommitted preview
    self._frontier: np.ndarray | None = None  # int32 [1, W] mask of the committed state
    self._frontier_nonempty: bool | None = None
    self._pending_frontier: tuple[np.ndarray | None, bool] | None = None
    self._known: Sequence[int] = ()  # the last lookahead's legal chain (committed state)
    # Two scratch rows, double-buffered: the committed mask lives in one while a preview
    # fills the other (no allocation per round).
    self._bufs = (np.zeros((1, self._w), np.int32), np.zeros((1, self._w), np.int32))
    self._scratch = np.zeros((1, self._w), np.int32)
    self._eos = list(self.vocab.eos_ids)
    self._eos_set = frozenset(self._eos)
    self._eos_bits = tuple((e >> 5, e & 31) for e in self._eos)  # (word, bit) of each EOS id
    # Bits of the last mask word that belong to ids < V (None: V is a multiple of 32), and
    # the ones that do not (0: none).
    self._last_keep = (1 << (self._v & 31)) - 1 if self._v & 31 else None
    self._spare_bits = ~self._last_keep if self._last_keep is not None else 0
    self._probe = probe_words(self.vocab)
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
    return bool(self._is_terminated())

  @property
  def complete(self) -> bool:
    """The output may end now (EOS is legal) or has ended."""
    return self.terminated or (not _utf8.pending(self._u8) and bool(self.matcher.is_completed()))

  @property
  def can_continue(self) -> bool:
    """Some non-EOS token is legal now ("may end" is not "must end")."""
    if self.terminated:
      return False
    hint = getattr(self.matcher, "can_continue", None)
    if hint is not None and not self._filtering:
      return bool(hint())
    if self._pending is not None:
      words = self._pending_frontier[0]
      if words is None:
        words = self._scratch
        self._fill(words, 0, self._u8)
    else:
      words = self._frontier_mask()
    allowed = mask_layout.unpack(words, self._v)[0]
    allowed[self._eos] = False
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
    return self._frontier_ready()

  @property
  def frontier_cached(self) -> bool:
    """Whether the committed state's mask is cached (a batch fill may supply it otherwise)."""
    return self._frontier is not None

  def set_frontier(self, words: np.ndarray | None, nonempty: bool | None = None) -> None:
    """Caches ``words`` (int32 [1, W], the matcher's raw legal set of the committed state,
    filled outside this session, e.g. by a batch call) as the committed state's mask,
    corrected in place first (see `_fill`); None drops the cache."""
    if words is not None:
      mask_layout.clear_spare_bits(words, self._v)
      if self._filtering:
        self._utf8.filter(words, self._u8)
    self._cache_frontier(words, nonempty)

  def _frontier_mask(self) -> np.ndarray:
    if self._frontier is None:
      buf = self._spare()
      try:
        self._fill(buf, 0, self._u8)
      except RuntimeError:  # the library refuses to fill after EOS: the legal set is empty
        if not self._is_terminated():
          raise
        buf.fill(0)
        self._cache_frontier(buf, False)
        return buf
      self._cache_frontier(buf)
    return self._frontier

  def _next_u8(self, u8: int, token: int) -> int:
    """The UTF-8 filter state after ``token`` (accepted in state ``u8``)."""
    if not self._filtering:
      return u8
    sw = self._u8_switch
    if sw is not None and token in sw:
      return sw[token]
    return self._utf8.next_state(u8, token)

  def _fill(self, out: np.ndarray, i: int, u8: int) -> None:
    """Fills row ``i`` of ``out`` (C-contiguous int32 [N, W], checked by the caller) with the
    matcher's legal set, corrected: no bit past V, and (unless the matcher is strict UTF-8
    itself) only tokens that continue the UTF-8 decoder state ``u8`` validly.

    Raises:
      RuntimeError: the matcher has terminated (nothing is written).
    """
    self._fill_words(out, i)
    # Spare bits: read one word as a Python int, write only when the library set some (it
    # does when it fills the last word whole), which is what `mask_layout.clear_spare_bits`
    # does for one row.
    if self._spare_bits and out.item(i, self._w - 1) & self._spare_bits:
      out[i, self._w - 1] &= self._last_keep
    if u8 or self._clean_filter:
      self._utf8.filter(out[i], u8)

  def _nonempty(self, out: np.ndarray, i: int) -> bool:
    """Whether row ``i`` of ``out`` has a bit set: the probe words first (one read each
    proves most masks non-empty), then a full count."""
    for word in self._probe:
      if out.item(i, word):
        return True
    return _count_nonzero(out[i]) != 0

  def _spare(self) -> np.ndarray:
    """The scratch row that does not hold the committed mask."""
    return self._bufs[1] if self._frontier is self._bufs[0] else self._bufs[0]

  def _cache_frontier(self, words: np.ndarray | None, nonempty: bool | None = None) -> None:
    """Caches the committed state's corrected mask (int32 [1, W]; None = drop the cache) and,
    if known, whether it is non-empty."""
    self._frontier = words
    self._frontier_nonempty = nonempty

  def _frontier_ready(self) -> bool:
    if self._frontier_nonempty is None:
      self._frontier_nonempty = self._nonempty(self._frontier_mask(), 0)
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
    if type(drafts) is not list and type(drafts) is not tuple:
      if isinstance(drafts, np.ndarray):
        if drafts.ndim != 1:
          drafts = drafts.reshape(-1)
      else:
        drafts = list(drafts)
    k = len(drafts)
    # What `check_buffer` accepts, in one expression for the common buffer (~0.3 us less per
    # call); anything else gets the full check, which says what is wrong.
    shape = out.shape
    if (type(out) is not np.ndarray or out.dtype is not _INT32 or not out.flags.carray
        or len(shape) != 2 or shape[1] != self._w or shape[0] <= k):
      check_buffer(out, self._w)
      if out.ndim != 2 or out.shape[0] <= k:
        raise ValueError(f"out {out.shape} must be [K+1={k + 1}, W={self._w}]")
    states = _FILLERS[k].copy() if k < len(_FILLERS) else np.full(k + 1, UNREACHABLE, np.int8)
    self.lookahead_rows(drafts, k, out, 0, states, 0)
    return states

  def lookahead_rows(self, drafts, k: int, out: np.ndarray, r0: int, states: np.ndarray,
                     s0: int) -> None:
    """`lookahead` into rows ``r0..r0+k`` of ``out`` and ``states[s0..s0+k]`` (a batch fill
    calls it on a [B*P, W] view, so no row view is made per position).

    Args:
      drafts: k token ids (any int-like values).
      k: the number of drafts.
      out: C-contiguous writable int32 numpy array [N, W], N >= r0 + k + 1 (checked by the
        caller).
      states: int8 array whose entries ``s0..s0+k`` are UNREACHABLE on entry.

    Raises:
      RuntimeError: a preview is uncommitted.
    """
    if self._pending is not None:
      raise RuntimeError("lookahead while a preview is uncommitted: commit() or discard() first")
    if not k:  # one position (K=0 rounds): nothing to accept or roll back
      self._known = ()
      if self._frontier is not None:
        out[r0] = self._frontier[0]
        nonempty = self._frontier_ready()
      else:
        try:
          self._fill(out, r0, self._u8)
        except RuntimeError:  # the library refuses to fill after EOS
          if not self._is_terminated():
            raise
          out[r0] = 0
          return
        nonempty = self._nonempty(out, r0)
      if nonempty:
        states[s0] = READY
      elif not self._is_terminated():  # (EOS committed: the cached mask is all zero)
        states[s0] = DEAD_END
      return
    accepted = 0
    filled = 0  # rows r0..r0+filled-1 were written (the rest get the zero filler)
    u8 = self._u8
    try:
      for i in range(k + 1):
        row = r0 + i
        if i:
          self._fill(out, row, u8)
          nonempty = None
        elif self._frontier is not None:  # cached by the last preview (or fill_mask)
          out[row] = self._frontier[0]
          nonempty = self._frontier_nonempty
        else:  # not cached (a new session): filled here, and not cached either (a copy per
          # call that no round would use: every round's preview computes the next one)
          try:
            self._fill(out, row, u8)
          except RuntimeError:  # the library refuses to fill after EOS
            if self._is_terminated():
              return  # every position Unreachable, zero filler (below)
            raise
          nonempty = None
        filled = i + 1
        legal = False
        if i < k:
          d = int(drafts[i])
          legal = 0 <= d < self._v and (out.item(row, d >> 5) >> (d & 31)) & 1
          if legal:
            nonempty = True  # the draft's own bit proves the set non-empty (no scan)
        if nonempty is None:
          nonempty = self._nonempty(out, row)
          if not i and self._frontier is not None:
            self._frontier_nonempty = nonempty
        if not nonempty:
          if not i and self._is_terminated():  # EOS committed: the cached mask is all zero
            filled = 0
            return
          states[s0 + i] = DEAD_END
          return
        states[s0 + i] = READY
        if i == k or not legal or not self._accept_token(d):
          return
        accepted += 1
        u8 = self._next_u8(u8, d)
        if self._is_terminated():
          return
    finally:
      if not self._exact:  # legal from the committed state: preview skips their masks
        self._known = [int(t) for t in drafts[:accepted]]
      if accepted:
        self._rollback(accepted)
      if filled < k + 1:
        out[r0 + filled:r0 + k + 1] = 0

  # --- transactions ----------------------------------------------------------------------------

  def preview(self, tokens) -> PreviewResult:
    """Provisionally accepts the produced tokens (longest legal prefix, stopping after EOS).

    Returns:
      A `PreviewResult` for the state after the accepted prefix.
    """
    if self._pending is not None:
      raise RuntimeError("preview while another preview is uncommitted")
    if isinstance(tokens, np.ndarray):
      tokens = tokens.reshape(-1).tolist()
    accepted = self._accept_legal(tokens)
    u8 = self._u8
    self._pending = accepted
    terminated = bool(self._is_terminated())
    if self._has_legal is not None:  # a cheap emptiness test: no mask now
      complete = self.complete
      nonempty = not terminated and (complete or bool(self._has_legal()))
      self._pending_frontier = (None, nonempty)
    else:
      buf = self._spare()
      if terminated:
        buf.fill(0)
        complete = True
      else:
        self._fill(buf, 0, u8)
        if self._eos_complete and self._eos_bits:  # EOS is legal exactly when it may end
          complete = any((buf.item(0, word) >> b) & 1 for word, b in self._eos_bits)
        else:
          complete = not _utf8.pending(u8) and bool(self.matcher.is_completed())
      nonempty = not terminated and (complete or self._nonempty(buf, 0))
      self._pending_frontier = (buf, nonempty)
    return PreviewResult(accepted=accepted, complete=complete, terminated=terminated,
                         dead_end=not terminated and not nonempty)

  def _accept_legal(self, tokens) -> int:
    """Accepts the longest legal prefix of ``tokens`` (stopping after EOS) into the matcher
    and the UTF-8 state; the mark stays at the committed state. Returns how many."""
    u8 = self._u8
    self._u8_mark = u8
    log = self._u8_log
    accepted = 0
    v = self._v
    terminated = bool(self._is_terminated())
    if self._exact:
      tab = self._utf8 if self._filtering else None
      for t in tokens:
        t = int(t)
        if (terminated or not 0 <= t < v or (tab is not None and not tab.ok(u8, t))
            or not self._accept_token(t)):
          break
        accepted += 1
        u8 = self._next_u8(u8, t)
        log.append(u8)
        terminated = bool(self._is_terminated())
    else:  # each token against the mask of the state before it (the known chain excepted)
      known, same = self._known, True
      for t in tokens:
        t = int(t)
        if terminated or not 0 <= t < v:
          break
        same = same and accepted < len(known) and known[accepted] == t
        if not same:
          if accepted == 0:
            words = self._frontier_mask()
          else:
            words = self._scratch
            self._fill(words, 0, u8)
          if not (words.item(0, t >> 5) >> (t & 31)) & 1 or not self._accept_token(t):
            break
        elif not self._accept_token(t):
          break
        accepted += 1
        u8 = self._next_u8(u8, t)
        log.append(u8)
        terminated = bool(self._is_terminated())
    self._u8 = u8
    return accepted

  def commit(self) -> None:
    """Confirms the preview (allocates and checks nothing)."""
    if self._pending is None:
      return
    if self._pending:
      self._cache_frontier(*self._pending_frontier)
      self._known = ()
    self.tokens_committed += self._pending
    self._pending = None
    self._pending_frontier = None

  def discard(self) -> None:
    """Returns to the state before the preview."""
    if self._pending is None:
      return
    if self._pending:
      self._rollback(self._pending)
      del self._u8_log[-self._pending:]
    self._u8 = self._u8_mark
    self._pending = None
    self._pending_frontier = None

  def accept(self, tokens) -> PreviewResult:
    """preview + commit in one step (forced control, tests)."""
    r = self.preview(tokens)
    self.commit()
    return r

  def rollback(self, n: int) -> None:
    """Undoes the last ``n`` committed tokens (the matcher's own rollback).

    Raises:
      RuntimeError: a preview is uncommitted.
      ValueError: ``n`` is negative or more than the tokens committed.
    """
    if self._pending is not None:
      raise RuntimeError("rollback while a preview is uncommitted")
    if not 0 <= n <= self.tokens_committed:
      raise ValueError(f"cannot roll back {n} tokens, {self.tokens_committed} were committed")
    if n:
      self._rollback(n)
      del self._u8_log[-n:]
      self._u8 = self._u8_log[-1] if self._u8_log else self._u8_base
      self.tokens_committed -= n
      self._cache_frontier(None)
      self._known = ()

  # --- continuation ----------------------------------------------------------------------------

  def _accept_prefix(self, prefix: bytes) -> None:
    if self._filtering and self._u8 != _utf8.FREE:
      u8, bad = _utf8.advance(self._u8, prefix)
    else:
      u8, bad = self._u8, -1
    head = prefix if bad < 0 else prefix[:bad]
    good = self.matcher.accept_prefix(head)
    if good == len(head):
      if bad < 0:
        self._u8 = self._u8_mark = self._u8_base = u8
        return
      raise PrefixError(f"the continuation prefix is not valid UTF-8: byte {bad} "
                        f"({prefix[bad:bad + 8]!r}...) cannot follow the bytes before it", str(bad))
    raise PrefixError(f"the continuation prefix cannot start an output of this constraint: "
                      f"byte {good} ({prefix[good:good + 8]!r}...) is not allowed there",
                      str(good))
