"""Strict UTF-8 over token masks: per-vocabulary continuation tables and the decoder state.

xgrammar 0.2.8 compiles character classes to byte ranges that include the UTF-16 surrogates
U+D800..U+DFFF, encoded ``ED A0..BF xx``: strict UTF-8 (RFC 3629) forbids them, and a
byte-level vocabulary can spell them with partial-UTF-8 tokens (Qwen3: ``"`` then ``\\xed`` then
``\\xa1``). It happens wherever a class reaches the surrogate block: the JSON string and key
class, negated GBNF classes, ``.`` and wide ranges in regex. Overlongs, code points above
U+10FFFF and a continuation byte where a character starts are refused by xgrammar itself.

The work-around runs in our sessions, beside the matcher. The session keeps the decoder state
at the end of its output: `CLEAN` (no pending sequence) or one of seven pending states, each
saying how many continuation bytes are still due and the range the next one must fall in
(after a lone ``ED`` the next byte is ``80..9F``). The per-vocabulary `Utf8Tables` say, for
each pending state, which tokens continue it validly (a packed mask), and for each token the
state after it. In a pending state every mask is ANDed with that state's mask (a few
microseconds for W = 4,740); in the clean state nothing is done unless the vocabulary holds
tokens that are invalid by themselves without starting on a continuation byte (none in
Qwen3), whose bits are then cleared. A pending state also refuses EOS and control tokens: the
output never ends, nor enters framing, inside a character. A third kind of state, `FREE`,
filters nothing: framing's reasoning is matched token by token (any token but ``</think>``,
deliberately not required to be UTF-8), and the framed session switches to it at ``<think>``
and back to `CLEAN` at ``</think>``.
"""

from __future__ import annotations

import numpy as np

from infernix_jax import mask_layout
from infernix_jax.constrain.vocab import ORDINARY

CLEAN = 0
ERROR = -1
# Pending state s: NEED[s] continuation bytes still due, the next one in LO[s]..HI[s]. States
# 1..3 are "k more of 80..BF" (so state NEED[s] - 1 follows a valid byte); 4..7 are the lead
# bytes that narrow their first continuation (E0, ED, F0, F4).
NEED = (0, 1, 2, 3, 2, 2, 3, 3)
LO = (0, 0x80, 0x80, 0x80, 0xA0, 0x80, 0x90, 0x80)
HI = (0, 0xBF, 0xBF, 0xBF, 0xBF, 0x9F, 0xBF, 0x8F)
N_STATES = len(NEED)
FREE = N_STATES  # no text rule applies (framing's token-level reasoning): nothing is filtered


def pending(state: int) -> bool:
  """Whether ``state`` is inside a character (the output may neither end nor enter framing)."""
  return CLEAN < state < FREE


def _lead(b: int) -> int:
  """The state after byte ``b`` where a character starts (ERROR for 80..C1 and F5..FF)."""
  if b < 0x80:
    return CLEAN
  if 0xC2 <= b <= 0xDF:
    return 1
  if b == 0xE0:
    return 4
  if b == 0xED:
    return 5
  if 0xE1 <= b <= 0xEF:
    return 2
  if b == 0xF0:
    return 6
  if b == 0xF4:
    return 7
  if 0xF1 <= b <= 0xF3:
    return 3
  return ERROR


def advance(state: int, data: bytes) -> tuple[int, int]:
  """Feeds ``data`` to a strict UTF-8 decoder in ``state``.

  Returns:
    ``(state after data, index of the first invalid byte)``; the state is ERROR and the
    index valid only when ``data`` does not continue ``state`` as strict UTF-8 (else -1).
  """
  for i, b in enumerate(data):
    if state == CLEAN:
      state = _lead(b)
    elif LO[state] <= b <= HI[state]:
      state = NEED[state] - 1
    else:
      state = ERROR
    if state == ERROR:
      return ERROR, i
  return state, -1


