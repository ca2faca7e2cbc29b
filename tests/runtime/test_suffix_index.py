"""The SuffixDecoding suffix index against brute-force counts and speculation trees."""

from __future__ import annotations

import collections
import threading

import numpy as np
import pytest

from infernix_jax.runtime.drafters._suffix_index import SuffixIndex, Speculation


def substring_counts(seqs, max_depth):
  """Occurrences of every substring of length 1..max_depth over the sequences."""
  counts = collections.Counter()
  for seq in seqs:
    for i in range(len(seq)):
      for n in range(1, min(max_depth, len(seq) - i) + 1):
        counts[tuple(seq[i:i + n])] += 1
  return counts


def assert_counts(index, seqs, max_depth, vocab):
  """The index holds exactly the substrings of `seqs`, with their counts."""
  want = substring_counts(seqs, max_depth)
  assert index.nodes == len(want)
  for s, c in want.items():
    assert index.count(s) == c, s
  for t in range(vocab + 1):  # a token never seen, and unseen bigrams
    assert index.count((t, vocab)) == want.get((t, vocab), 0)


def continuations(counts, s, max_depth):
  """Brute-force next-token counts after s (occurrences that continue within max_depth)."""
  if len(s) + 1 > max_depth:
    return {}
  return {k[-1]: c for k, c in counts.items() if len(k) == len(s) + 1 and k[:-1] == s}


def brute_match(counts, ctx, max_depth, max_match=None):
  limit = max_depth - 1 if max_match is None else min(max_match, max_depth - 1)
  for n in range(min(limit, len(ctx)), 0, -1):
    s = tuple(ctx[len(ctx) - n:])
    if continuations(counts, s, max_depth):
      return n
  return 0


def all_paths(counts, s, max_depth, score=1.0, path=()):
  """Every path below s with its brute-force score: products of conditional frequencies."""
  nxt = continuations(counts, s, max_depth)
  total = sum(nxt.values())
  for t, c in nxt.items():
    p = score * c / total
    yield path + (t,), p
    yield from all_paths(counts, s + (t,), max_depth, p, path + (t,))


def node_paths(spec: Speculation):
  paths = []
  for tok, parent in zip(spec.tokens, spec.parents):
    paths.append((paths[parent] if parent >= 0 else ()) + (tok,))
  return paths


def random_seqs(rng, n, length, vocab):
  return [[int(t) for t in rng.integers(0, vocab, size=length)] for _ in range(n)]


def interleave(index, rng, seqs, ids):
  """Extends each sequence in random chunks, the lanes interleaved at random."""
  pos = [0] * len(seqs)
  while any(p < len(s) for p, s in zip(pos, seqs)):
    lane = int(rng.choice([i for i, s in enumerate(seqs) if pos[i] < len(s)]))
    n = int(rng.integers(1, 4))
    index.extend(ids[lane], seqs[lane][pos[lane]:pos[lane] + n])
    pos[lane] += n


@pytest.mark.parametrize("max_depth,vocab", [(2, 3), (4, 3), (6, 5)])
def test_counts_after_interleaved_extends_and_removes(max_depth, vocab):
  rng = np.random.default_rng(max_depth * 7 + vocab)
  for _ in range(5):
    seqs = random_seqs(rng, 4, int(rng.integers(5, 25)), vocab)
    ids = ["a", 1, ("b", 2), None]
    index = SuffixIndex(max_depth)
    interleave(index, rng, seqs, ids)
    assert len(index) == 4 and all(i in index for i in ids)
    assert_counts(index, seqs, max_depth, vocab)
    sequential = SuffixIndex(max_depth)
    for i, s in zip(ids, seqs):
      sequential.extend(i, s)
    assert sequential.nodes == index.nodes
    for drop in (1, 3):
      index.remove(ids[drop])
    index.remove("never held")
    assert ids[1] not in index and len(index) == 2
    assert_counts(index, [seqs[0], seqs[2]], max_depth, vocab)
    index.remove(ids[0])
    index.remove(ids[2])
    assert index.nodes == 0 and len(index) == 0
    index.extend(ids[1], seqs[1])  # freed nodes are reused
    assert_counts(index, [seqs[1]], max_depth, vocab)


@pytest.mark.parametrize("max_depth,vocab,max_match", [(3, 2, None), (5, 3, None), (6, 3, 2)])
def test_speculation_is_the_best_subtree(max_depth, vocab, max_match):
  rng = np.random.default_rng(max_depth * 11 + vocab)
  for trial in range(12):
    seqs = random_seqs(rng, 3, int(rng.integers(4, 20)), vocab)
    index = SuffixIndex(max_depth)
    for i, s in enumerate(seqs):
      index.extend(i, s)
    counts = substring_counts(seqs, max_depth)
    ctx = [int(t) for t in rng.integers(0, vocab + 1, size=int(rng.integers(0, 8)))]
    budget = int(rng.integers(1, 12))
    spec = index.speculate(ctx, budget, max_match=max_match)
    n = brute_match(counts, ctx, max_depth, max_match)
    assert spec.match_len == n, (trial, ctx)
    if n == 0:
      assert spec.tokens == [] and spec.score == 0.0
      continue
    s = tuple(ctx[len(ctx) - n:])
    first = continuations(counts, s, max_depth)
    assert spec.tokens[0] == min(first, key=lambda t: (-first[t], t))
    assert spec.parents[0] == -1
    assert all(-1 <= p < j for j, p in enumerate(spec.parents))
    assert len(spec) == min(budget, sum(1 for _ in all_paths(counts, s, max_depth)))
    brute = dict(all_paths(counts, s, max_depth))
    paths = node_paths(spec)
    assert len(set(paths)) == len(paths)
    for path, score in zip(paths, spec.scores):
      assert score == pytest.approx(brute[path], rel=1e-12)
    assert spec.score == pytest.approx(sum(spec.scores))
    # Best first: no path left out scores above a node taken, so the score sum is the most
    # any budget-sized tree reaches (scores never grow with depth).
    best = sorted(brute.values(), reverse=True)[:budget]
    assert spec.score == pytest.approx(sum(best), rel=1e-12)
    assert index.speculate(ctx, budget, max_match=max_match) == spec


