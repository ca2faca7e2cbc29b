"""Draft trees: the grammar's walk of a tree, pruning, the verify's tree shape, the accepted
path's KV, the n-gram and suffix trees, and the engine's tree rounds against ordinary
decoding (greedy token for token; sampled: the exactness matrix of test_exactness.py)."""

from __future__ import annotations

import dataclasses
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax import mask_layout
from infernix_jax.constrain import trie
from infernix_jax.constrain import tree as ctree
from infernix_jax.runtime import _tree
from infernix_jax.runtime import device_automaton as da
from infernix_jax.runtime.drafters.ngram import NGramIndex
from infernix_jax.runtime.types import GenerationRequest, SamplingOptions
from infernix_jax.testing import exact_oracle as h

CHOICES = ["abc", "ab", "ba1", "cab", "x{y}", "abab", "b{1}"]


def random_tree(rng: random.Random, n: int, vocab: int) -> tuple[list[int], list[int]]:
  parents = [rng.randrange(-1, j) if j else -1 for j in range(n)]
  return [rng.randrange(vocab) for _ in range(n)], parents


def root_path(parents, j) -> list[int]:
  path = []
  while j >= 0:
    path.append(j)
    j = parents[j]
  return path[::-1]


@pytest.fixture(scope="module")
def choice_trie():
  vocab = h.toy_vocab()
  return vocab, trie.compile_choice(vocab, CHOICES)


def test_tree_lookahead_equals_each_nodes_chain_lookahead(choice_trie):
  """Every node's row and state is what the chain lookahead of its own root path gives at
  its end (independent oracle: one chain call per node), the root's is the committed
  state's, rows past n are zero, and the session is left as it was."""
  vocab, c = choice_trie
  rng = random.Random(0)
  w = mask_layout.mask_words(vocab.size)
  for case in range(60):
    s = c.new_session()
    if case % 3:
      s.accept([rng.choice([1, 2, 4])])  # a, b or ab: some committed state
    n = rng.randint(0, 7)
    drafts, parents = random_tree(rng, n, vocab.size)
    out = np.zeros((9, w), np.int32)
    states = ctree.tree_lookahead(s, drafts + [0] * (8 - n), parents + [-1] * (8 - n), n, out)
    for j in range(-1, n):
      path = root_path(parents, j) if j >= 0 else []
      buf = np.zeros((len(path) + 1, w), np.int32)
      want = s.lookahead([drafts[i] for i in path], out=buf)
      np.testing.assert_array_equal(out[j + 1], buf[-1])
      assert states[j + 1] == want[-1]
    assert (out[n + 1:] == 0).all() and (states[n + 1:] == mask_layout.UNREACHABLE).all()


def test_prune_drops_illegal_nodes_and_their_subtrees(choice_trie):
  """Pruned: exactly the nodes with an illegal token on their root path (oracle: the
  choice set's prefixes); kept nodes renumbered parents first, with their own rows."""
  vocab, c = choice_trie
  legal_prefixes = {tuple(p) for choice in CHOICES for p in _token_prefixes(vocab, choice)}
  rng = random.Random(1)
  w = mask_layout.mask_words(vocab.size)
  for _ in range(80):
    n = rng.randint(1, 7)
    drafts, parents = random_tree(rng, n, 8)
    drafts = [[1, 2, 3, 4, 5, 6, 8, 10][t] for t in drafts]  # a, b, c, ab, ba, abc, {, 1
    s = c.new_session()
    mask = np.zeros((1, 8, w), np.int32)
    states = np.full((1, 8), mask_layout.UNREACHABLE, np.int8)
    pad = 7 - n
    states[0] = ctree.tree_lookahead(s, drafts + [0] * pad, parents + [-1] * pad, n, mask[0])
    got = _tree.prune(np.array([drafts + [0] * pad]), np.array([parents + [-1] * pad]),
                      np.array([n]), mask, states, np.array([True]))
    d2, p2, n2, m2, s2, pruned = got
    keep = [j for j in range(n) if tuple(drafts[i] for i in root_path(parents, j))
            in legal_prefixes]
    assert int(n2[0]) == len(keep) and int(pruned[0]) == n - len(keep)
    assert d2[0, :len(keep)].tolist() == [drafts[j] for j in keep]
    for new, old in enumerate(keep):  # the same node: same path, same row
      assert [d2[0, i] for i in root_path(p2[0].tolist(), new)] == [
          drafts[i] for i in root_path(parents, old)]
      np.testing.assert_array_equal(m2[0, new + 1], mask[0, old + 1])


