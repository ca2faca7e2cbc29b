"""The llguidance constraint backend: JSON Schema, GBNF, regex and choice through llguidance.

Axis letters (docs/CONTRACTS.md): R rows, K drafts, V vocabulary, W mask words.

The matcher library is imported lazily, here only (``import infernix_jax.constrain`` never
loads it; it loads no torch). How our constraints map onto it:

  ===========  ==========================================================================
  kind         what llguidance gets
  ===========  ==========================================================================
  json_schema  the user's schema through llguidance's own JSON Schema compiler
               (`_llguidance_json`): ``pattern``/``patternProperties`` rewritten to
               explicit ECMAScript classes; whitespace runs of at most ``max_whitespace``
               of ``[ \\t\\n\\r]`` between tokens (as xgrammar; 0 = none); ``\\u`` and
               ``\\/`` escapes disabled so every key has one spelling; ``lenient`` passed
               as its ``lenient`` option, dropped keywords read back from its warnings
  json_object  the schema ``{"type": "object"}`` with the same options
  grammar      GBNF checked by our GBNF checker, converted to Lark with one character per
               lexeme (`_llguidance_gbnf`; llguidance's own converter makes greedy
               multi-character terminals, which lose strings and can hang the matcher)
  regex        the exact pattern our ECMAScript-style checker emits (``_regex``)
  choice       the canonical literal set as one alternation of escaped literals
  ===========  ==========================================================================

Token facts come from our Vocabulary, never from Hugging Face files: ordinary tokens are
their exact bytes; EOS and control tokens are spelled ``0xFF`` + their spelling, which is
llguidance's special-token marker (0xFF never occurs in UTF-8, so no text rule matches them;
EOS is legal exactly when the grammar may end); unused ids are empty and never legal.

The legal set is llguidance's mask, widened where the grammar forces bytes: there the
library keeps only the canonical cover and leaves out tokens that spell a strict prefix of
the forced bytes, although its byte-level check accepts them; the session adds them back
(`LLGuidanceMatcher.widen`), so the legal set equals xgrammar's and greedy decoding commits
the same tokens. Sessions check tokens against these masks (preview, jump-forward), so
lookahead, preview and fill_batch agree.

Sessions (`_llguidance_session.LLGuidanceSession`, re-exported here) are `MatcherSession`s over
the primitives of `_llguidance_session.LLGuidanceMatcher`.
EOS is never fed to the llguidance matcher: a session records "EOS accepted" itself. (When
the grammar cannot extend, llguidance takes EOS without recording it on its token stack, so
a later rollback would undo one token too many.) An illegal token is never fed either
(llguidance's matcher stays in an error state forever after one). A dead end (no token can
continue) also puts it in that state when its mask is computed: the session then reports an
all-zero mask and rebuilds the matcher by replaying the tokens it fed.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, ClassVar, Sequence

import numpy as np

from infernix_jax import mask_layout
from infernix_jax.constrain import errors
from infernix_jax.constrain.backends.base import BuildResult
from infernix_jax.constrain.backends import _llguidance_json as _lj
from infernix_jax.constrain.backends._llguidance_gbnf import gbnf_to_lark as _gbnf_to_lark
from infernix_jax.constrain.backends._llguidance_session import LLGuidanceSession
from infernix_jax.constrain.spec import ConstraintKind, OutputConstraint
from infernix_jax.constrain.vocab import CONTROL, EOS, ORDINARY, Vocabulary

NAME = "llguidance"
READY, DEAD_END, UNREACHABLE = mask_layout.READY, mask_layout.DEAD_END, mask_layout.UNREACHABLE
SPECIAL_MARKER = b"\xff"  # llguidance's special-token prefix (never valid UTF-8)
# Bytes charged per compiled grammar on top of its text: llguidance reports no compiled size
# (its lexer automaton grows lazily while sessions run), so the cache budget uses an estimate.
COMPILED_OVERHEAD_BYTES = 64 * 1024

# llguidance builds lexer states lazily, into a store that every copy of a compiled matcher
# (so every session of one compiled constraint) shares, within two budgets: "initial lexer
# fuel" (default 1e6) and the fuel of one mask step (default 2e5, about 14 ms). A length-
# bounded word pattern from JSONSchemaBench (maxLength 500 + "(\\S+\\s+){0,49}\\S+") ran out
# of both after a few words ("too many expressions constructed"), which fails the session.
# 50x / 10x keep such schemas usable; a step may then take up to ~150 ms the first time a
# state is built. The store is not counted in `nbytes`.
LEXER_FUEL = 50_000_000
STEP_LEXER_FUEL = 2_000_000
# A framed grammar's free text and raw values are right-recursive rules of one-character
# lexemes (`_llguidance_gbnf`), whose Earley items grow with the text's length: a
# mask step of a few hundred characters of content passes llguidance's defaults (50,000 items
# per step, 2,000 per row), so framed grammars get these.
FRAMED_STEP_ITEMS = 2_000_000
FRAMED_ROW_ITEMS = 200_000

_import_lock = threading.Lock()
_executor_lock = threading.Lock()
_executor: Any = None


def _llg():
  """The llguidance module (imported on first use)."""
  with _import_lock:
    import llguidance

    return llguidance


def _limits(framed: bool = False):
  if framed:
    return _llg().LLParserLimits(verbose_errors=False, initial_lexer_fuel=LEXER_FUEL,
                                 step_lexer_fuel=STEP_LEXER_FUEL,
                                 step_max_items=FRAMED_STEP_ITEMS,
                                 max_items_in_row=FRAMED_ROW_ITEMS)
  return _llg().LLParserLimits(verbose_errors=False, initial_lexer_fuel=LEXER_FUEL,
                               step_lexer_fuel=STEP_LEXER_FUEL)


def version() -> str:
  """The installed llguidance version."""
  return _llg().__version__


# --- vocabulary ------------------------------------------------------------------------------


class _Encoder:
  """Greedy longest-match tokenizer over ordinary tokens (what llguidance calls to re-tokenize
  forced bytes). Never raises: a byte no ordinary token starts with is skipped."""

  def __init__(self, vocab: Vocabulary):
    table: dict[bytes, int] = {}
    cls = vocab.token_class
    for i in range(vocab.size - 1, -1, -1):
      b = vocab.token_bytes[i]
      if cls[i] == ORDINARY and b and not b.startswith(SPECIAL_MARKER):
        table[b] = i
    self.table = table
    self.longest = max((len(b) for b in table), default=1)

  def __call__(self, data) -> list[int]:
    if isinstance(data, str):
      data = data.encode("utf-8", errors="surrogatepass")
    out: list[int] = []
    pos, n = 0, len(data)
    while pos < n:
      for k in range(min(self.longest, n - pos), 0, -1):
        t = self.table.get(data[pos:pos + k])
        if t is not None:
          out.append(t)
          pos += k
          break
      else:
        pos += 1
    return out


class _TokenizerSource:
  """The object ``llguidance.TokenizerWrapper`` reads (tokens, EOS, encoder)."""

  def __init__(self, vocab: Vocabulary, encoder: _Encoder):
    cls = vocab.token_class
    tokens = []
    for i, b in enumerate(vocab.token_bytes):
      if cls[i] == ORDINARY and not b.startswith(SPECIAL_MARKER):
        tokens.append(b)
      elif cls[i] in (CONTROL, EOS) or (cls[i] == ORDINARY and b):
        # Special: never matched by text. An ordinary token starting with 0xFF is not UTF-8
        # either, so no constraint of ours can spell it; marking it special is exact.
        tokens.append(SPECIAL_MARKER + (b if b else b"<|id%d|>" % i))
      else:
        tokens.append(b"")  # unused: empty, never legal
    self.tokens = tokens
    self.eos_token_id = vocab.eos_ids[0] if vocab.eos_ids else None
    self.bos_token_id = None
    self.special_token_ids = [i for i, t in enumerate(tokens) if t.startswith(SPECIAL_MARKER)]
    self._encode = encoder

  def __call__(self, data) -> list[int]:
    return self._encode(data)


@dataclasses.dataclass(frozen=True)
class _VocabIndex:
  tokenizer: Any  # llguidance.LLTokenizer
  encoder: _Encoder
  eos: frozenset


def vocab_index(vocab: Vocabulary) -> _VocabIndex:
  """llguidance's tokenizer for ``vocab``, built once per vocabulary (thread-safe, lazy)."""

  def build():
    llg = _llg()
    encoder = _Encoder(vocab)
    src = _TokenizerSource(vocab, encoder)
    eos = list(vocab.eos_ids)
    tok = llg.LLTokenizer(llg.TokenizerWrapper(src), n_vocab=vocab.size,
                          eos_token=eos if eos else None)
    return _VocabIndex(tok, encoder, frozenset(eos))

  return vocab.lazy("llguidance.LLTokenizer", build)


