"""ConstraintCompiler: validation + compilation behind a byte-budgeted, shared compile cache.

Cache key = kind + canonical source (JSON parsed and re-serialized order-preserving; choice =
the deduplicated literal set; GBNF/regex = the text) + options (lenient, whitespace run) +
framing + vocabulary identity. A continuation prefix is never part of the key (it only
advances a new matcher). Behaviour (reference 000, compile cache):

  * a hit returns the shared immutable compiled grammar without parsing or converting again
    (the exact source text is looked up first; canonicalisation runs only on a miss of it);
  * concurrent cold compiles of the same key share one build (the others wait for it);
  * at most ``max_cold`` (2) cold builds run at once per vocabulary, across all compilers of
    that vocabulary; a hit never takes a cold slot and the cache lock never covers a build;
  * compiled results are kept within a byte budget (default 256 MiB), evicting the least
    recently used; a result still held by a session outlives its eviction;
  * each compile call reports ``cache_status`` (``hit`` / ``built`` / ``waited``) and
    ``compile_seconds`` on the returned `CompiledConstraint`; `ConstraintCompiler.stats`
    aggregates them.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import threading
import time
from typing import Any

import numpy as np

from infernix_jax.constrain import _xgr
from infernix_jax.constrain import errors
from infernix_jax.constrain.spec import ConstraintKind, OutputConstraint
from infernix_jax.constrain.vocab import Vocabulary

DEFAULT_CACHE_BYTES = 256 * 1024 * 1024
MAX_COLD_COMPILES = 2


@dataclasses.dataclass
class CompileStats:
  """Aggregate compile-call counters of one compiler (read them; never mutate)."""

  hits: int = 0
  built: int = 0
  waited: int = 0
  errors: int = 0
  evictions: int = 0
  hit_seconds: float = 0.0
  built_seconds: float = 0.0
  waited_seconds: float = 0.0


class _Entry:
  """One shared, immutable compiled constraint (what the cache holds)."""

  __slots__ = ("key", "constraint", "vocab", "grammar", "nbytes", "dropped", "build_seconds",
               "compiled_source", "__weakref__")

  def __init__(self, key, constraint, vocab, grammar, dropped, build_seconds, compiled_source):
    self.key = key
    self.constraint = constraint
    self.vocab = vocab
    self.grammar = grammar
    self.nbytes = _xgr.compiled_memory_bytes(grammar)
    self.dropped = dropped
    self.build_seconds = build_seconds
    self.compiled_source = compiled_source


@dataclasses.dataclass(frozen=True)
class CompiledConstraint:
  """The result of one `ConstraintCompiler.compile` call: a shared compiled grammar + how.

  Attributes:
    cache_status: ``"hit"``, ``"built"`` (this call compiled) or ``"waited"`` (another
      call's concurrent build of the same key was shared).
    compile_seconds: wall seconds this call spent (lookup, wait or build).
  """

  _entry: _Entry
  cache_status: str
  compile_seconds: float

  @property
  def constraint(self) -> OutputConstraint:
    return self._entry.constraint

  @property
  def vocab(self) -> Vocabulary:
    return self._entry.vocab

  @property
  def dropped(self) -> tuple[tuple[str, str], ...]:
    """``(json_pointer, keyword)`` of each keyword dropped under ``lenient=True``; the output
    is NOT guaranteed to satisfy these."""
    return self._entry.dropped

  @property
  def nbytes(self) -> int:
    """Bytes the compiled grammar holds (charged to the cache budget)."""
    return self._entry.nbytes

  @property
  def key(self) -> tuple:
    return self._entry.key

  @property
  def compiled_source(self) -> str:
    """The exact text handed to the matcher library (canonical schema, GBNF, regex)."""
    return self._entry.compiled_source

  def new_session(self, prefix: bytes | str = b""):
    """A new OutputSession (its own matcher) positioned after the continuation ``prefix``.

    Raises:
      PrefixError: the constraint's language has no output starting with ``prefix``.
    """
    from infernix_jax.constrain.session import OutputSession

    return OutputSession(self, prefix=prefix)


class _Pending:
  """A cold build in flight; concurrent callers of the same key wait on it."""

  def __init__(self):
    self.done = threading.Event()
    self.entry: _Entry | None = None
    self.error: BaseException | None = None


class ConstraintCompiler:
  """Compiles `OutputConstraint`s for one vocabulary, with a shared cache (thread-safe).

  Args:
    vocab: the token domain.
    cache_bytes: byte budget of kept compiled results (default 256 MiB).
    max_cold: cold compiles at once for this vocabulary (default 2; the first compiler of a
      vocabulary fixes it).
  """

  def __init__(self, vocab: Vocabulary, *, cache_bytes: int = DEFAULT_CACHE_BYTES,
               max_cold: int = MAX_COLD_COMPILES):
    if cache_bytes < 0:
      raise ValueError(f"{cache_bytes=} must be >= 0")
    self.vocab = vocab
    self.cache_bytes = int(cache_bytes)
    self.stats = CompileStats()
    self._lock = threading.Lock()
    self._entries: collections.OrderedDict[tuple, _Entry] = collections.OrderedDict()
    self._alias: dict[tuple, tuple] = {}  # exact-source key -> canonical key
    self._pending: dict[tuple, _Pending] = {}
    self._used = 0
    self._stats_lock = threading.Lock()
    self._cold = vocab.lazy("constrain.cold_slots", lambda: threading.BoundedSemaphore(max_cold))

  # --- public ----------------------------------------------------------------------------------

  @property
  def cache_bytes_used(self) -> int:
    """Bytes charged by the results the cache keeps now."""
    return self._used

  def __len__(self) -> int:
    return len(self._entries)

  def __contains__(self, constraint: OutputConstraint) -> bool:
    try:
      return self._canonical_key(constraint) in self._entries
    except errors.ConstraintError:
      return False

  def clear(self) -> None:
    """Drops every kept result (sessions holding one keep it alive)."""
    with self._lock:
      self._entries.clear()
      self._alias.clear()
      self._used = 0

  def compile(self, constraint: OutputConstraint, backend: str = "auto") -> CompiledConstraint:
    """Validates and compiles ``constraint`` (or reuses the cached result).

    Args:
      constraint: the content constraint.
      backend: ``"auto"`` (choice sets of at least ``trie.threshold()`` values go to the trie
        backend, everything else to XGrammar), ``"trie"`` (choice only) or ``"xgrammar"``.

    Returns:
      A `CompiledConstraint` (shared grammar + this call's cache status and seconds).

    Raises:
      ConstraintError: the constraint is invalid or unsupported (a subclass naming where).
    """
    t0 = time.perf_counter()
    if not isinstance(constraint, OutputConstraint):
      raise TypeError(f"expected an OutputConstraint, got {type(constraint).__name__}")
    if backend != "xgrammar":  # large finite sets: trie automaton backend (constrain/trie)
      from infernix_jax.constrain import trie

      routed = trie.route(self, constraint, backend)
      if routed is not None:
        return routed
    raw = self._raw_key(constraint)
    if raw is not None:
      with self._lock:
        key = self._alias.get(raw)
        entry = self._entries.get(key) if key is not None else None
        if entry is not None:
          self._entries.move_to_end(key)
          return self._done(entry, "hit", t0)
    try:
      key = self._canonical_key(constraint)
    except errors.ConstraintError:
      with self._stats_lock:
        self.stats.errors += 1
      raise
    with self._lock:
      if raw is not None:
        self._alias[raw] = key
      entry = self._entries.get(key)
      if entry is not None:
        self._entries.move_to_end(key)
        return self._done(entry, "hit", t0)
      pending = self._pending.get(key)
      owner = pending is None
      if owner:
        pending = self._pending[key] = _Pending()
    if not owner:
      pending.done.wait()
      if pending.error is not None:
        with self._stats_lock:
          self.stats.errors += 1
        raise pending.error
      return self._done(pending.entry, "waited", t0)
    try:
      with self._cold:
        entry = self._build(key, constraint)
    except BaseException as e:
      pending.error = e
      with self._lock:
        del self._pending[key]
      with self._stats_lock:
        self.stats.errors += 1
      pending.done.set()
      raise
    pending.entry = entry
    with self._lock:
      self._insert(entry)
      del self._pending[key]
    pending.done.set()
    return self._done(entry, "built", t0)

  # --- keys ------------------------------------------------------------------------------------

  def _options(self, c: OutputConstraint) -> tuple:
    return (bool(c.lenient), int(c.max_whitespace), str(c.framing), self.vocab.identity)

  def _raw_key(self, c: OutputConstraint) -> tuple | None:
    try:
      key = ("raw", c.kind, c.source) + self._options(c)
      hash(key)
      return key
    except TypeError:
      return None

  def _canonical_key(self, c: OutputConstraint) -> tuple:
    kind = ConstraintKind(c.kind)
    if kind == ConstraintKind.CHOICE:
      from infernix_jax.constrain import _choice

      source: Any = _choice.canonical_choices(c.source)
    elif kind == ConstraintKind.JSON_OBJECT:
      source = ""
    else:
      _require_text(kind, c.source)
      source = c.source
      if kind == ConstraintKind.JSON_SCHEMA:
        try:  # order-preserving re-serialisation; invalid JSON is reported by the build
          source = json.dumps(json.loads(c.source), ensure_ascii=False, separators=(",", ":"))
        except (ValueError, RecursionError):
          pass
    return (kind.value, source) + self._options(c)

  # --- build -----------------------------------------------------------------------------------

  def _build(self, key: tuple, c: OutputConstraint) -> _Entry:
    t0 = time.perf_counter()
    kind = ConstraintKind(c.kind)
    if c.max_whitespace < 0:
      raise errors.FeatureConflictError(f"max_whitespace={c.max_whitespace} must be >= 0")
    if c.framing:
      raise errors.FeatureConflictError(
          f"framing {c.framing!r} is not known to the content compiler; compile framed "
          "grammars through infernix_jax.constrain.framing")
    dropped: tuple = ()
    if kind == ConstraintKind.GRAMMAR:
      from infernix_jax.constrain import _gbnf

      text = _gbnf.check_gbnf(c.source)
      grammar = _guard(errors.GrammarSyntaxError, lambda: _xgr.compile_grammar(self.vocab, text))
    elif kind == ConstraintKind.CHOICE:
      from infernix_jax.constrain import _choice

      text = _choice.choice_gbnf(key[1])
      grammar = _guard(errors.ChoiceError, lambda: _xgr.compile_grammar(self.vocab, text))
    elif kind == ConstraintKind.REGEX:
      from infernix_jax.constrain import _regex

      text = _regex.check_regex(c.source)
      grammar = _guard(errors.RegexError, lambda: _xgr.compile_regex(self.vocab, text))
    else:
      from infernix_jax.constrain import schema as _schema

      if kind == ConstraintKind.JSON_OBJECT:
        text = _schema.JSON_OBJECT_SCHEMA
      else:
        check = _schema.check_json_schema(c.source, lenient=bool(c.lenient))
        text, dropped = check.schema_json, tuple(check.dropped)
      grammar = _guard(errors.UnsupportedSchemaError, lambda: _xgr.compile_json_schema(
          self.vocab, text, max_whitespace=int(c.max_whitespace)))
    _check_initial_mask(self.vocab, grammar, kind)
    return _Entry(key, c, self.vocab, grammar, dropped, time.perf_counter() - t0, text)

  def _insert(self, entry: _Entry) -> None:
    """Adds ``entry`` and evicts least-recently-used results beyond the budget (lock held)."""
    self._entries[entry.key] = entry
    self._used += entry.nbytes
    while self._used > self.cache_bytes and self._entries:
      _, old = self._entries.popitem(last=False)
      self._used -= old.nbytes
      self.stats.evictions += 1
    if len(self._alias) > 4 * max(len(self._entries), 64):
      live = set(self._entries)
      self._alias = {r: k for r, k in self._alias.items() if k in live}

  def _done(self, entry: _Entry, status: str, t0: float) -> CompiledConstraint:
    seconds = time.perf_counter() - t0
    with self._stats_lock:
      self._count(status, seconds)
    return CompiledConstraint(entry, status, seconds)

  def _count(self, status: str, seconds: float) -> None:
    st = self.stats
    if status == "hit":
      st.hits += 1
      st.hit_seconds += seconds
    elif status == "built":
      st.built += 1
      st.built_seconds += seconds
    else:
      st.waited += 1
      st.waited_seconds += seconds


def _require_text(kind: ConstraintKind, source: Any) -> None:
  if not isinstance(source, str):
    cls = {ConstraintKind.GRAMMAR: errors.GrammarSyntaxError,
           ConstraintKind.REGEX: errors.RegexError}.get(kind, errors.SchemaError)
    raise cls(f"a {kind.value} constraint needs its source as str, got {type(source).__name__}")


def _guard(error_cls: type[errors.ConstraintError], build):
  """Runs a matcher-library compile; anything it raises becomes a user ``error_cls``."""
  try:
    return build()
  except errors.ConstraintError:
    raise
  except (RuntimeError, ValueError, TypeError, OverflowError, RecursionError) as e:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise error_cls(f"the constraint could not be compiled: {first}") from None


def _check_initial_mask(vocab: Vocabulary, grammar: Any, kind: ConstraintKind) -> None:
  """A constraint with no legal token at its initial position is a request error."""
  matcher = _xgr.new_matcher(grammar)
  buf = np.zeros((1, vocab.mask_words), np.int32)
  matcher.fill_next_token_bitmask(buf, 0)
  if not buf.any():
    cls = errors.SchemaError if kind in (ConstraintKind.JSON_SCHEMA,
                                         ConstraintKind.JSON_OBJECT) else errors.ConstraintError
    raise cls("no output satisfies this constraint with this vocabulary (the first position "
              "has no legal token)", "" if cls is errors.SchemaError else None)