def _token_prefixes(vocab, text: str):
  """Every token sequence spelling a prefix of `text` (the toy vocabulary is tiny)."""
  pieces = [(i, vocab.token_bytes[i]) for i in range(1, vocab.size)]
  out, stack = [], [((), b"")]
  target = text.encode()
  while stack:
    seq, got = stack.pop()
    out.append(seq)
    if got == target:
      out.append(seq + (0,))  # EOS after the whole choice
      continue
    for i, b in pieces:
      if b and target.startswith(got + b):
        stack.append((seq + (i,), got + b))
  return out


def test_tree_shape_depth_ancestors_and_chain_rows():
  rng = random.Random(2)
  for _ in range(20):
    n = rng.randint(0, 6)
    _, parents = random_tree(rng, n, 5)
    par = np.array([parents + [-1] * (6 - n)], np.int32)
    depth, anc = jax.device_get(_tree.tree_shape(jnp.asarray(par), jnp.array([n])))
    for t in range(1, n + 1):
      path = [0] + [j + 1 for j in root_path(parents, t - 1)]
      assert depth[0, t] == len(path) - 1
      assert sorted(np.flatnonzero(anc[0, t]).tolist()) == path
    for t in range(n + 1, 7):  # padding hangs off the anchor
      assert depth[0, t] == 1 and np.flatnonzero(anc[0, t]).tolist() == [0, t]
  rows = _tree.chain_rows(jnp.array([[3, 5, -1, -1]]), jnp.array([2]))
  assert rows.tolist() == [[0, 3, 5, 0]]


def test_compact_moves_the_accepted_path_and_nothing_else():
  """K/V of accepted nodes go to the chain's slots; other lanes' and committed slots keep
  theirs (numpy oracle)."""
  rng = np.random.default_rng(0)
  from infernix_jax.models import KVCache
  cfg, _ = h.tiny_model()
  cache = KVCache.init(cfg, batch=2, capacity=16)
  k = rng.normal(size=cache.k.shape).astype(np.float32)
  v = rng.normal(size=cache.v.shape).astype(np.float32)
  cache = dataclasses.replace(cache, k=jnp.asarray(k), v=jnp.asarray(v))
  lengths = np.array([3, 7], np.int32)
  path = np.array([[2, 4, 5, -1, -1], [1, -1, -1, -1, -1]], np.int32)  # node indices
  accepted = np.array([3, 0], np.int32)
  out = _tree.compact(cache, jnp.asarray(lengths), jnp.asarray(path), jnp.asarray(accepted))
  want = k.copy()
  for j, node in enumerate([2, 4, 5]):
    want[:, 0, 3 + 1 + j] = k[:, 0, 3 + node]
  np.testing.assert_array_equal(np.asarray(out.k), want)
  assert np.asarray(out.v)[:, 0, 4].tolist() == v[:, 0, 5].tolist()


def test_ngram_tree_merges_every_match_continuation():
  """Continuations of all matches of the suffix merged by count; one match: its chain."""
  ix = NGramIndex(3, 1)
  ix.extend([1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 1, 2, 3, 4, 7, 1, 2, 3])
  tokens, parents = ix.propose_tree(4, 3)
  assert tokens[0] == 4 and parents[0] == -1  # 4 follows two of the three matches
  assert set(zip(tokens, parents)) >= {(4, -1), (5, -1)} or len(tokens) == 4
  chain = NGramIndex(3, 1)
  chain.extend([5, 6, 7, 8, 5, 6])
  assert chain.propose_tree(5, 5) == ([7, 8, 5, 6], [-1, 0, 1, 2])
  assert chain.propose(5) == [7, 8, 5, 6]


def test_device_tree_lookahead_equals_host(choice_trie):
  vocab, c = choice_trie
  auto = da.DeviceAutomaton.from_tables(c.export_tables(dense=False))
  rng = random.Random(4)
  b, n_max = 12, 6
  w = mask_layout.mask_words(vocab.size)
  sessions, drafts, parents, ns, nodes = [], [], [], [], []
  want_m = np.zeros((b, n_max + 1, w), np.int32)
  want_s = np.zeros((b, n_max + 1), np.int8)
  for i in range(b):
    s = c.new_session()
    if i % 2:
      s.accept([rng.choice([1, 2])])
    n = rng.randint(0, n_max)
    d, p = random_tree(rng, n, vocab.size)
    d, p = d + [0] * (n_max - n), p + [-1] * (n_max - n)
    want_s[i] = ctree.tree_lookahead(s, d, p, n, want_m[i])
    drafts.append(d), parents.append(p), ns.append(n), nodes.append(s.node)
  got_m, got_s = jax.jit(da.tree_lookahead)(auto, np.array(nodes), np.array(drafts),
                                            np.array(parents), np.array(ns))
  np.testing.assert_array_equal(np.asarray(got_s), want_s)
  np.testing.assert_array_equal(np.asarray(got_m), want_m)


