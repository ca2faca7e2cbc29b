"""Device-resident trie automaton (jnp) against the host TrieAutomaton and TrieSession."""

from __future__ import annotations

import random

import jax
import numpy as np
import pytest

from infernix_jax.constrain import trie
from infernix_jax.constrain.vocab import Vocabulary
from infernix_jax.runtime import device_automaton as da

ALPHABET = [b"a", b"b", b"c", b".", b"_", "\u00e9".encode()]


def _vocab(seed: int, n: int = 1000) -> Vocabulary:
  """Random byte tokens over the alphabet (V = n + 3, not a multiple of 32)."""
  rng = random.Random(seed)
  toks = {bytes([c]) for a in ALPHABET for c in a}
  while len(toks) < n:
    toks.add(b"".join(rng.choice(ALPHABET) for _ in range(rng.randint(2, 6))))
  toks = sorted(toks) + [b"<eos>", b"<end>", b"abc"]
  v = len(toks)
  return Vocabulary.from_tokens(toks, eos_ids=[v - 3, v - 2], control=[v - 1])


def _values(seed: int, k: int) -> list[str]:
  rng = random.Random(seed)
  out = {b"".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 12))) for _ in range(k)}
  return sorted(v.decode("utf-8", "ignore") for v in out) + ["ab", "ab.c", "abc"]


@pytest.fixture(scope="module", params=[(0, 40), (1, 300)], ids=["K40", "K300"])
def compiled(request):
  seed, k = request.param
  vocab = _vocab(seed)
  return vocab, trie.compile_choice(vocab, _values(seed, k))


@pytest.mark.parametrize("dense", [True, False], ids=["dense", "compact"])
def test_step_and_mask_equal_host(compiled, dense):
  vocab, c = compiled
  a = c.automaton
  auto = da.DeviceAutomaton.from_tables(c.export_tables(dense=dense))
  assert (auto.masks is not None) == dense
  states = np.arange(a.n_nodes + 2)
  host = np.zeros((states.size, a.mask_words), np.int32)
  a.fill_many(states, host)
  np.testing.assert_array_equal(np.asarray(jax.jit(da.mask)(auto, states)), host)
  rng = np.random.default_rng(0)
  nodes, toks = [], []
  for n in range(a.n_nodes + 2):
    legal = a.legal_ids(n).tolist()
    extra = rng.integers(-2, vocab.size + 3, 4).tolist()     # incl. ids outside 0..V-1
    nodes += [n] * (len(legal) + len(extra))
    toks += legal + extra
  got = np.asarray(jax.jit(da.step)(auto, np.array(nodes), np.array(toks)))
  want = np.array([a.step(n, t) if 0 <= t < vocab.size else a.dead for n, t in zip(nodes, toks)])
  np.testing.assert_array_equal(got, want)
  assert int(da.step(auto, a.end, vocab.eos_ids[0])) == a.dead
  assert int(da.step(auto, -5, 0)) == a.dead


def test_lookahead_equals_host_sessions(compiled):
  vocab, c = compiled
  a = c.automaton
  auto = da.DeviceAutomaton.from_tables(c.export_tables(dense=False))
  rng = random.Random(3)
  b, k = 16, 4
  sessions, drafts, n_drafts = [], [], []
  for i in range(b):
    s = c.new_session()
    for _ in range(rng.randint(0, 3)):          # move to a random committed state
      legal = a.legal_ids(s.node)
      if legal.size:
        s.accept([int(legal[rng.randrange(legal.size)])])
    node, row = s.node, []
    for _ in range(k):
      legal = a.legal_ids(node) if node < a.n_nodes else np.zeros(0, np.int32)
      tok = int(legal[rng.randrange(legal.size)]) if legal.size and rng.random() < 0.85 else (
          rng.randrange(vocab.size))
      row.append(tok)
      node = a.step(node, tok) if node < a.n_nodes else a.dead
    sessions.append(s)
    drafts.append(row)
    n_drafts.append(rng.randint(0, k))
  masks, states, path = jax.jit(da.lookahead)(
      auto, np.array([s.node for s in sessions]), np.array(drafts), np.array(n_drafts))
  masks, states = np.asarray(masks), np.asarray(states)
  for i, s in enumerate(sessions):
    n = n_drafts[i]
    buf = np.full((n + 1, a.mask_words), -1, np.int32)
    want = s.lookahead(drafts[i][:n], buf)
    np.testing.assert_array_equal(states[i, :n + 1], want)
    np.testing.assert_array_equal(masks[i, :n + 1], buf)
    assert (states[i, n + 1:] == 2).all() and not masks[i, n + 1:].any()
  assert np.asarray(path).shape == (b, k + 1)


def test_combined_automata_equal_each_host_session():
  """Several tries in one device automaton (rows of different choice sets in one batch):
  each row's device lookahead equals its own host session's lookahead."""
  vocab = _vocab(2)
  parts = [trie.compile_choice(vocab, _values(s, k)) for s, k in ((3, 20), (4, 150), (5, 5))]
  tables, offsets = trie.tables.combine([c.export_tables(dense=False) for c in parts])
  auto = da.DeviceAutomaton.from_tables(tables)
  rng = np.random.default_rng(1)
  k, rows = 4, 24
  nodes, drafts, n, want_m, want_s = [], [], [], [], []
  for r in range(rows):
    c = parts[r % len(parts)]
    s = c.new_session()
    for _ in range(int(rng.integers(0, 3))):  # advance along a legal path
      legal = [t for t in c.automaton.legal_ids(s.node).tolist() if t not in vocab.eos_ids]
      if legal:
        s.accept([int(rng.choice(legal))])
    chain = []
    node = s.node
    for _ in range(k):  # mostly legal drafts, sometimes a random one
      legal = c.automaton.legal_ids(node).tolist()
      t = int(rng.choice(legal)) if legal and rng.random() < 0.8 else int(rng.integers(0, vocab.size))
      chain.append(t)
      node = c.automaton.step(node, t) if node < c.automaton.end else node
    m = int(rng.integers(0, k + 1))
    out = np.zeros((k + 1, vocab.mask_words), np.int32)
    st = s.lookahead(np.array(chain[:m]), out=out[:m + 1])
    states = np.full(k + 1, 2, np.int8)
    states[:m + 1] = st
    nodes.append(offsets[r % len(parts)] + s.node)
    drafts.append(chain)
    n.append(m)
    want_m.append(out)
    want_s.append(states)
  masks, states, _ = jax.jit(da.lookahead)(auto, np.array(nodes), np.array(drafts), np.array(n))
  np.testing.assert_array_equal(np.asarray(states), np.array(want_s))
  np.testing.assert_array_equal(np.asarray(masks), np.array(want_m))