def test_speculation_example_and_limits():
  index = SuffixIndex(max_depth=4)
  index.extend("x", [1, 2, 3, 1, 2, 4, 1, 2, 3])
  # After (1, 2): 3 twice, 4 once. (1, 2, 3) continues with 1 once (the last 3 ends the text).
  spec = index.speculate([9, 1, 2], budget=3)
  assert spec.match_len == 2
  assert spec.tokens == [3, 1, 4] and spec.parents == [-1, 0, -1]
  assert spec.scores == pytest.approx([2 / 3, 2 / 3, 1 / 3])
  assert spec.score == pytest.approx(5 / 3)
  assert index.speculate([9, 1, 2], 3, max_depth=1).tokens == [3, 4]
  assert index.speculate([9, 1, 2], 3, min_score=0.5).tokens == [3, 1]
  assert index.speculate([9, 1, 2], 0).tokens == []
  # max_match=1 matches (2,) alone although (7, 2) would not match anyway.
  assert index.speculate([7, 2], 1, max_match=1).match_len == 1
  assert index.speculate([5, 6], 4) == Speculation([], [], [], 0, 0.0)
  assert index.speculate([], 4).match_len == 0
  assert index.speculate([1, 2], 4, max_match=0).match_len == 0


def test_match_needs_a_continuation():
  index = SuffixIndex(max_depth=8)
  index.extend(0, [5, 6, 7])
  # (6, 7) and (7,) occur, but only at the end of the text: nothing to continue with.
  assert index.speculate([6, 7], 4).match_len == 0
  index.extend(1, [7, 8])
  spec = index.speculate([6, 7], 4)
  assert spec.match_len == 1 and spec.tokens == [8]
  # Suffixes are capped at max_depth - 1 so the match can continue.
  index = SuffixIndex(max_depth=3)
  index.extend(0, [1, 2, 3, 1, 2, 3])
  spec = index.speculate([1, 2, 3, 1, 2], 4)
  assert spec.match_len == 2 and spec.tokens == [3]


def test_eviction_oldest_first_under_the_cap():
  rng = np.random.default_rng(3)
  max_depth, cap = 4, 40
  index = SuffixIndex(max_depth, max_nodes=cap)
  seqs, order, evicted = {}, [], 0  # order: held ids by first extend
  for step in range(60):
    sid = int(rng.integers(0, 8))
    chunk = [int(t) for t in rng.integers(0, 4, size=int(rng.integers(1, 4)))]
    if sid not in index:  # new, or evicted earlier: starts afresh as the newest
      seqs[sid] = []
      order.append(sid)
    seqs[sid] += chunk
    index.extend(sid, chunk)
    assert index.nodes <= cap and sid in index
    # The evicted ids are the oldest: a prefix of the first-extend order, which skips the id
    # being extended.
    alive = [s in index for s in order if s != sid]
    assert alive == sorted(alive), step
    evicted += alive.count(False)
    order = [s for s in order if s in index]
    assert len(index) == len(order)
    if all(len(seqs[s]) < 10 for s in order):  # short enough that no front was trimmed
      assert_counts(index, [seqs[s] for s in order], max_depth, 4)
  assert evicted >= 5


def test_a_long_sequence_trims_its_own_front():
  rng = np.random.default_rng(5)
  max_depth, cap = 5, 15
  index = SuffixIndex(max_depth, max_nodes=cap)
  index.extend("old", [1, 2, 3])
  seq = [int(t) for t in rng.integers(0, 6, size=200)]
  for i in range(0, len(seq), 7):
    index.extend("new", seq[i:i + 7])
    assert index.nodes <= cap
  assert "old" not in index and "new" in index
  held = sum(index.count([t]) for t in range(6))  # positions still counted
  assert max_depth - 1 <= held < len(seq)
  assert_counts(index, [seq[len(seq) - held:]], max_depth, 6)
  spec = index.speculate(seq, 4)  # still usable at the end of the sequence
  assert all(-1 <= p < j for j, p in enumerate(spec.parents))


def test_threads_match_sequential_insertion():
  rng = np.random.default_rng(11)
  max_depth = 6
  seqs = random_seqs(rng, 4, 300, 5)
  index = SuffixIndex(max_depth)
  errors = []

  def lane(i):
    try:
      for j in range(0, len(seqs[i]), 2):
        index.extend(i, seqs[i][j:j + 2])
        if j % 20 == 0:
          index.speculate(seqs[i][:j + 2], 8)
    except Exception as e:  # surfaced below: a thread's exception does not fail the test
      errors.append(e)

  threads = [threading.Thread(target=lane, args=(i,)) for i in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors
  sequential = SuffixIndex(max_depth)
  for i, s in enumerate(seqs):
    sequential.extend(i, s)
  assert index.nodes == sequential.nodes
  for s, c in substring_counts(seqs, max_depth).items():
    assert index.count(s) == c
  ctx = seqs[0][:50]
  assert index.speculate(ctx, 10) == sequential.speculate(ctx, 10)


def test_invalid_sizes():
  with pytest.raises(ValueError, match="max_depth"):
    SuffixIndex(max_depth=1)
  with pytest.raises(ValueError, match="max_nodes"):
    SuffixIndex(max_depth=8, max_nodes=35)
  SuffixIndex(max_depth=8, max_nodes=36)