def _suffix_engine(lanes: int):
  from infernix_jax.runtime.build import EngineSpec, Target, build_engine
  cfg, model = h.tiny_model()
  spec = EngineSpec(drafter="suffix", drafter_options={"k": 4}, lanes=lanes, capacity=48,
                    compile_cache="")
  return build_engine(spec, target=Target(cfg=cfg, model=model, vocab=h.toy_vocab(),
                                          name="tiny")).engine


def test_suffix_history_is_keyed_shared_across_lanes_and_optional():
  """Requests of one constraint share their outputs: a later request drafts from an earlier
  one's output (more accepted than with draft_history=None, which reads nothing); lanes
  extending the same history at once stay exact (greedy = ordinary decoding); another key
  sees nothing of it."""
  cfg, model = h.tiny_model()
  vocab = h.toy_vocab()
  choice = ic.OutputConstraint.choice(CHOICES)
  prompt = [10, 11, 10]  # its greedy output "ba1" (2, 1, 10) is nowhere in the prompt
  [want] = h.exact_distribution(cfg, model, prompt, vocab, 8, 0.0,
                                choices=[c.encode() for c in CHOICES])
  engine = _suffix_engine(lanes=4)
  first = engine.generate([GenerationRequest(prompt, max_tokens=8, constraint=choice)
                           for _ in range(4)])  # four lanes extend one history together
  assert all(tuple(r.token_ids) == want for r in first)
  again, alone, other = engine.generate([
      GenerationRequest(prompt, max_tokens=8, constraint=choice),
      GenerationRequest(prompt, max_tokens=8, constraint=choice, draft_history=None),
      GenerationRequest(prompt, max_tokens=8, constraint=choice, draft_history="elsewhere")])
  assert tuple(again.token_ids) == tuple(alone.token_ids) == tuple(other.token_ids) == want
  assert again.accepted > alone.accepted and again.accepted > other.accepted
  state = engine._round_state.draft
  key = GenerationRequest(prompt, max_tokens=1, constraint=choice).history_key()
  assert set(state.histories) == {key, "elsewhere"} and len(state.histories[key]) == 5
  with pytest.raises(Exception, match="draft_history"):
    GenerationRequest(prompt, max_tokens=8, draft_history=3).validate()


def test_tree_drafters_refuse_trace_and_sampling_laws():
  from infernix_jax.constrain.errors import FeatureConflictError
  engine = _suffix_engine(lanes=1)
  with pytest.raises(FeatureConflictError, match="needs a chain drafter.*tree=false"):
    engine.submit(GenerationRequest([1, 2, 1], max_tokens=2, trace=True))
  with pytest.raises(FeatureConflictError, match="sampling_law='onestep' needs a chain"):
    engine.submit(GenerationRequest([1, 2, 1], max_tokens=2, sampling_law="onestep",
                                    constraint=ic.OutputConstraint.choice(CHOICES)))


@pytest.mark.parametrize("shape", ["dynamic", "topk"])
def test_grow_picks_candidates_like_a_best_first_oracle(shape):
  """`models.drafters.trees.grow` over per-position distributions (the block drafter's
  expansion) against a plain-Python best-first / breadth-first oracle, with depth limits."""
  from infernix_jax.models.drafters import trees
  rng = np.random.default_rng(5)
  b, k, v, width = 6, 5, 11, 3
  logits = rng.normal(size=(b, k, v)).astype(np.float32) * 2
  limit = np.array([5, 2, 1, 0, 3, 5], np.int32)
  rows = jnp.arange(b)
  def expand(c, ids, parents, depth, anc, j):  # position d's distribution at depth d
    return jnp.asarray(logits)[rows, jnp.minimum(depth[:, j], k - 1)], c

  ids, parents, n, _ = jax.jit(lambda lg, lim: trees.grow(lg, expand, (), lim, n=k,
                                                           width=width, shape=shape))(
      jnp.asarray(logits[:, 0]), jnp.asarray(limit))
  logp = np.asarray(jax.nn.log_softmax(jnp.asarray(logits), -1), np.float64)
  for r in range(b):
    cands = [(logp[r, 0, t], 1, t, -1) for t in np.argsort(-logp[r, 0])[:width]]
    want_ids, want_par = [], []
    while len(want_ids) < k:
      ok = [c for c in cands if c[1] <= limit[r]]
      if not ok:
        break
      best = max(ok, key=(lambda c: c[0]) if shape == "dynamic" else (lambda c: (-c[1], c[0])))
      cands.remove(best)
      score, depth, tok, par = best
      want_ids.append(int(tok)), want_par.append(par)
      j = len(want_ids) - 1
      pos = min(depth, k - 1)
      cands += [(score + logp[r, pos, t], depth + 1, t, j)
                for t in np.argsort(-logp[r, pos])[:width]]
    assert int(n[r]) == len(want_ids)
    assert ids[r, :len(want_ids)].tolist() == want_ids
    assert parents[r, :len(want_ids)].tolist() == want_par