def _executor_for() -> Any:
  global _executor
  with _executor_lock:
    if _executor is None:
      _executor = _llg().LLExecutor()
    return _executor


# --- compile ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class CompiledLLGuidance:
  """An immutable compiled constraint: the grammar and a pristine matcher sessions copy.

  Attributes:
    vocab: the token domain.
    constraint: what was compiled.
    compiled_source: the llguidance grammar text (JSON: ``{"grammars": [...]}``).
    dropped: ``(json_pointer, keyword)`` of each keyword ignored under ``lenient=True``.
    nbytes: estimated bytes (grammar text + a fixed overhead; llguidance reports no size).
  """

  vocab: Vocabulary
  constraint: OutputConstraint
  compiled_source: str
  dropped: tuple
  nbytes: int
  _template: Any = dataclasses.field(repr=False)  # a pristine matcher; sessions deep-copy it
  _index: Any = dataclasses.field(repr=False)  # the vocabulary's `_VocabIndex`

  def new_session(self, prefix: bytes | str = b"") -> "LLGuidanceSession":
    """A session positioned after the continuation ``prefix`` (PrefixError)."""
    return LLGuidanceSession(self, prefix)


def _regex_literal(text: str) -> str:
  """A regex matching exactly ``text`` (every non-alphanumeric character escaped)."""
  return "".join(ch if ch.isascii() and ch.isalnum() else "\\x{%X}" % ord(ch) for ch in text)


