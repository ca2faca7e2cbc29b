"""Framed sessions: one constraint session over the whole output, its decoder, the companion.

Axis letters (docs/CONTRACTS.md): K drafts, W mask words.

`DecodedSession` is the one wrapper: the constraint session of the framed grammar (any
backend's `MatcherSession`: its lookahead / preview / commit / discard and mask contract) plus
an output decoder. `FramedSession` (Qwen framing) and `hermes.HermesSession` are it, and the
Qwen one adds:

  * the output decoder, advanced only on commit (a preview decodes on a fork, so a call the
    decoder cannot read fails in preview, never after the model state moved);
  * the non-strict argument-name companion: in every lookahead mask and preview it refuses
    tokens that would complete a parameter name the open call already used, or close the
    call while a required parameter is missing;
  * forced control: `preview_forced_close()` previews the canonical ``\\n</think>\\n\\n``
    (thinking budget) through the same matcher; commit confirms it with the physical append.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

from infernix_jax import mask_layout
from infernix_jax.constrain import _utf8
from infernix_jax.constrain.framing import _args
from infernix_jax.constrain.framing.decoder import DecodedOutput, OutputDecoder
from infernix_jax.constrain.framing.grammar import FramedGrammar
from infernix_jax.constrain.framing.thinking import OutputPhase
from infernix_jax.constrain.session import PreviewResult

_PARAM_DELIM = (_args.VALUE_DELIMITER + "\n").encode()  # ends one parameter
_NAME = re.compile(rb"<parameter=([^<>\n]*)>")


class CompiledGrammarFacts:
  """What a compiled whole-output grammar reports from its `CompiledConstraint` (`grammar`):
  shared by the Qwen framing and the Hermes text framing."""

  grammar: Any

  @property
  def vocab(self):
    return self.grammar.vocab

  @property
  def cache_status(self) -> str:
    """``hit`` / ``built`` / ``waited`` of the compile call that returned it."""
    return self.grammar.cache_status

  @property
  def backend(self) -> str:
    """The registry name of the backend that compiled the grammar."""
    return self.grammar.backend

  @property
  def compile_seconds(self) -> float:
    return self.grammar.compile_seconds


@dataclasses.dataclass(frozen=True)
class CompiledFraming(CompiledGrammarFacts):
  """A compiled framed grammar plus the facts its sessions decode with.

  Attributes:
    framed: the language and decoding facts.
    grammar: the `CompiledConstraint` of the whole-output grammar (the request's backend,
      shared through the `ConstraintCompiler` cache).
  """
  framed: FramedGrammar
  grammar: Any

  def new_session(self) -> "FramedSession":
    """A new session (its own matcher, decoder and companion)."""
    return FramedSession(self)


class NameCompanion:
  """Tracks the canonical framing of non-strict calls: refuses a repeated parameter name, and
  the call's close while a required name is missing.

  Neither rule is context-free over an order-free name set, so this runs beside the matcher
  on the same transactions (lookahead on a copy, preview on a fork, commit keeps the fork).
  A refused close never empties a legal set: a missing required name is always writable.
  """

  def __init__(self, vocab, framing, nonstrict):
    """``nonstrict``: name -> the parameter names each call of that tool must contain."""
    self._bytes = vocab.token_bytes
    self._f = framing
    self._nonstrict = {n: frozenset(r) for n, r in dict(nonstrict).items()}
    self._candidates = vocab.lazy("framing.tokens_with_gt", lambda: np.array(
        [i for i, b in enumerate(vocab.token_bytes) if b">" in b and i not in vocab.control_ids],
        np.int64))
    # Tokens that may start a call's close right after a parameter (or open "/" after "<").
    self._closers = vocab.lazy("framing.tokens_closing", lambda: np.array(
        [i for i, b in enumerate(vocab.token_bytes)
         if (b.startswith(b"</") or b.startswith(b"/")) and i not in vocab.control_ids],
        np.int64))
    self.state = "out"
    self.head = b""
    self.tail = b""
    self.tail_named = False
    self.seen: set[bytes] = set()
    self.required: frozenset[bytes] = frozenset()

  def copy(self) -> "NameCompanion":
    c = object.__new__(NameCompanion)
    c.__dict__.update(self.__dict__)
    c.seen = set(self.seen)
    return c

  @property
  def active(self) -> bool:
    return self.state == "args"

  def candidates(self) -> np.ndarray:
    """Token ids `violates` may refuse now (the others never are)."""
    if self.required - self.seen and self.tail in (b"", b"<"):
      return np.union1d(self._candidates, self._closers)
    return self._candidates

  def advance(self, token: int) -> None:
    t = int(token)
    if t == self._f.tool_open:
      self.state, self.head = "head", b""
    elif t == self._f.tool_close or t in self._f.eos_ids:
      self.state = "out"
    elif self.state == "head":
      self.head += self._bytes[t]
      m = re.match(rb"\n<function=([^<>\n]*)>\n", self.head)
      if m:
        rest = self.head[m.end():]
        name = m.group(1).decode("utf-8", errors="replace")
        if name in self._nonstrict:
          self.state, self.tail, self.tail_named, self.seen = "args", b"", False, set()
          self.required = frozenset(r.encode() for r in self._nonstrict[name])
          self._args(rest)
        else:
          self.state = "strict"
    elif self.state == "args":
      self._args(self._bytes[t])

  def _names(self, data: bytes) -> tuple[list[bytes], bytes, bool]:
    """Names completed in ``tail + data`` (beyond the tail's own), the new tail and its flag."""
    segs = (self.tail + data).split(_PARAM_DELIM)
    names = []
    for k, seg in enumerate(segs):
      m = _NAME.match(seg)
      if m and not (k == 0 and self.tail_named):
        names.append(m.group(1))
    last = segs[-1]
    return names, last, bool(_NAME.match(last))

  def _args(self, data: bytes) -> None:
    names, self.tail, self.tail_named = self._names(data)
    self.seen.update(names)

  def violates(self, token: int) -> bool:
    """Whether ``token`` would complete a parameter name this call already used, or start
    the call's close (``</function>``) while a required name is missing."""
    if self.state != "args":
      return False
    names, last, _ = self._names(self._bytes[int(token)])
    if any(n in self.seen for n in names) or len(set(names)) < len(names):
      return True
    return last.startswith(b"</") and bool(self.required - self.seen - set(names))


class DecodedSession:
  """A constraint session plus an output decoder: the transactions once, for every framing.

  The constraint session's surface (lookahead / preview / commit / discard, flags,
  ``forced_tokens``), so the engine and `fill_batch` use it unchanged (``backend`` is the
  inner session's); the decoder advances only on commit (a preview decodes on a fork, so a
  call the decoder cannot read fails in preview, never after the model state moved). Decoded
  output is read from `result()` / `events`. Subclasses narrow the legal set through
  `_narrow_*` hooks (the defaults narrow nothing).
  """

  def __init__(self, inner, decoder):
    self._inner = inner
    self.backend = inner.backend
    self.decoder = decoder
    self._pending_decoder = None
    self._pending_events: list = []
    self.events: list = []  # events of the last commit

  # --- flags -----------------------------------------------------------------------------------

  terminated = property(lambda self: self._inner.terminated)
  complete = property(lambda self: self._inner.complete)
  can_continue = property(lambda self: self._inner.can_continue)
  previewing = property(lambda self: self._inner.previewing)

  @property
  def mask_session(self):
    """The constraint session whose masks are this session's (a batch fill runs its fast
    path on it), or None when this session narrows them."""
    return self._inner

  @property
  def branch(self) -> str:
    return self.decoder.branch

  def result(self) -> DecodedOutput:
    """The decoded committed output (reasoning, content, completed tool calls)."""
    return self.decoder.result()

  # --- masks -----------------------------------------------------------------------------------

  def fill_mask(self, out: np.ndarray) -> bool:
    """The committed state's legal set into ``out`` (int32 [W]); False when empty."""
    return self._inner.fill_mask(out)

  def lookahead(self, drafts, out: np.ndarray) -> np.ndarray:
    """Masks [K+1, W] into ``out`` and int8 states [K+1] for a draft chain (DESIGN.md 3)."""
    return self._inner.lookahead(drafts, out)

  def forced_tokens(self, max_n: int) -> list[int]:
    """Jump-forward tokens of the inner session (never EOS; may be [])."""
    return self._inner.forced_tokens(max_n)

  # --- transactions ----------------------------------------------------------------------------

  def preview(self, tokens) -> PreviewResult:
    """Provisionally accepts the produced tokens; decodes them on a fork (errors surface here).

    Raises:
      DecodeError: the grammar accepted output the decoder cannot read (internal error).
    """
    tokens = [int(t) for t in np.asarray(tokens).reshape(-1)]
    r = self._preview_inner(tokens)
    dec = self.decoder.fork()
    try:
      self._pending_events = dec.feed(tokens[:r.accepted])
    except Exception:
      self._inner.discard()
      self._drop_pending()
      raise
    self._pending_decoder = dec
    return r

  def _preview_inner(self, tokens: list[int]) -> PreviewResult:
    return self._inner.preview(tokens)

  def commit(self) -> None:
    """Confirms the preview: constraint session and decoder (checks nothing)."""
    if not self._inner.previewing:
      return
    self._inner.commit()
    self.decoder, self.events = self._pending_decoder, self._pending_events
    self._commit_extra()
    self._pending_decoder, self._pending_events = None, []

  def _commit_extra(self) -> None:
    pass

  def _drop_pending(self) -> None:
    self._pending_decoder, self._pending_events = None, []

  def discard(self) -> None:
    """Returns to the committed state."""
    self._inner.discard()
    self._drop_pending()

  def accept(self, tokens) -> PreviewResult:
    """preview + commit in one step (forced control, tests)."""
    r = self.preview(tokens)
    self.commit()
    return r


class FramedSession(DecodedSession):
  """One request's Qwen-framed output state: constraint session + decoder + name companion
  (never shared); `DecodedSession`'s surface plus the thinking controls."""

  def __init__(self, compiled: CompiledFraming):
    fg = compiled.framed
    self.compiled = compiled
    self.framed = fg
    self.vocab = compiled.vocab
    f = fg.framing
    # Reasoning is matched token by token (not required to be UTF-8): the strict UTF-8 filter
    # is off from <think> to </think>, and on for everything from the separator on.
    inner = compiled.grammar.new_session(
        utf8_switch={f.think_open: _utf8.FREE, f.think_close: _utf8.CLEAN},
        utf8_start=_utf8.FREE if fg.phase is OutputPhase.THINKING else _utf8.CLEAN)
    super().__init__(inner, OutputDecoder(self.vocab, fg.framing, fg.phase, fg.contracts,
                                          tools_active=fg.tools_active, constrained=True))
    nonstrict = {n: c.required for n, c in fg.contracts.items() if not c.strict}
    self.companion = NameCompanion(self.vocab, fg.framing, nonstrict) if nonstrict else None
    self._pending_companion: NameCompanion | None = None

  @property
  def mask_session(self):
    return self._inner if self.companion is None else None

  @property
  def in_reasoning(self) -> bool:
    """The committed output is inside the reasoning block (a thinking budget may close it)."""
    return self.decoder._state in ("start", "reasoning")

  # --- masks: the companion narrows the matcher's legal set --------------------------------------

  def fill_mask(self, out: np.ndarray) -> bool:
    ok = self._inner.fill_mask(out)
    if self.companion is not None and self.companion.active:
      self._filter(self.companion, out)
      ok = bool(out.any())
    return ok

  @staticmethod
  def _filter(comp: NameCompanion, words: np.ndarray) -> None:
    cand = comp.candidates()
    for t in cand[mask_layout.bits(words, cand)]:
      if comp.violates(int(t)):
        mask_layout.clear_bit(words, int(t))

  def lookahead(self, drafts, out: np.ndarray) -> np.ndarray:
    """Masks and states for a draft chain (DESIGN.md section 3), companion applied."""
    states = self._inner.lookahead(drafts, out)
    if self.companion is None:
      return states
    drafts = np.asarray(drafts).reshape(-1)
    comp = self.companion.copy()
    for i in range(len(states)):
      if states[i] != mask_layout.READY:
        break
      if comp.active:
        self._filter(comp, out[i])
        if not out[i].any():
          states[i] = mask_layout.DEAD_END
          states[i + 1:], out[i + 1:len(states)] = mask_layout.UNREACHABLE, 0
          break
      if i == len(drafts):
        break
      d = int(drafts[i])
      if not mask_layout.allows(out[i], d, self.vocab.size):  # illegal draft (an id outside
        # 0..V-1 included): position i stays Ready, the later ones Unreachable
        states[i + 1:], out[i + 1:len(states)] = mask_layout.UNREACHABLE, 0
        break
      comp.advance(d)
    return states

  def forced_tokens(self, max_n: int) -> list[int]:
    """Jump-forward tokens (the matcher's forced string), minus any the companion refuses."""
    toks = self._inner.forced_tokens(max_n)
    if self.companion is None:
      return toks
    comp = self.companion.copy()
    out = []
    for t in toks:
      if comp.violates(t):
        break
      comp.advance(t)
      out.append(t)
    return out

  # --- transactions: the companion runs on a fork --------------------------------------------------

  def _preview_inner(self, tokens: list[int]) -> PreviewResult:
    r = self._inner.preview(tokens)
    comp = self.companion.copy() if self.companion is not None else None
    if comp is not None:
      for j in range(r.accepted):
        if comp.violates(tokens[j]):
          self._inner.discard()
          r = self._inner.preview(tokens[:j])
          break
        comp.advance(tokens[j])
    self._pending_companion = comp
    return r

  def _commit_extra(self) -> None:
    if self._pending_companion is not None:
      self.companion = self._pending_companion
    self._pending_companion = None

  def _drop_pending(self) -> None:
    super()._drop_pending()
    self._pending_companion = None

  def preview_forced_close(self) -> PreviewResult:
    """Previews the canonical close ``\\n</think>\\n\\n`` (thinking budget; no sampling).

    The whole control string is previewed at once (not limited by K+1); commit() confirms it
    with the physical append. A forced and a natural close reach the same state.

    Raises:
      RuntimeError: the committed output is not inside reasoning, or the grammar refuses.
    """
    if not self.in_reasoning:
      raise RuntimeError("a forced thinking close needs the output to be inside reasoning")
    toks = self.forced_close_tokens()
    r = self.preview(toks)
    if r.accepted != len(toks):
      self.discard()
      raise RuntimeError(f"the framed grammar refused the forced close at token {r.accepted}")
    return r

  def forced_close_tokens(self) -> list[int]:
    """The token ids `preview_forced_close` previews (for the physical append)."""
    toks = self.framed.framing.forced_close_tokens()
    return ([self.framed.framing.think_open] + toks) if self.decoder._state == "start" else toks
