"""LLGuidanceSession: the `MatcherSession` transactions over an llguidance matcher's primitives.

Axis letters (docs/CONTRACTS.md): K drafts, N rows of a buffer, V vocabulary, W mask words.
Opened by `backends/llguidance.py` (which owns the library import; see its notes on EOS, dead
ends and masks); this module only drives the matcher objects it is handed.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from infernix_jax import mask_layout
from infernix_jax.constrain.backends import _llguidance_json as _lj
from infernix_jax.constrain.session import MatcherSession

NAME = "llguidance"
_LIMIT_MESSAGES = ("too many", "fuel", "limit", "too complex", "too large")


class LLGuidanceMatcher:
  """The `Matcher` primitives over one llguidance LLMatcher (backends/base.py).

  EOS is never fed to the library: ``accept(EOS)`` records it here (when the grammar may
  end) and ``rollback`` undoes it first. An illegal token is never fed either: the library
  validates bytes, which is looser than its mask, so ``exact_accept`` is False and the session
  checks the mask first. Masks are taken as the library computes them (``strict_utf8``: its
  lexer matches UTF-8 text), widened where the grammar forces bytes (`widen`).
  """

  strict_utf8 = True
  exact_accept = False

  def __init__(self, compiled: Any):
    self.compiled = compiled  # the CompiledLLGuidance
    self.vocab = compiled.vocab
    self._v = self.vocab.size
    self._w = self.vocab.mask_words
    self.eos_ids = compiled._index.eos
    self.native = compiled._template.deep_copy()  # the LLMatcher (batch fills pass it on)
    self._fed: list[int] = []  # every token fed to the library, in order (for `recover`)
    self._eos = False  # EOS accepted

  # --- primitives ------------------------------------------------------------------------------

  def fill(self, out: np.ndarray, row: int) -> None:
    """The legal set into ``out[row]`` (C-contiguous int32 [N, W]), widened.

    A state whose continuation no token can spell (a dead end) puts llguidance's matcher in
    its permanent error state ("NoExtension..."): the row is then all zero and the matcher is
    rebuilt at the same position from the tokens fed so far, so rollback keeps working.
    """
    if self._eos:
      out[row] = 0
      return
    self.native.unsafe_compute_mask_ptr(out.ctypes.data + row * self._w * 4, self._w * 4)
    if self.native.is_error():
      msg = self.native.get_error()
      if "NoExtension" not in msg:
        raise RuntimeError(f"llguidance matcher error: {_lj.first_line(msg)}")
      out[row] = 0
      self.recover()
      return
    self.widen(out[row])

  def accept(self, token: int) -> bool:
    if self._eos:
      return False
    if token in self.eos_ids:
      if not self.native.is_accepting():
        return False
      self._eos = True
      return True
    if not self.native.consume_token(token):
      raise RuntimeError(f"llguidance refused token {token} that its mask allowed: "
                         f"{_lj.first_line(self.native.get_error())}")
    self._fed.append(token)
    return True

  def rollback(self, n: int) -> None:
    if n and self._eos:
      self._eos = False
      n -= 1
    if n:
      if not self.native.rollback(n):
        raise RuntimeError(f"llguidance rollback failed: "
                           f"{_lj.first_line(self.native.get_error())}")
      del self._fed[-n:]

  def is_terminated(self) -> bool:
    return self._eos

  def is_completed(self) -> bool:
    return self._eos or bool(self.native.is_accepting())

  def forced_hint(self, max_n: int) -> list[int]:
    """llguidance's fast-forward tokens (its forced bytes, tokenized by our greedy encoder and
    trimmed so that the last token cannot be extended into a different one); where that trim
    leaves nothing (e.g. ``{`` forced while ``{"`` is a token too), the forced bytes tokenized
    greedily by the longest ordinary token the matcher validates, as xgrammar's jump-forward
    does. Drafts only: the session keeps the prefix its masks allow, and the target verifies."""
    ff = [int(t) for t in self.native.compute_ff_tokens()]
    if not self.native.is_error() and not ff:
      ff = self._greedy_forced(bytes(self.native.compute_ff_bytes()), max_n)
    if self.native.is_error():
      if "NoExtension" not in self.native.get_error():
        raise RuntimeError(f"llguidance matcher error: "
                           f"{_lj.first_line(self.native.get_error())}")
      self.recover()  # a dead end forces nothing
      return []
    return ff

  def _greedy_forced(self, data: bytes, max_n: int) -> list[int]:
    """Whole ordinary tokens spelling a prefix of the forced bytes ``data``, longest first,
    each validated by the matcher after the ones before it (no side effect)."""
    table = self._ordinary_by_bytes()
    longest = max(map(len, table), default=1)
    out: list[int] = []
    pos = 0
    while pos < len(data) and len(out) < max_n:
      for n in range(min(longest, len(data) - pos), 0, -1):
        ids = table.get(data[pos:pos + n])
        if ids and self.native.validate_tokens(out + [ids[0]]) == len(out) + 1:
          out.append(ids[0])
          pos += n
          break
      else:
        break
    return out

  def accept_prefix(self, prefix: bytes) -> int:
    """Accepts ``prefix`` (tokenized greedily); on refusal the first refused byte.

    Raises:
      RuntimeError: the library hit a resource limit (not the prefix's fault).
    """
    index = self.compiled._index
    ids = index.encoder(prefix)
    spelled = b"".join(self.vocab.token_bytes[i] for i in ids)
    n = self.native.validate_tokens(ids) if ids else 0
    if n == len(ids) and spelled == prefix:
      if ids and not self.native.consume_tokens(ids):
        raise RuntimeError(f"llguidance refused a validated prefix: {self.native.get_error()}")
      self._fed.extend(ids)
      return len(prefix)
    # Locate the first refused byte: the validated tokens, then byte by byte on a copy.
    good = sum(len(self.vocab.token_bytes[i]) for i in ids[:n])
    probe = self.native.deep_copy()
    if n:
      probe.consume_tokens(ids[:n])
    while good < len(prefix):
      t = index.encoder.table.get(prefix[good:good + 1])
      if t is None or not probe.consume_token(t):
        break
      good += 1
    msg = probe.get_error() if probe.is_error() else ""
    if any(s in msg for s in _LIMIT_MESSAGES):  # the library's resources, not the prefix
      raise RuntimeError(f"llguidance hit a resource limit: {_lj.first_line(msg)}")
    return min(good, len(prefix) - 1)

  # --- library specifics -----------------------------------------------------------------------

  def recover(self) -> None:
    """A fresh library matcher fed with the same tokens (out of llguidance's error state)."""
    m = self.compiled._template.deep_copy()
    if self._fed and not m.consume_tokens(self._fed):
      raise RuntimeError(
          f"llguidance cannot replay its own tokens: {_lj.first_line(m.get_error())}")
    self.native = m

  def widen(self, row: np.ndarray) -> bool:
    """Adds the tokens that spell a strict prefix of the forced bytes (work-around).

    Where the grammar forces bytes, llguidance's mask keeps only tokens that cover them
    canonically and leaves out shorter tokens that spell a strict prefix of them (e.g. "mill"
    when "millions" is forced), although its byte-level check accepts those. The legal set is
    every token whose bytes can continue the output (as xgrammar and the trie compute it), so
    they are added back, each confirmed by the matcher's own byte-level validation.

    Returns:
      Whether any bit was added.
    """
    ff = self.native.compute_ff_bytes()
    if len(ff) < 2:
      return False
    table = self._ordinary_by_bytes()
    added = False
    for n in range(1, len(ff)):
      for t in table.get(ff[:n], ()):
        if not mask_layout.bit(row, t) and self.native.validate_tokens([t]) == 1:
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
    """Applies `widen` to masks [K+1, W] a batch fill computed for ``chain`` from the current
    state; True when that changed whether a draft is legal (the row must then be recomputed
    by `lookahead`). No side effect."""
    fed = 0
    try:
      for i in range(len(chain) + 1):
        if not masks[i].any():
          return False
        d = chain[i] if i < len(chain) else None
        before = d is not None and mask_layout.allows(masks[i], d, self._v)
        self.widen(masks[i])
        if d is None:
          return False
        now = mask_layout.allows(masks[i], d, self._v)
        if now != before:
          return True
        if not now or d in self.eos_ids:
          return False
        self.accept(d)
        fed += 1
      return False
    finally:
      self.rollback(fed)


class LLGuidanceSession(MatcherSession):
  """One request's llguidance matcher with the transactions of `MatcherSession`."""

  backend = NAME

  def __init__(self, compiled: Any, prefix: bytes | str = b"", **text):
    """See `MatcherSession` (``compiled``: a `CompiledLLGuidance`; ``text``: the UTF-8
    options, unused here: the library's masks are strict UTF-8 already)."""
    super().__init__(LLGuidanceMatcher(compiled), compiled, prefix, **text)

  @property
  def _m(self):
    """The library matcher (tests compare its byte-level check with the masks)."""
    return self.matcher.native
