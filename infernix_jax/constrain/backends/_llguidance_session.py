"""LLGuidanceSession: one request's llguidance matcher behind the `ConstraintSession` contract.

Axis letters (docs/CONTRACTS.md): K drafts, V vocabulary, W mask words. Opened by
`backends/llguidance.py` (which owns the library import; see its notes on EOS, dead ends and
masks); this module only drives the matcher objects it is handed. Semantics: `OutputSession`
(DESIGN.md sections 3-4).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from infernix_jax import mask_layout
from infernix_jax.constrain import errors
from infernix_jax.constrain.backends import _llguidance_json as _lj
from infernix_jax.constrain.session import PreviewResult

NAME = "llguidance"
READY, DEAD_END, UNREACHABLE = mask_layout.READY, mask_layout.DEAD_END, mask_layout.UNREACHABLE
_LIMIT_MESSAGES = ("too many", "fuel", "limit", "too complex", "too large")


class LLGuidanceSession:
  """One request's llguidance matcher with the transactions of DESIGN.md section 4.

  Same semantics as `OutputSession` (lookahead / preview / commit / discard / accept,
  fill_mask, forced_tokens, flags). Not thread-safe: one caller.
  """

  backend = NAME

  def __init__(self, compiled: Any, prefix: bytes | str = b""):
    self.compiled = compiled
    self.vocab = compiled.vocab
    self._v = self.vocab.size
    self._w = self.vocab.mask_words
    index = compiled._index
    self._index = index
    self._eos_ids = index.eos
    self._m = compiled._template.deep_copy()
    self._fed: list[int] = []  # every token fed to the matcher, in order (for _rebuild)
    self._eos = False  # EOS accepted (committed, or by the pending preview)
    self._pending: int | None = None  # tokens accepted by an uncommitted preview (with EOS)
    self._pending_fed = 0  # of them, fed to the matcher (EOS is not)
    self._frontier: np.ndarray | None = None  # int32 [W] mask of the committed state
    self._pending_frontier: np.ndarray | None = None
    self._bufs = (np.zeros(self._w, np.int32), np.zeros(self._w, np.int32))
    self._scratch = np.zeros(self._w, np.int32)
    self._known: Sequence[int] = []  # the last lookahead's legal chain (committed state)
    self._eos_words = [(i >> 5, i & 31) for i in sorted(self._eos_ids)]
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
    return self._eos

  @property
  def complete(self) -> bool:
    """The output may end now (EOS is legal) or has ended."""
    return self._eos or bool(self._m.is_accepting())

  @property
  def can_continue(self) -> bool:
    """Some non-EOS token is legal now ("may end" is not "must end")."""
    if self._eos:
      return False
    words = self._pending_frontier if self._pending is not None else self._frontier_mask()
    allowed = mask_layout.unpack(words, self._v)
    allowed[list(self._eos_ids)] = False
    return bool(allowed.any())

  @property
  def previewing(self) -> bool:
    """An uncommitted preview exists (lookahead is refused until commit or discard)."""
    return self._pending is not None

  # --- masks -----------------------------------------------------------------------------------

  def _fill(self, row: np.ndarray) -> None:
    """The matcher's current legal set into ``row`` (int32 [W], contiguous).

    A state whose continuation no token can spell (a dead end) puts llguidance's matcher in
    its permanent error state ("NoExtension..."): the row is then all zero and the matcher is
    rebuilt at the same position from the tokens fed so far, so rollback keeps working.
    """
    self._m.unsafe_compute_mask_ptr(row.ctypes.data, self._w * 4)
    if self._m.is_error():
      msg = self._m.get_error()
      if "NoExtension" not in msg:
        raise RuntimeError(f"llguidance matcher error: {_lj.first_line(msg)}")
      row.fill(0)
      self._rebuild()
      return
    self._widen(row)

  def _widen(self, row: np.ndarray) -> bool:
    """Adds the tokens that spell a strict prefix of the forced bytes (work-around).

    Where the grammar forces bytes, llguidance's mask keeps only tokens that cover them
    canonically and leaves out shorter tokens that spell a strict prefix of them (e.g. "mill"
    when "millions" is forced), although its byte-level check accepts those. The legal set is
    every token whose bytes can continue the output (as xgrammar and the trie compute it), so
    they are added back, each confirmed by the matcher's own byte-level validation.

    Returns:
      Whether any bit was added.
    """
    ff = self._m.compute_ff_bytes()
    if len(ff) < 2:
      return False
    table = self._ordinary_by_bytes()
    added = False
    for n in range(1, len(ff)):
      for t in table.get(ff[:n], ()):
        if not mask_layout.bit(row, t) and self._m.validate_tokens([t]) == 1:
          row[t >> 5] |= np.int32(np.uint32(1 << (t & 31)).view(np.int32))
          added = True
    return added

  def _ordinary_by_bytes(self) -> dict:
    """bytes -> ids of the ordinary tokens that spell them (per vocabulary, built once)."""
    def build():
      from infernix_jax.constrain.vocab import ORDINARY
      table: dict[bytes, tuple[int, ...]] = {}
      cls = self.vocab.token_class
      for i, b in enumerate(self.vocab.token_bytes):
        if cls[i] == ORDINARY and b:
          table[b] = table.get(b, ()) + (i,)
      return table

    return self.vocab.lazy("llguidance.ordinary_by_bytes", build)

  def widen_chain(self, masks: np.ndarray, chain: Sequence[int]) -> bool:
    """Applies `_widen` to masks [K+1, W] a batch fill computed for ``chain`` (committed
    state, no preview); True when that changed whether a draft is legal (the row must then
    be recomputed by `lookahead`)."""
    fed = 0
    try:
      for i in range(len(chain) + 1):
        if not masks[i].any():
          return False
        d = chain[i] if i < len(chain) else None
        before = d is not None and 0 <= d < self._v and mask_layout.bit(masks[i], d)
        self._widen(masks[i])
        if d is None:
          return False
        now = 0 <= d < self._v and mask_layout.bit(masks[i], d)
        if now != before:
          return True
        if not now or d in self._eos_ids:
          return False
        self._feed(d)
        fed += 1
      return False
    finally:
      self._unfeed(fed)

  def _rebuild(self) -> None:
    """A fresh matcher fed with the same tokens (recovery from llguidance's error state)."""
    m = self.compiled._template.deep_copy()
    if self._fed and not m.consume_tokens(self._fed):
      raise RuntimeError(
          f"llguidance cannot replay its own tokens: {_lj.first_line(m.get_error())}")
    self._m = m

  def _feed(self, t: int) -> None:
    if not self._m.consume_token(t):
      raise RuntimeError(f"llguidance refused token {t} that its mask allowed: "
                         f"{_lj.first_line(self._m.get_error())}")
    self._fed.append(t)

  def _unfeed(self, n: int) -> None:
    if n:
      if not self._m.rollback(n):
        raise RuntimeError(f"llguidance rollback failed: {_lj.first_line(self._m.get_error())}")
      del self._fed[-n:]

  def _spare(self) -> np.ndarray:
    return self._bufs[1] if self._frontier is self._bufs[0] else self._bufs[0]

  def _frontier_mask(self) -> np.ndarray:
    if self._frontier is None:
      buf = self._spare()
      if self._eos:
        buf.fill(0)
      else:
        self._fill(buf)
      self._frontier = buf
    return self._frontier

  def fill_mask(self, out: np.ndarray) -> bool:
    """Writes the committed state's legal set into ``out`` (int32 [W]); False when empty."""
    if self._pending is not None:
      raise RuntimeError("fill_mask while a preview is uncommitted: commit() or discard() first")
    out[...] = self._frontier_mask()
    return bool(out.any())

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
    drafts = [int(t) for t in (np.asarray(drafts).reshape(-1) if isinstance(drafts, np.ndarray)
                               else drafts)]
    k = len(drafts)
    if not isinstance(out, np.ndarray) or out.dtype != np.int32 or not out.flags.c_contiguous \
        or not out.flags.writeable:
      raise ValueError("out must be a C-contiguous writable int32 numpy array")
    if out.ndim != 2 or out.shape[0] < k + 1 or out.shape[1] != self._w:
      raise ValueError(f"out {out.shape} must be [K+1={k + 1}, W={self._w}]")
    states = np.full(k + 1, UNREACHABLE, np.int8)
    if self._eos:
      out[:k + 1] = 0
      return states
    fed = 0
    filled = 0
    try:
      for i in range(k + 1):
        if i == 0:
          np.copyto(out[0], self._frontier_mask())
        else:
          self._fill(out[i])
        filled = i + 1
        if not out[i].any():
          states[i] = DEAD_END
          break
        states[i] = READY
        if i == k:
          break
        d = drafts[i]
        if not (0 <= d < self._v and mask_layout.bit(out[i], d)) or d in self._eos_ids:
          break
        self._feed(d)
        fed += 1
    finally:
      self._known = drafts[:fed]  # legal from the committed state: preview skips their masks
      self._unfeed(fed)
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
    tokens = [int(t) for t in (np.asarray(tokens).reshape(-1) if isinstance(tokens, np.ndarray)
                               else tokens)]
    accepted = fed = 0
    if not self._eos:
      fed = self._consume_legal(tokens, self._known)
      accepted = fed
      if fed < len(tokens) and tokens[fed] in self._eos_ids and self._m.is_accepting():
        self._eos = True
        accepted += 1
    self._pending, self._pending_fed = accepted, fed
    buf = self._spare()
    if self._eos:
      buf.fill(0)
      complete = True
    else:
      self._fill(buf)
      complete = bool(self._m.is_accepting())
    nonempty = not self._eos and (complete or bool(buf.any()))
    self._pending_frontier = buf
    return PreviewResult(accepted=accepted, complete=complete, terminated=self._eos,
                         dead_end=not self._eos and not nonempty)

  def commit(self) -> None:
    """Confirms the preview (allocates and checks nothing)."""
    if self._pending is None:
      return
    if self._pending:
      self._frontier = self._pending_frontier
      self._known = []
    self.tokens_committed += self._pending
    self._pending = None
    self._pending_frontier = None

  def discard(self) -> None:
    """Returns to the state before the preview."""
    if self._pending is None:
      return
    self._unfeed(self._pending_fed)
    if self._pending > self._pending_fed:  # the preview accepted EOS
      self._eos = False
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

    Method: llguidance's fast-forward tokens (its forced bytes, tokenized by our greedy
    encoder and trimmed so that the last token cannot be extended into a different one),
    cut to ``max_n`` and to the prefix whose tokens the masks allow. Never EOS; no side
    effect.
    """
    if max_n <= 0 or self._pending is not None or self._eos:
      return []
    ff = [int(t) for t in self._m.compute_ff_tokens()]
    if self._m.is_error():
      if "NoExtension" not in self._m.get_error():
        raise RuntimeError(f"llguidance matcher error: {_lj.first_line(self._m.get_error())}")
      self._rebuild()  # a dead end forces nothing
      return []
    ff = ff[:max_n]
    cut = next((i for i, t in enumerate(ff) if t in self._eos_ids or not 0 <= t < self._v),
               len(ff))
    n = self._consume_legal(ff[:cut], ())
    self._unfeed(n)
    return ff[:n]

  def _consume_legal(self, tokens: Sequence[int], known: Sequence[int]) -> int:
    """Feeds the longest prefix of ``tokens`` whose every token is in the mask of the state
    before it (EOS and ids >= V stop it); returns how many were fed.

    The mask (llguidance's, widened by `_widen`), not the byte-level ``validate_tokens``, is
    the legal set: a session accepts exactly what its masks allow. ``known``: tokens already checked
    against the masks of these states (the last lookahead's legal chain), so their masks are
    not computed again. Starts from the committed state (no preview pending).
    """
    fed = 0
    same = True
    for t in tokens:
      if not 0 <= t < self._v or t in self._eos_ids:
        break
      same = same and fed < len(known) and known[fed] == t
      if not same:
        if fed == 0:
          words = self._frontier_mask()
        else:
          words = self._scratch
          self._fill(words)
        if not mask_layout.bit(words, t):
          break
      self._feed(t)
      fed += 1
    return fed

  # --- continuation ----------------------------------------------------------------------------

  def _accept_prefix(self, prefix: bytes) -> None:
    enc = self._index.encoder
    ids = enc(prefix)
    spelled = b"".join(self.vocab.token_bytes[i] for i in ids)
    n = self._m.validate_tokens(ids) if ids else 0
    if n == len(ids) and spelled == prefix:
      if ids and not self._m.consume_tokens(ids):
        raise RuntimeError(f"llguidance refused a validated prefix: {self._m.get_error()}")
      self._fed.extend(ids)
      return
    # Locate the first refused byte: the validated tokens, then byte by byte on a copy.
    good = sum(len(self.vocab.token_bytes[i]) for i in ids[:n])
    probe = self._m.deep_copy()
    if n:
      probe.consume_tokens(ids[:n])
    while good < len(prefix):
      t = enc.table.get(prefix[good:good + 1])
      if t is None or not probe.consume_token(t):
        break
      good += 1
    msg = probe.get_error() if probe.is_error() else ""
    if any(s in msg for s in _LIMIT_MESSAGES):  # the library's resources, not the prefix
      raise RuntimeError(f"llguidance hit a resource limit: {_lj.first_line(msg)}")
    raise errors.PrefixError(
        f"the continuation prefix cannot start an output of this constraint: byte {good} "
        f"({prefix[good:good + 8]!r}...) is not allowed there", str(good))
