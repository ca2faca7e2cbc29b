"""Compiling a choice set to a trie automaton: ``compile_choice(vocab, values) -> CompiledTrie``."""

from __future__ import annotations

import time

from infernix_jax.constrain._choice import canonical_choices
from infernix_jax.constrain.trie import _index, tables
from infernix_jax.constrain.trie._automaton import TrieAutomaton
from infernix_jax.constrain.trie.session import TrieSession


class CompiledTrie:
  """A choice constraint compiled by the trie backend (immutable; sessions share it).

  What the trie backend builds (``CompiledConstraint.grammar`` of a trie-compiled constraint);
  `compile_choice` returns it uncached, with the attributes of a ``CompiledConstraint``.

  Attributes:
    vocab: the Vocabulary it was compiled against.
    raw_values: the canonical choice literals as UTF-8 bytes (deduplicated, sorted).
    values: the same literals as str (decoded on first access).
    automaton: the TrieAutomaton tables.
    index_seconds: time spent building the vocabulary index in this compile (0 when cached).
    build_seconds: wall time of the build (index included).
    constraint: the OutputConstraint, when the caller gave one (None from the compile cache,
      which keeps it on the ``CompiledConstraint``).
    cache_status: ``"built"`` or ``"hit"`` (the call that returned this object).
    compile_seconds: wall seconds the call spent (lookup or build).
  """

  backend = "trie"
  dropped = ()

  def __init__(self, vocab, raw_values, automaton, index_seconds, build_seconds, constraint=None,
               cache_status="built", compile_seconds=None):
    self.vocab = vocab
    self.raw_values = raw_values
    self._values = None
    self.automaton = automaton
    self.index_seconds = index_seconds
    self.build_seconds = build_seconds
    self.constraint = constraint
    self.cache_status = cache_status
    self.compile_seconds = build_seconds if compile_seconds is None else compile_seconds

  @property
  def values(self) -> tuple[str, ...]:
    """The canonical literals as str (sorted by their UTF-8 bytes)."""
    if self._values is None:
      self._values = tuple(b.decode("utf-8") for b in self.raw_values)
    return self._values

  @property
  def key(self) -> tuple:
    return ("choice", self.raw_values, "trie", self.vocab.identity)

  @property
  def compiled_source(self) -> str:
    return f"trie over {len(self.raw_values)} values"

  def new_session(self, prefix: bytes | str = b"") -> TrieSession:
    """A fresh session at the start of the value (or after the continuation ``prefix``).

    Raises:
      PrefixError: no value starts with ``prefix``.
    """
    return TrieSession(self.automaton, prefix, compiled=self)

  @property
  def nbytes(self) -> int:
    """Bytes of the per-constraint tables (the shared vocabulary index not included)."""
    return self.automaton.memory_bytes()

  def export_tables(self, **kwargs) -> tables.AutomatonTables:
    """Numpy tables for a device-resident automaton (see ``tables.export``)."""
    return tables.export(self.automaton, **kwargs)


def compile_choice(vocab, values, *, dense_fraction: float = 1 / 16) -> CompiledTrie:
  """Compiles a choice list to a trie (no cache: ``ConstraintCompiler`` caches it).

  Semantics equal the XGrammar-backed choice: EOS is legal exactly where a value ends (also
  where it prefixes another value), tokens that overshoot a value are illegal, every
  tokenization of a value is allowed, control tokens are never legal inside a value.

  Args:
    vocab: a ``constrain.Vocabulary``.
    values: non-empty list of str.
    dense_fraction: nodes with more than this fraction of W non-zero words store a packed row.

  Returns:
    CompiledTrie.

  Raises:
    ChoiceError: ``values`` is not a non-empty list of strings.
  """
  t0 = time.perf_counter()
  return _compile_canonical(vocab, canonical_bytes(values), dense_fraction, t0)


def canonical_bytes(values) -> tuple[bytes, ...]:
  """The canonical choice set (as ``_choice.canonical_choices``) as sorted distinct UTF-8 bytes.

  One encode per value (large sets spend most of their compile time here otherwise); invalid
  input is handed to ``canonical_choices`` so the error and its location are the same.

  Raises:
    ChoiceError: not a non-empty list of strings.
  """
  if isinstance(values, (list, tuple)) and values:
    try:
      raw = sorted({v.encode("utf-8") for v in values})
    except (AttributeError, TypeError, UnicodeEncodeError):
      raw = None
    if raw is not None:
      return tuple(raw)
  canonical_choices(values)   # raises the ChoiceError naming the offending index
  raise AssertionError("canonical_choices accepted what the fast path rejected")  # unreachable


def _compile_canonical(vocab, raw, dense_fraction=1 / 16, t0=None) -> CompiledTrie:
  """Compiles an already canonical set (``raw``: sorted distinct UTF-8 bytes)."""
  t0 = time.perf_counter() if t0 is None else t0
  cold = not _index.is_cached(vocab)
  index = _index.get_index(vocab)
  index_seconds = index.build_seconds if cold else 0.0
  automaton = TrieAutomaton.build(raw, index, vocab.eos_ids, dense_fraction=dense_fraction,
                                  presorted=True)   # raw is sorted and distinct already
  return CompiledTrie(vocab, raw, automaton, index_seconds, time.perf_counter() - t0)
