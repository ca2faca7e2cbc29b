"""ConstraintCompiler: one byte-budgeted, shared compile cache in front of every backend.

The backend that compiles a constraint comes from the registry (`constrain.backends`): an
explicit name, or ``"auto"`` routing (`backends.resolve`). Cache key = backend name + kind +
canonical source (JSON parsed and re-serialized order-preserving; choice = the deduplicated
literal set; GBNF/regex = the text) + options (lenient, whitespace run) + framing +
vocabulary identity. A continuation prefix is never part of the key (it only advances a new
matcher). Behaviour (reference 000, compile cache), the same for every backend:

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

from infernix_jax.constrain import backends
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

  __slots__ = ("key", "backend", "constraint", "vocab", "grammar", "nbytes", "dropped",
               "build_seconds", "compiled_source", "__weakref__")

  def __init__(self, key, backend: str, constraint, vocab, built: backends.BuildResult,
               build_seconds: float):
    self.key = key
    self.backend = backend
    self.constraint = constraint
    self.vocab = vocab
    self.grammar = built.grammar
    self.nbytes = int(built.nbytes)
    self.dropped = tuple(built.dropped)
    self.build_seconds = build_seconds
    self.compiled_source = built.compiled_source


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
  def backend(self) -> str:
    """The registry name of the backend that compiled it (and opens its sessions)."""
    return self._entry.backend

  @property
  def grammar(self) -> Any:
    """The backend's compiled object (a `trie.CompiledTrie` for "trie"; opaque otherwise)."""
    return self._entry.grammar

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

  def new_session(self, prefix: bytes | str = b"", **text):
    """A new session of its backend (its own matcher) after the continuation ``prefix``.

    Args:
      prefix: bytes (or str) the output already holds.
      **text: the UTF-8 options of `MatcherSession` (``utf8_switch``, ``utf8_start``), for
        framing's token-level reasoning; passed to the backend only when given.

    Returns:
      A `backends.ConstraintSession` (``session.backend == self.backend``).

    Raises:
      PrefixError: the constraint's language has no output starting with ``prefix``.
    """
    if isinstance(prefix, str):
      prefix = prefix.encode("utf-8")
    backend = backends.get(self._entry.backend)
    if text:
      return backend.new_session(self, bytes(prefix), **text)
    return backend.new_session(self, bytes(prefix))


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

  @classmethod
  def for_vocab(cls, vocab: Vocabulary) -> "ConstraintCompiler":
    """The vocabulary's shared compiler (built on first use, default budget).

    For callers handed no compiler (framing's `prepare_output`); an engine passes its own.
    """
    return vocab.lazy("constrain.ConstraintCompiler", lambda: cls(vocab))

  # --- public ----------------------------------------------------------------------------------

  @property
  def cache_bytes_used(self) -> int:
    """Bytes charged by the results the cache keeps now."""
    return self._used

  def __len__(self) -> int:
    return len(self._entries)

  def __contains__(self, constraint: OutputConstraint) -> bool:  # noqa: D105
    try:
      return any(self._canonical_key(constraint, name) in self._entries
                 for name in backends.candidates(constraint))
    except ValueError:  # ConstraintError included
      return False

  def clear(self) -> None:
    """Drops every kept result (sessions holding one keep it alive)."""
    with self._lock:
      self._entries.clear()
      self._alias.clear()
      self._used = 0

  def compile(self, constraint: OutputConstraint,
              backend: str | None = None) -> CompiledConstraint:
    """Validates and compiles ``constraint`` (or reuses the cached result).

    Args:
      constraint: the content constraint.
      backend: a registered backend name (``backends.names()``) or ``"auto"`` (the backends
        of `backends.candidates` in turn, the fastest measured for the kind first: the first
        that compiles the constraint exactly takes it); None = ``constraint.backend``
        (default ``"auto"``).

    Returns:
      A `CompiledConstraint` (shared compiled object + this call's cache status and seconds;
      ``.backend`` names the backend that compiled it).

    Raises:
      ValueError: an unknown backend name (the message lists the registered ones).
      UnsupportedConstraintError: the chosen backend cannot express the constraint.
      ConstraintError: the constraint is invalid or unsupported (a subclass naming where);
        under ``"auto"``, every candidate refused it (the message says what each said).
    """
    t0 = time.perf_counter()
    if not isinstance(constraint, OutputConstraint):
      raise TypeError(f"expected an OutputConstraint, got {type(constraint).__name__}")
    asked = backends.requested(constraint, backend)
    raw = self._raw_key(constraint, asked)
    if raw is not None:
      with self._lock:
        key = self._alias.get(raw)
        entry = self._entries.get(key) if key is not None else None
        if entry is not None:
          self._entries.move_to_end(key)
          return self._done(entry, "hit", t0)
    refusals: list[tuple[str, errors.ConstraintError]] = []
    for name in backends.candidates(constraint, asked):
      try:
        return self._compile_with(name, constraint, raw, t0)
      except errors.ConstraintError as e:
        refusals.append((name, e))
    with self._stats_lock:
      self.stats.errors += 1
    raise _refusal(refusals)

  def _compile_with(self, name: str, constraint: OutputConstraint, raw: tuple | None,
                    t0: float) -> CompiledConstraint:
    """Compiles with backend ``name`` (or shares its cached / in-flight build)."""
    impl = backends.get(name)
    impl.check(constraint)
    key = self._canonical_key(constraint, name)
    with self._lock:
      entry = self._entries.get(key)
      if entry is not None:
        if raw is not None:
          self._alias[raw] = key
        self._entries.move_to_end(key)
        return self._done(entry, "hit", t0)
      pending = self._pending.get(key)
      owner = pending is None
      if owner:
        pending = self._pending[key] = _Pending()
    if not owner:
      pending.done.wait()
      if pending.error is not None:
        raise pending.error
      self._alias_to(raw, key)
      return self._done(pending.entry, "waited", t0)
    try:
      with self._cold:
        entry = self._build(key, constraint)
    except BaseException as e:
      pending.error = e
      with self._lock:
        del self._pending[key]
      pending.done.set()
      raise
    pending.entry = entry
    with self._lock:
      self._insert(entry)
      if raw is not None:
        self._alias[raw] = key
      del self._pending[key]
    pending.done.set()
    return self._done(entry, "built", t0)

  def _alias_to(self, raw: tuple | None, key: tuple) -> None:
    if raw is not None:
      with self._lock:
        self._alias[raw] = key

  # --- keys ------------------------------------------------------------------------------------

  def _options(self, c: OutputConstraint) -> tuple:
    return (bool(c.lenient), int(c.max_whitespace), str(c.framing), self.vocab.identity)

  def _raw_key(self, c: OutputConstraint, asked: str) -> tuple | None:
    """The exact-source alias key: what was asked for, before routing and canonicalisation."""
    try:
      key = ("raw", c.kind, c.source) + backends.route_key(asked) + self._options(c)
      hash(key)
      return key
    except TypeError:
      return None

  def _canonical_key(self, c: OutputConstraint, backend: str) -> tuple:
    """(backend, kind, canonical source) + options: equal keys compile to the same thing."""
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
    return (backend, kind.value, source) + self._options(c)

  # --- build -----------------------------------------------------------------------------------

  def _build(self, key: tuple, c: OutputConstraint) -> _Entry:
    """Builds ``c`` with the backend the key names (key[0]) and its canonical source (key[2])."""
    t0 = time.perf_counter()
    backend = backends.get(key[0])
    if c.max_whitespace < 0:
      raise errors.FeatureConflictError(f"max_whitespace={c.max_whitespace} must be >= 0")
    if ConstraintKind(c.kind) == ConstraintKind.CHOICE:  # the backend gets the canonical set
      built = backend.build(self.vocab, dataclasses.replace(c, source=key[2]))
    else:
      built = backend.build(self.vocab, c)
    return _Entry(key, backend.name, c, self.vocab, built, time.perf_counter() - t0)

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


def _refusal(refusals: list) -> errors.ConstraintError:
  """The error of a constraint no candidate backend compiled.

  One candidate: its own error. Several (``auto``): an invalid input (a syntax or schema
  error, not a construct some backend lacks) is reported as the first backend said it;
  otherwise a `NoExactBackendError` at the first refusal's location that says what every
  backend said.
  """
  if len(refusals) == 1:
    return refusals[0][1]
  unsupported = (errors.UnsupportedConstraintError, errors.UnsupportedSchemaError)
  for _, e in refusals:
    if not isinstance(e, unsupported):
      return e
  return errors.NoExactBackendError(refusals)


def _require_text(kind: ConstraintKind, source: Any) -> None:
  if not isinstance(source, str):
    cls = {ConstraintKind.GRAMMAR: errors.GrammarSyntaxError,
           ConstraintKind.REGEX: errors.RegexError}.get(kind, errors.SchemaError)
    raise cls(f"a {kind.value} constraint needs its source as str, got {type(source).__name__}")
