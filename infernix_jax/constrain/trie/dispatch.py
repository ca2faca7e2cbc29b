"""The ``auto`` routing threshold: choice sets of at least this many values go to the trie.

`backends.resolve` routes a bare choice with at least ``threshold()`` distinct values to the
trie backend and everything else to xgrammar. The default comes from the study in
``docs/results/trie.md``: from this size on the trie's warm compile is faster than XGrammar's,
and its per-step mask is faster at every size.
"""

from __future__ import annotations

# Distinct values. Measured (docs/results/trie.md, dispatch): the trie's warm compile overtakes
# XGrammar's GBNF choice at K ~ 20 (1.06x) and is 1.5x faster at K = 32, 2.4x at K = 100.
DEFAULT_THRESHOLD = 32

_threshold = DEFAULT_THRESHOLD


def threshold() -> int:
  """Current minimum number of distinct values for which ``auto`` picks the trie."""
  return _threshold


def set_threshold(k: int) -> None:
  """Sets the ``auto`` routing threshold (distinct values; 1 = always the trie for choice)."""
  global _threshold
  if int(k) < 1:
    raise ValueError(f"threshold {k=} must be >= 1")
  _threshold = int(k)
