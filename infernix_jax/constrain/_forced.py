"""Jump-forward proposals of the session core: the tokens a constraint forces next.

Axis letters (docs/CONTRACTS.md): V vocabulary, W mask words. A mix-in of `MatcherSession`
(it reads the session's matcher, UTF-8 state and mask fill; it changes nothing persistent).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from infernix_jax.constrain._masks import ordinary_table


class ForcedTokens:
  """`forced_tokens` over a `MatcherSession`'s primitives (see there for the attributes)."""

  def forced_tokens(self, max_n: int) -> list[int]:
    """Tokens the grammar forces next, for jump-forward drafting (may be ``[]``).

    Method: the matcher's native forced tokens where it has them (``forced_hint``), cut to
    the prefix whose tokens the masks allow; else its forced bytes (``forced_bytes``: the
    longest byte string every legal continuation starts with) tokenised greedily by the
    longest ordinary token whose bytes prefix the remaining forced bytes and that the matcher
    accepts. Only whole tokens inside the forced string are proposed, so each is legal; which
    tokenisation the target prefers is left to verification (the drafts are one-hot and
    verified, so output stays exact). Never proposes EOS. No persistent side effect. When the
    forced bytes end inside a UTF-8 sequence (``forced_bytes`` gives None) the fallback is a
    single-legal-token walk (accept while exactly one non-EOS token is legal).
    """
    if max_n <= 0 or self._pending is not None or self._is_terminated():
      return []
    hint = getattr(self.matcher, "forced_hint", None)
    if hint is not None:
      return self._legal_hint(hint(max_n)[:max_n])
    data = self.matcher.forced_bytes()
    if data is None:
      return self._single_legal_walk(max_n)
    if not data:
      return []
    table, longest = ordinary_table(self.vocab)
    tab, u8 = self._utf8, self._u8
    out: list[int] = []
    pos = 0
    try:
      while pos < len(data) and len(out) < max_n:
        for n in range(min(longest, len(data) - pos), 0, -1):
          t = table.get(data[pos:pos + n])
          if t is not None and (tab is None or tab.ok(u8, t)) and self._accept_token(t):
            out.append(t)
            u8 = self._next_u8(u8, t)
            pos += n
            break
        else:
          break
    finally:
      if out:
        self._rollback(len(out))
    return out

  def _legal_hint(self, toks: Sequence[int]) -> list[int]:
    """The prefix of ``toks`` (no EOS, no id >= V) each of whose tokens the mask of the state
    before it allows (accepted, then rolled back)."""
    buf = self._scratch
    u8 = self._u8
    out: list[int] = []
    try:
      for t in toks:
        t = int(t)
        if t in self._eos_set or not 0 <= t < self._v:
          break
        if out:
          self._fill(buf, 0, u8)
          words = buf
        else:
          words = self._frontier_mask()
        if not (words.item(0, t >> 5) >> (t & 31)) & 1 or not self._accept_token(t):
          break
        out.append(t)
        u8 = self._next_u8(u8, t)
    finally:
      if out:
        self._rollback(len(out))
    return out

  def _single_legal_walk(self, max_n: int) -> list[int]:
    """Tokens accepted while the legal set is exactly one non-EOS token (then rolled back)."""
    buf = np.zeros((1, self._w), np.int32)
    u8 = self._u8
    out: list[int] = []
    try:
      while len(out) < max_n and not self._is_terminated():
        self._fill(buf, 0, u8)
        nz = np.flatnonzero(buf[0])
        if len(nz) != 1:
          break
        word = int(buf[0, nz[0]]) & 0xFFFFFFFF
        if word & (word - 1):
          break
        t = int(nz[0]) * 32 + word.bit_length() - 1
        if t in self._eos_set or not self._accept_token(t):
          break
        out.append(t)
        u8 = self._next_u8(u8, t)
    finally:
      if out:
        self._rollback(len(out))
    return out