class Utf8Tables:
  """How each token of one vocabulary continues each decoder state (immutable, shared).

  Attributes:
    allowed: int32 [N_STATES, W]; row s > 0 = the tokens valid in pending state s (EOS,
      control and unused ids never; spare bits 0). Row 0 is unused.
    clean_bad: int64 [n] ordinary tokens that start like a character (ASCII or a lead byte
      C2..F4) yet are invalid UTF-8 by themselves, e.g. ``ED A0``: cleared in the clean state
      (empty for Qwen3). Tokens starting on a continuation byte or on C0, C1, F5..FF cannot
      start a character, and xgrammar refuses them where one starts.
  """

  def __init__(self, vocab):
    v = vocab.size
    cls = vocab.token_class
    first = np.zeros(v, np.int32)   # first byte
    lead = np.zeros(v, np.int32)    # leading continuation bytes (counted up to 4)
    rest_ok = np.ones(v, bool)      # the bytes after them continue a clean state
    tail = bytearray(v)             # state after the token (when it has a non-continuation byte)
    conts = bytearray(v)            # length of an all-continuation token (1..4), else 0
    ordinary = cls == ORDINARY
    for i in np.flatnonzero(ordinary).tolist():
      b = vocab.token_bytes[i]
      if not b:
        continue
      first[i] = b[0]
      k = 0
      while k < len(b) and k < 4 and 0x80 <= b[k] <= 0xBF:
        k += 1
      lead[i] = k
      if k == len(b) or (k == 4 and all(0x80 <= c <= 0xBF for c in b)):
        conts[i] = min(len(b), 4)
        continue
      rest = b[k:]
      try:
        rest.decode("utf-8")
        continue  # complete characters: ends clean
      except UnicodeDecodeError:
        pass
      s, _ = advance(CLEAN, rest)
      if s == ERROR:
        rest_ok[i] = False
      else:
        tail[i] = s
    conts_a = np.frombuffer(bytes(conts), np.uint8)
    self.allowed = np.zeros((N_STATES, vocab.mask_words), np.int32)
    for s in range(1, N_STATES):
      in_range = (first >= LO[s]) & (first <= HI[s])
      partial = (conts_a > 0) & (conts_a <= NEED[s])  # continues, does not complete
      whole = (conts_a == 0) & (lead == NEED[s]) & rest_ok  # completes, then valid text
      self.allowed[s] = mask_layout.pack(ordinary & in_range & (partial | whole))
    starts = (first < 0x80) | ((first >= 0xC2) & (first <= 0xF4))
    self.clean_bad = np.flatnonzero(ordinary & starts & ~rest_ok).astype(np.int64)
    self._clean_bad_set = frozenset(self.clean_bad.tolist())
    words = self.clean_bad >> 5
    self._bad_words = np.unique(words)  # [n] words holding such tokens, and their kept bits
    keep = np.full(self._bad_words.size, 0xFFFFFFFF, np.uint32)
    for t, w in zip(self.clean_bad.tolist(), np.searchsorted(self._bad_words, words).tolist()):
      keep[w] &= np.uint32(0xFFFFFFFF ^ (1 << (t & 31)))
    self._bad_keep = keep
    self.tail = bytes(tail)
    self.conts = bytes(conts)

  def filter(self, words: np.ndarray, state: int) -> None:
    """Removes from ``words`` ([W] or [1, W], in place) every token invalid in ``state``."""
    if state == CLEAN:
      if self.clean_bad.size:
        words.reshape(-1).view(np.uint32)[self._bad_words] &= self._bad_keep
    elif state != FREE:
      np.bitwise_and(words, self.allowed[state], out=words)

  def ok(self, state: int, token: int) -> bool:
    """Whether ``token`` continues ``state`` as strict UTF-8 (what `filter` keeps)."""
    if state == CLEAN:
      return token not in self._clean_bad_set
    return state == FREE or mask_layout.bit(self.allowed[state], token)

  def next_state(self, state: int, token: int) -> int:
    """The state after ``token`` (which `ok` accepted) in ``state``."""
    if state == FREE:
      return FREE
    if state:
      c = self.conts[token]
      if c and c < NEED[state]:
        return NEED[state] - c
    return self.tail[token]


def tables(vocab) -> Utf8Tables:
  """The vocabulary's `Utf8Tables`, built once (thread-safe, lazy)."""
  return vocab.lazy("constrain.utf8", lambda: Utf8Tables(vocab))