def _grammar_for(c: OutputConstraint) -> tuple[str, Any, type]:
  """(llguidance grammar text, parsed schema or None, error class for compile failures)."""
  llg = _llg()
  kind = ConstraintKind(c.kind)
  if kind in (ConstraintKind.JSON_SCHEMA, ConstraintKind.JSON_OBJECT):
    from infernix_jax.constrain.schema import check as _schema

    if kind == ConstraintKind.JSON_OBJECT:
      doc: Any = {"type": "object"}
    else:
      doc = _schema.parse_schema_text(c.source)
      if doc is True:
        doc = {}
      elif doc is False:
        raise errors.SchemaError("no JSON value satisfies this schema (it is false)", "")
      elif not isinstance(doc, dict):
        raise errors.SchemaError("a JSON Schema must be an object or a boolean", "")
    text = _schema.dumps(_lj.rewrite_patterns(doc, ""))
    try:
      grammar = llg.LLMatcher.grammar_from_json_schema(text, overrides=_lj.json_options(c))
    except ValueError as e:
      if "out of range" in str(e):
        raise errors.UnsupportedConstraintError(NAME, "numbers beyond double range",
                                                _lj.first_line(e)) from None
      raise errors.SchemaError(f"llguidance cannot read the schema: {_lj.first_line(e)}",
                               "") from None
    return grammar, doc, errors.SchemaError
  if kind == ConstraintKind.GRAMMAR:
    from infernix_jax.constrain import _gbnf

    if not isinstance(c.source, str):
      raise errors.GrammarSyntaxError(f"a grammar must be a string, got {type(c.source).__name__}")
    # A framed grammar is generated by constrain.framing (Token(id) rules): no user-level check.
    text = c.source if c.framing else _gbnf.check_gbnf(c.source)
    try:
      lark = _gbnf_to_lark(text)
    except ValueError as e:
      raise errors.UnsupportedConstraintError(NAME, "this GBNF grammar", str(e)) from None
    return llg.LLMatcher.grammar_from_lark(lark), None, errors.GrammarSyntaxError
  if kind == ConstraintKind.REGEX:
    from infernix_jax.constrain import _regex

    if not isinstance(c.source, str):
      raise errors.RegexError(f"a regex must be a string, got {type(c.source).__name__}")
    return llg.LLMatcher.grammar_from_regex(_regex.check_regex(c.source)), None, errors.RegexError
  if kind == ConstraintKind.CHOICE:
    from infernix_jax.constrain import _choice

    values = _choice.canonical_choices(c.source)
    rx = "(?:" + "|".join(_regex_literal(v) for v in values) + ")"
    return llg.LLMatcher.grammar_from_regex(rx), None, errors.ChoiceError
  raise errors.UnsupportedConstraintError(NAME, f"constraint kind {c.kind!r}")


# --- backend ---------------------------------------------------------------------------------


