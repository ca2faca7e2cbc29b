"""A grammar-guided random walk over a framed session (validation and benchmark driver).

The grammar guarantees structure whatever the weights; this walker stands in for a model
when no weights are needed: at each step it draws a legal token from the session's mask with
a seeded generator, biased (after ``patience`` steps) toward tokens that close the current
structure, so walks end. Its choice is a pure function of (seed, position, recent output
bytes, legal set), so ordinary and speculative runs that reach the same state agree. It never
bypasses the mask: every token it returns is one the session allowed.
"""

from __future__ import annotations

import numpy as np

from infernix_jax import mask_layout

# Strings that end the usual open structures (raw value, call, JSON scalars and containers).
CLOSERS = ("\n</parameter>\n", "</function>\n", "0", '"', "]", "}", "true", "null")


class _Bits:
  """Membership test on a packed legal set (int32 [W])."""

  def __init__(self, words: np.ndarray):
    self._u = words.view(np.uint32)

  def __contains__(self, t: int) -> bool:
    return mask_layout.bit(self._u, t)


class LegalWalker:
  """Draws legal tokens for a framed session.

  Args:
    vocab: the Vocabulary.
    seed: walk seed.
    patience: position after which the walk prefers closing.
    tool_bias: probability of opening a call whenever ``<tool_call>`` is legal.
  """

  def __init__(self, vocab, seed: int, *, patience: int = 12, tool_bias: float = 0.9):
    self.vocab = vocab
    self.seed = seed
    self.patience = patience
    self.tool_bias = tool_bias
    def build():
      table: dict[bytes, int] = {}
      for i in range(vocab.size - 1, -1, -1):
        b = vocab.token_bytes[i]
        if b and i not in vocab.control_ids and i not in vocab.unused_ids:
          table[b] = i
      return table

    self._table = vocab.lazy("testing.framed_walk.table", build)

  def _prefix_token(self, text: bytes, legal: "_Bits") -> int | None:
    """The legal token spelling the longest prefix of ``text``."""
    for n in range(len(text), 0, -1):
      t = self._table.get(text[:n])
      if t is not None and t in legal:
        return t
    return None

  def choose(self, words: np.ndarray, position: int, tail: bytes = b"", *,
             tool_open: int | None = None, forced: list[int] | None = None,
             late_controls: tuple[int, ...] = (), allow_end: bool = True) -> int:
    """The walk's token at ``position`` given the legal set ``words`` (int32 [W]).

    Args:
      words: the packed legal set.
      position: output position (randomness key).
      tail: the last bytes of the output so far (to finish a closer it started).
      tool_open: the ``<tool_call>`` id, preferred when legal.
      forced: jump-forward tokens of this state (preferred when given).
      late_controls: control tokens to take when legal after ``patience`` (``</think>``).
      allow_end: whether EOS may be preferred (False: keep going, e.g. more calls wanted).
    """
    rng = np.random.default_rng([self.seed, position])
    allowed = np.flatnonzero(mask_layout.unpack(words[None], self.vocab.size)[0])
    if len(allowed) == 0:
      raise RuntimeError("dead end: no legal token")
    legal = _Bits(words)
    if tool_open is not None and tool_open in legal and rng.random() < self.tool_bias:
      return tool_open
    late = position >= self.patience
    if late:
      for t in (*(self.vocab.eos_ids if allow_end else ()), *late_controls):
        if t in legal:
          return t
      for s in CLOSERS:  # finish a closer the output already started
        s = s.encode()
        for k in range(min(len(s) - 1, len(tail)), 0, -1):
          if tail.endswith(s[:k]):
            t = self._prefix_token(s[k:], legal)
            if t is not None:
              return t
    if forced and (late or rng.random() < 0.5):
      return forced[0]
    if late or rng.random() < 0.3:
      for s in CLOSERS:
        t = self._prefix_token(s.encode(), legal)
        if t is not None:
          return t
    return int(allowed[rng.integers(len(allowed))])


def walk(session, walker: LegalWalker, *, max_tokens: int = 400) -> list[int]:
  """Ordinary (non-speculative) decoding of one output with the walker as the model.

  Returns:
    The committed token ids (ending with EOS when the walk completed).
  """
  buf = np.zeros((1, walker.vocab.mask_words), np.int32)
  out: list[int] = []
  for pos in range(max_tokens):
    if session.terminated:
      break
    session.lookahead([], out=buf)
    forced = session.forced_tokens(1)
    tail = walker.vocab.decode(out[-8:])[-16:]
    t = walker.choose(buf[0], pos, tail, **walker_hints(session))
    r = session.preview([t])
    if r.accepted != 1:
      raise RuntimeError(f"the session refused a token from its own mask: {t}")
    session.commit()
    out.append(t)
  return out


def walker_hints(session) -> dict:
  """Framing hints for `LegalWalker.choose` from a framed session's committed state."""
  f = session.framed.framing
  if session.in_reasoning:
    return {"late_controls": (f.think_close,)}
  return {"tool_open": f.tool_open}
