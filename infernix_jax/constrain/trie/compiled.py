"""Compiling a choice set to a trie automaton: ``compile_choice(vocab, values) -> CompiledTrie``."""

from __future__ import annotations

import time

from infernix_jax.constrain._choice import canonical_choices
from infernix_jax.constrain.trie import _index, tables
from infernix_jax.constrain.trie._automaton import TrieAutomaton
from infernix_jax.constrain.trie.session import TrieSession


class CompiledTrie:
  """A choice constraint compiled by the trie backend (immutable; sessions share it).

  Attributes:
    vocab: the Vocabulary it was compiled against.
    values: the canonical choice literals (deduplicated, sorted by UTF-8 bytes).
    automaton: the TrieAutomaton tables.
    index_seconds: time spent building the vocabulary index in this call (0 when cached).
    compile_seconds: wall time of the whole compile (index included).
  """

  backend = "trie"
  kind = "choice"

  def __init__(self, vocab, values, automaton, index_seconds, compile_seconds):
    self.vocab = vocab
    self.values = values
    self.automaton = automaton
    self.index_seconds = index_seconds
    self.compile_seconds = compile_seconds

  def new_session(self, prefix: bytes = b"") -> TrieSession:
    """A fresh session at the start of the value (or after the continuation ``prefix``)."""
    return TrieSession(self.automaton, prefix)

  @property
  def memory_bytes(self) -> int:
    """Bytes of the per-constraint tables (the shared vocabulary index not included)."""
    return self.automaton.memory_bytes()

  def export_tables(self, **kwargs) -> tables.AutomatonTables:
    """Numpy tables for a device-resident automaton (see ``tables.export``)."""
    return tables.export(self.automaton, **kwargs)


def compile_choice(vocab, values, *, dense_fraction: float = 1 / 16) -> CompiledTrie:
  """Compiles a choice list with the trie backend.

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
  canon = canonical_choices(values)
  cold = vocab.identity not in _index._CACHE
  index = _index.get_index(vocab)
  index_seconds = index.build_seconds if cold else 0.0
  automaton = TrieAutomaton.build([v.encode("utf-8") for v in canon], index, vocab.eos_ids,
                                  dense_fraction=dense_fraction)
  return CompiledTrie(vocab, canon, automaton, index_seconds, time.perf_counter() - t0)