class LLGuidanceBackend:
  """llguidance behind the `ConstraintBackend` interface (a stateless singleton)."""

  name: ClassVar[str] = NAME
  exports_automaton: ClassVar[bool] = False  # masks are host lookahead only

  def check(self, constraint: OutputConstraint) -> None:
    """Refuses what this backend cannot express, without compiling.

    Raises:
      UnsupportedConstraintError: an unknown constraint kind, or framing on anything but a
        grammar (framed grammars come from `constrain.framing`).
    """
    try:
      kind = ConstraintKind(constraint.kind)
    except ValueError:
      raise errors.UnsupportedConstraintError(NAME, f"constraint kind {constraint.kind!r}") \
          from None
    if constraint.framing and kind != ConstraintKind.GRAMMAR:
      raise errors.UnsupportedConstraintError(
          NAME, f"framed {kind.value} constraints", "framing applies to whole framed grammars "
          "only; pass the content to infernix_jax.constrain.framing")

  def build(self, vocab: Vocabulary, constraint: OutputConstraint) -> BuildResult:
    """Validates and compiles ``constraint`` for ``vocab`` (uncached).

    Returns:
      A `BuildResult` whose grammar is a `CompiledLLGuidance`.

    Raises:
      ConstraintError: invalid input (GrammarSyntaxError, SchemaError, RegexError,
        ChoiceError) or a construct llguidance cannot express (UnsupportedConstraintError).
    """
    if not isinstance(constraint, OutputConstraint):
      raise TypeError(f"expected an OutputConstraint, got {type(constraint).__name__}")
    self.check(constraint)
    if constraint.max_whitespace < 0:
      raise errors.FeatureConflictError(f"max_whitespace={constraint.max_whitespace} must be >= 0")
    llg = _llg()
    index = vocab_index(vocab)
    grammar, doc, error_cls = _grammar_for(constraint)
    is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(
        grammar, index.tokenizer, limits=_limits(bool(constraint.framing)))
    if is_error:
      raise self._error(error_cls, messages[0] if messages else "invalid grammar", doc)
    template = llg.LLMatcher(index.tokenizer, grammar, log_level=0,
                             limits=_limits(bool(constraint.framing)))
    if template.is_error():
      raise self._error(error_cls, template.get_error(), doc)
    dropped = _lj.dropped(messages, doc) if constraint.lenient else ()
    buf = np.zeros(vocab.mask_words, np.int32)
    template.unsafe_compute_mask_ptr(buf.ctypes.data, buf.nbytes)
    if template.is_error():
      raise self._error(error_cls, template.get_error(), doc)
    if not buf.any():
      cls = errors.SchemaError if error_cls is errors.SchemaError else errors.ConstraintError
      raise cls("no output satisfies this constraint with this vocabulary (the first position "
                "has no legal token)", "" if cls is errors.SchemaError else None)
    nbytes = len(grammar.encode("utf-8")) + COMPILED_OVERHEAD_BYTES
    compiled = CompiledLLGuidance(vocab, constraint, grammar, dropped, nbytes, template, index)
    return BuildResult(grammar=compiled, nbytes=nbytes, compiled_source=grammar, dropped=dropped)

  @staticmethod
  def _error(error_cls: type, msg: str, doc: Any) -> errors.ConstraintError:
    if error_cls is errors.SchemaError:
      return _lj.schema_error(msg, doc)
    if any(s in msg for s in ("too complex", "limit", "too large", "too many", "fuel")):
      return errors.UnsupportedConstraintError(NAME, "a grammar this large", _lj.first_line(msg))
    if error_cls is errors.GrammarSyntaxError:
      # Our GBNF checker accepted the syntax: what llguidance refuses is a construct.
      return errors.UnsupportedConstraintError(NAME, "this GBNF grammar", _lj.first_line(msg))
    return error_cls(f"llguidance cannot compile it: {_lj.first_line(msg)}")

  def new_session(self, compiled: Any, prefix: bytes = b"", **text) -> "LLGuidanceSession":
    """A session on ``compiled`` (a `CompiledConstraint` of this backend, or its
    `CompiledLLGuidance`) positioned after the continuation ``prefix`` (PrefixError);
    ``text``: the UTF-8 options of `MatcherSession` (no effect: masks are strict already)."""
    if not isinstance(compiled, CompiledLLGuidance):
      compiled = compiled.grammar
    return LLGuidanceSession(compiled, prefix, **text)

  def fill_batch(self, sessions: Sequence["LLGuidanceSession | None"], drafts: np.ndarray,
                 n_drafts: np.ndarray, out: np.ndarray, *, threads: int = 0) -> np.ndarray:
    """Lookahead of many sessions in one llguidance executor call (its thread pool).

    Args:
      sessions: B entries, this backend's sessions or None (rows left untouched).
      drafts: i32[B, K]; n_drafts: i32[B] real extent per row (0..K).
      out: C-contiguous int32 [B, K+1, W]; every position of a session row is written.
      threads: unused (the executor's own pool serves every call).

    Returns:
      int8 [B, K+1] states of the session rows, exactly what per-row `lookahead` gives.
    """
    r = len(sessions)
    drafts = np.asarray(drafts)
    n_drafts = np.asarray(n_drafts).reshape(-1)
    if out.ndim != 3 or out.shape[0] != r:
      raise ValueError(f"out {out.shape} must be [R={r}, K+1, W]")
    if not out.flags.c_contiguous or out.dtype != np.int32 or not out.flags.writeable:
      raise ValueError("out must be a C-contiguous writable int32 array")
    p = out.shape[1]
    states = np.full((r, p), UNREACHABLE, np.int8)
    jobs, rows = [], []
    for b, s in enumerate(sessions):
      if s is None:
        continue
      out[b] = 0
      n = int(n_drafts[b])
      if not 0 <= n <= p - 1:
        raise ValueError(f"n_drafts[{b}]={n} must be in 0..{p - 1}")
      core = s if isinstance(s, LLGuidanceSession) else getattr(s, "mask_session", None)
      if not isinstance(core, LLGuidanceSession):
        if getattr(s, "backend", None) != NAME:
          raise TypeError(f"row {b}: not an llguidance session ({type(s).__name__})")
        states[b, :n + 1] = s.lookahead(drafts[b, :n], out[b, :n + 1])  # a wrapper's own
        continue
      if core.previewing:
        raise RuntimeError(f"row {b}: lookahead while a preview is uncommitted")
      if core.terminated:
        continue
      m = core.matcher
      chain = [int(t) for t in drafts[b, :n]]
      # llguidance walks the chain itself; stop it before EOS (never fed) and ids >= V.
      v = core.vocab.size
      cut = next((i for i, t in enumerate(chain) if t in m.eos_ids or not 0 <= t < v),
                 len(chain))
      jobs.append((m.native, b * p, chain[:cut]))
      rows.append((b, core, chain))
    if jobs:
      flat = out.reshape(r * p, out.shape[2])
      executor = _executor_for()
      chains = [j for j in jobs if j[2]]  # the library refuses an empty draft list
      bare = [(m, at) for m, at, c in jobs if not c]
      if chains:
        executor.unsafe_compute_mask_ptr_with_draft_token(chains, flat.ctypes.data,
                                                          out.shape[2] * 4, r * p)
      if bare:
        executor.unsafe_compute_mask_ptr(bare, flat.ctypes.data, out.shape[2] * 4, r * p)
    for b, core, chain in rows:
      m = core.matcher
      if m.native.is_error():
        if "NoExtension" not in m.native.get_error():
          raise RuntimeError(f"row {b}: llguidance matcher error: "
                             f"{_lj.first_line(m.native.get_error())}")
        # A dead end inside the chain left the library's matcher in its error state:
        # rebuild it and redo this row on its own (lookahead handles dead ends).
        m.recover()
        states[b, :len(chain) + 1] = core.lookahead(chain, out[b])
        continue
      if m.widen_chain(out[b], chain):  # a prefix-of-forced-bytes draft: redo the row
        states[b, :len(chain) + 1] = core.lookahead(chain, out[b])
        continue
      states[b] = _states_from_masks(out[b], chain, core.vocab.size, m.eos_ids)
    return states


def _states_from_masks(masks: np.ndarray, chain: list, v: int, eos_ids: frozenset) -> np.ndarray:
  """Lookahead states of one row given its filled masks [K+1, W]; zeroes the filler rows."""
  p = masks.shape[0]
  states = np.full(p, UNREACHABLE, np.int8)
  k = len(chain)
  for i in range(k + 1):
    if not masks[i].any():
      states[i] = DEAD_END
      masks[i + 1:] = 0
      break
    states[i] = READY
    if i == k:
      masks[i + 1:] = 0
      break
    d = chain[i]
    if not mask_layout.allows(masks[i], d, v) or d in eos_ids:
      masks[i + 1:] = 0
      break
  return states
