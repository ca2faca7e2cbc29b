"""Trie automaton backend for large finite sets (choice), after "Trie Automata for Constrained
Decoding over Large Finite Sets" (arXiv:2608.12574).

  from infernix_jax.constrain import trie
  compiled = trie.compile_choice(vocab, ["slack.get_user", ...])
  session = compiled.new_session()
  tables = compiled.export_tables()     # numpy arrays for runtime.device_automaton

The per-vocabulary index is built once and cached (``trie.get_index(vocab)``). Through the
compile cache this is the ``trie`` backend (`constrain/backends/trie.py`):
``ConstraintCompiler.compile(spec, backend="trie")``, or ``"auto"`` for choice sets of at least
``trie.threshold()`` distinct values (``trie.set_threshold``).
"""

from infernix_jax.constrain.trie._automaton import TrieAutomaton
from infernix_jax.constrain.trie._index import VocabIndex, clear_cache, get_index
from infernix_jax.constrain.trie.batch import fill_batch, lookahead_many
from infernix_jax.constrain.trie.compiled import CompiledTrie, compile_choice
from infernix_jax.constrain.trie.dispatch import set_threshold, threshold
from infernix_jax.constrain.trie.session import TrieSession
from infernix_jax.constrain.trie.tables import AutomatonTables, export

__all__ = [
    "AutomatonTables",
    "CompiledTrie",
    "TrieAutomaton",
    "TrieSession",
    "VocabIndex",
    "clear_cache",
    "compile_choice",
    "export",
    "fill_batch",
    "get_index",
    "lookahead_many",
    "set_threshold",
    "threshold",
]
