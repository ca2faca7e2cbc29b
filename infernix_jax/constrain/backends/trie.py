"""The trie backend: bare choice constraints as a trie automaton (`constrain/trie`)."""

from __future__ import annotations

from typing import ClassVar, Sequence

import numpy as np

from infernix_jax.constrain import errors
from infernix_jax.constrain.backends.base import BuildResult
from infernix_jax.constrain.spec import ConstraintKind, OutputConstraint


class TrieBackend:
  """Choice sets compiled to a trie automaton (after "Trie Automata for Constrained Decoding
  over Large Finite Sets", arXiv:2608.12574).

  Sessions are `trie.TrieSession`s (state = one node id); `fill_batch` is vectorized per
  automaton (`trie.fill_batch`). Compiled objects are `trie.CompiledTrie` (``.automaton``,
  ``.export_tables()`` for a device-resident automaton).
  """

  name: ClassVar[str] = "trie"
  # Its sessions' masks may come from a device-resident automaton: `TrieSession.
  # automaton_tables()` gives the host automaton (``trie.tables.export`` makes its device
  # tables) and the session's node.
  exports_automaton: ClassVar[bool] = True

  def check(self, constraint: OutputConstraint) -> None:
    """Only a bare choice: other kinds and framed output raise UnsupportedConstraintError."""
    kind = ConstraintKind(constraint.kind)
    if constraint.framing:  # first: a framed grammar is a grammar, the framing is the point
      raise errors.UnsupportedConstraintError(
          self.name, "framed output", f"framing {constraint.framing!r} needs a grammar "
          "backend (xgrammar or llguidance)")
    if kind != ConstraintKind.CHOICE:
      raise errors.UnsupportedConstraintError(
          self.name, f"{kind.value} constraints", "it compiles finite choice sets only")

  def build(self, vocab, constraint: OutputConstraint) -> BuildResult:
    """Compiles the choice set (the shared per-vocabulary token index is built once)."""
    from infernix_jax.constrain.trie import compiled as trie_compiled

    source, raw = constraint.source, ()
    if isinstance(source, tuple) and all(isinstance(v, str) for v in source):
      try:
        raw = tuple(v.encode("utf-8") for v in source)
      except UnicodeEncodeError:  # compile_choice names the index
        raw = ()
    if raw and all(a < b for a, b in zip(raw, raw[1:])):  # canonical already: no second sort
      compiled = trie_compiled._compile_canonical(vocab, raw)
    else:  # validates (ChoiceError) and canonicalises
      compiled = trie_compiled.compile_choice(vocab, source)
    return BuildResult(compiled, compiled.nbytes, compiled.compiled_source)

  def new_session(self, compiled, prefix: bytes, **text):
    """A `TrieSession` after the continuation ``prefix`` (``text``: UTF-8 options, unused:
    trie paths are strict UTF-8 text)."""
    from infernix_jax.constrain.trie.session import TrieSession

    return TrieSession(compiled.grammar.automaton, prefix, compiled=compiled)

  def fill_batch(self, sessions: Sequence, drafts: np.ndarray, n_drafts: np.ndarray,
                 out: np.ndarray, *, threads: int = 0) -> np.ndarray:
    """Vectorized lookahead, one pass per draft position per automaton (threads unused)."""
    from infernix_jax.constrain.trie import batch

    return batch.fill_batch(sessions, drafts, n_drafts, out)[0]
