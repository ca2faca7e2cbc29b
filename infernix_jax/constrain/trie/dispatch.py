"""Backend dispatch for choice constraints: the trie above a size threshold, XGrammar below.

``ConstraintCompiler.compile(spec, backend=...)`` calls ``route`` first:

  * ``backend="xgrammar"``: never routed here;
  * ``backend="trie"``: choice constraints compile to a trie automaton (other kinds raise
    FeatureConflictError);
  * ``backend="auto"`` (default): a choice with at least ``threshold()`` distinct values goes to
    the trie, the rest to XGrammar.

The default threshold comes from the study in ``docs/results/trie.md``: from this size on the
trie's warm compile is faster than XGrammar's, and its per-step mask is faster at every size.
Compiled tries are cached per vocabulary (LRU within a byte budget; the per-vocabulary cache is
keyed by the canonical value set, with the exact source tuple as an alias so a repeated request
skips canonicalisation), like the XGrammar cache.
"""

from __future__ import annotations

import collections
import threading
import time

from infernix_jax.constrain import errors
from infernix_jax.constrain.trie.compiled import CompiledTrie, _compile_canonical, canonical_bytes

BACKENDS = ("auto", "trie", "xgrammar")
# Distinct values. Measured (docs/results/trie.md, dispatch): the trie's warm compile overtakes
# XGrammar's GBNF choice at K ~ 20 (1.06x) and is 1.5x faster at K = 32, 2.4x at K = 100.
DEFAULT_THRESHOLD = 32
DEFAULT_CACHE_BYTES = 256 << 20

_threshold = DEFAULT_THRESHOLD


def threshold() -> int:
  """Current minimum number of distinct values for which ``auto`` picks the trie."""
  return _threshold


def set_threshold(k: int) -> None:
  """Sets the ``auto`` dispatch threshold (distinct values; 1 = always the trie for choice)."""
  global _threshold
  if int(k) < 1:
    raise ValueError(f"threshold {k=} must be >= 1")
  _threshold = int(k)


class _Cache:
  """Per-vocabulary LRU of compiled tries within a byte budget (thread-safe)."""

  def __init__(self, budget: int):
    self.budget = budget
    self.used = 0
    self.lock = threading.Lock()
    self.entries: collections.OrderedDict[tuple, CompiledTrie] = collections.OrderedDict()
    self.raw: dict[tuple, tuple] = {}    # exact source tuple -> canonical values

  def alias(self, raw, key) -> None:
    with self.lock:
      self.raw[raw] = key
      if len(self.raw) > 4 * max(len(self.entries), 64):
        self.raw = {r: k for r, k in self.raw.items() if k in self.entries}

  def get_raw(self, raw):
    with self.lock:
      key = self.raw.get(raw)
    return None if key is None else self.get(key)

  def get(self, key):
    with self.lock:
      hit = self.entries.get(key)
      if hit is not None:
        self.entries.move_to_end(key)
      return hit

  def put(self, key, compiled: CompiledTrie) -> None:
    with self.lock:
      if key in self.entries:
        return
      self.entries[key] = compiled
      self.used += compiled.nbytes
      while self.used > self.budget and len(self.entries) > 1:
        _, old = self.entries.popitem(last=False)
        self.used -= old.nbytes


def route(compiler, constraint, backend: str = "auto") -> CompiledTrie | None:
  """Compiles ``constraint`` with the trie when the backend choice says so, else None.

  Args:
    compiler: the ``ConstraintCompiler`` (its vocabulary and stats are used).
    constraint: an ``OutputConstraint``.
    backend: ``"auto"``, ``"trie"`` or ``"xgrammar"``.

  Returns:
    A CompiledTrie (``cache_status`` ``"hit"`` or ``"built"``), or None for XGrammar.

  Raises:
    ValueError: unknown backend.
    FeatureConflictError: ``backend="trie"`` for a constraint that is not a choice, or with
      framing.
    ChoiceError: an invalid choice list.
  """
  if backend not in BACKENDS:
    raise ValueError(f"backend={backend!r} must be one of {BACKENDS}")
  if backend == "xgrammar":
    return None
  kind = getattr(constraint.kind, "value", constraint.kind)
  if kind != "choice":
    if backend == "trie":
      raise errors.FeatureConflictError(
          f"the trie backend compiles choice constraints only, not {kind!r}; use "
          "backend='auto' or 'xgrammar'")
    return None
  if constraint.framing:
    if backend == "trie":
      raise errors.FeatureConflictError("the trie backend compiles bare content only (no framing)")
    return None
  t0 = time.perf_counter()
  vocab = compiler.vocab
  cache = vocab.lazy("constrain.trie.cache", lambda: _Cache(DEFAULT_CACHE_BYTES))
  raw = constraint.source if isinstance(constraint.source, tuple) else None
  if raw is not None and (backend == "trie" or len(raw) >= _threshold):
    hit = cache.get_raw(raw)   # exact source seen before: no canonicalisation (sorting K values)
    if hit is not None:
      out = hit.with_status("hit", time.perf_counter() - t0, constraint)
      _count(compiler, "hit", out.compile_seconds)
      return out
  try:
    values = canonical_bytes(constraint.source)
  except errors.ConstraintError:
    if backend == "auto":
      return None          # the XGrammar path reports (and counts) the same error
    _count_error(compiler)
    raise
  if backend == "auto" and len(values) < _threshold:
    return None
  hit = cache.get(values)
  if hit is not None:
    out = hit.with_status("hit", time.perf_counter() - t0, constraint)
  else:
    built = _compile_canonical(vocab, values)
    cache.put(values, built)
    out = built.with_status("built", time.perf_counter() - t0, constraint)
  if raw is not None:
    cache.alias(raw, values)
  _count(compiler, out.cache_status, out.compile_seconds)
  return out


def _count(compiler, status: str, seconds: float) -> None:
  stats_lock = getattr(compiler, "_stats_lock", None)
  count = getattr(compiler, "_count", None)
  if stats_lock is not None and count is not None:
    with stats_lock:
      count(status, seconds)


def _count_error(compiler) -> None:
  stats_lock = getattr(compiler, "_stats_lock", None)
  if stats_lock is not None:
    with stats_lock:
      compiler.stats.errors += 1
