"""The n-gram prompt-lookup index against a brute-force search."""

from __future__ import annotations

import numpy as np
import pytest

from infernix_jax.runtime.drafters.ngram import NGramIndex


def brute_force(ctx, k, max_n, min_n):
  """Latest earlier occurrence (with a continuation) of the longest matching suffix."""
  for n in range(min(max_n, len(ctx)), min_n - 1, -1):
    suffix = ctx[len(ctx) - n:]
    for start in range(len(ctx) - n - 1, -1, -1):  # occurrence must end before len(ctx)
      if ctx[start:start + n] == suffix:
        return ctx[start + n:start + n + k]
  return []


@pytest.mark.parametrize("max_n,min_n", [(1, 1), (3, 1), (4, 2)])
def test_matches_brute_force_incrementally(max_n, min_n):
  rng = np.random.default_rng(max_n * 10 + min_n)
  for trial in range(20):
    seq = [int(t) for t in rng.integers(0, 4, size=40)]
    index = NGramIndex(max_n, min_n)
    index.extend(seq[:5])
    for i in range(5, len(seq)):
      assert index.propose(3) == brute_force(seq[:i], 3, max_n, min_n), (trial, i)
      index.extend([seq[i]])


def test_extra_tokens_extend_the_suffix():
  index = NGramIndex(3)
  index.extend([7, 8, 9, 5, 7, 8])
  assert index.propose(2) == [9, 5]
  # With a hypothetical 9 appended, the suffix (7, 8, 9) matches at the start: continue with 5, 7.
  assert index.propose(2, extra=[9]) == [5, 7]
  assert index.propose(0) == []


def test_invalid_sizes():
  with pytest.raises(ValueError, match="min_n"):
    NGramIndex(2, 3)
