"""TrieSession against the XGrammar-backed XGrammarSession (differential), plus backend dispatch."""

from __future__ import annotations

import random

import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax import mask_layout
from infernix_jax.constrain import trie
from infernix_jax.constrain.batch import fill_batch
from infernix_jax.constrain.backends.xgrammar import XGrammarSession
from infernix_jax.constrain.trie.session import TrieSession

from .test_trie_xgrammar import _EXTRAS, tool_names

VALUES = tool_names(200, 1) + _EXTRAS


@pytest.fixture(scope="module")
def pair(qwen3_vocab):
  compiler = ic.ConstraintCompiler(qwen3_vocab)
  spec = ic.OutputConstraint.choice(VALUES)
  return qwen3_vocab, compiler, compiler.compile(spec, backend="trie"), compiler.compile(
      spec, backend="xgrammar")


def _random_drafts(rng, vocab, session, a, k):
  """A draft chain: mostly legal tokens of the trie path, sometimes random or EOS."""
  node = session.node
  out = []
  for _ in range(k):
    legal = a.legal_ids(node) if node < a.n_nodes else np.zeros(0, np.int32)
    r = rng.random()
    if legal.size and r < 0.8:
      tok = int(legal[rng.randrange(legal.size)])
    elif r < 0.9:
      tok = int(vocab.eos_ids[0])
    else:
      tok = rng.randrange(vocab.size)
    out.append(tok)
    node = a.step(node, tok) if node < a.n_nodes else a.dead
  return out


def test_dispatch_backends(pair):
  vocab, compiler, t, x = pair
  assert t.backend == "trie" and isinstance(t.grammar, trie.CompiledTrie)
  assert t.cache_status == "built" and x.backend == "xgrammar"
  again = compiler.compile(ic.OutputConstraint.choice(list(reversed(VALUES))), backend="trie")
  assert again.cache_status == "hit" and again.grammar is t.grammar
  same = compiler.compile(ic.OutputConstraint.choice(VALUES), backend="trie")   # exact-source alias
  assert same.cache_status == "hit" and same.grammar is t.grammar
  big = ic.OutputConstraint.choice(tool_names(trie.threshold(), 2))
  small = ic.OutputConstraint.choice(tool_names(trie.threshold() - 1, 2))
  assert compiler.compile(big).backend == "trie"
  assert compiler.compile(small).backend == "xgrammar"
  with pytest.raises(ValueError):
    compiler.compile(big, backend="fsm")
  with pytest.raises(ic.UnsupportedConstraintError):
    compiler.compile(ic.OutputConstraint.regex("a+"), backend="trie")
  with pytest.raises(ic.ChoiceError):
    compiler.compile(ic.OutputConstraint.choice([]), backend="trie")
  assert compiler.stats.hits >= 1 and compiler.stats.built >= 2


def test_lookahead_preview_commit_equal_xgrammar(pair):
  vocab, _, t, x = pair
  a = t.grammar.automaton
  rng = random.Random(0)
  k = 5
  buf_t = np.zeros((k + 1, vocab.mask_words), np.int32)
  buf_x = np.zeros((k + 1, vocab.mask_words), np.int32)
  for _ in range(60):
    st, sx = t.new_session(), x.new_session()
    for _ in range(12):
      drafts = _random_drafts(rng, vocab, st, a, k)
      buf_t.fill(-1)
      buf_x.fill(-1)
      np.testing.assert_array_equal(st.lookahead(drafts, buf_t), sx.lookahead(drafts, buf_x))
      np.testing.assert_array_equal(buf_t, buf_x)
      assert st.forced_tokens(4) == sx.forced_tokens(4)
      n = rng.randint(0, k)
      rt, rx = st.preview(drafts[:n]), sx.preview(drafts[:n])
      assert rt == rx
      if rng.random() < 0.3:
        st.discard()
        sx.discard()
      else:
        st.commit()
        sx.commit()
      assert (st.complete, st.terminated, st.can_continue, st.tokens_committed) == (
          sx.complete, sx.terminated, sx.can_continue, sx.tokens_committed)
      if st.terminated:
        break


def test_prefix_rollback_and_errors(pair):
  vocab, _, t, x = pair
  buf_t = np.zeros(vocab.mask_words, np.int32)
  buf_x = np.zeros(vocab.mask_words, np.int32)
  for prefix in (b"slack.", "caf\u00e9".encode()[:4], b"get_user", "\u65e5\u672c"):
    st, sx = t.new_session(prefix=prefix), x.new_session(prefix=prefix)
    st.fill_mask(buf_t)
    sx.fill_mask(buf_x)
    np.testing.assert_array_equal(buf_t, buf_x)
  for bad in (b"slack.zzz", b"\xff"):
    with pytest.raises(ic.PrefixError) as et:
      t.new_session(prefix=bad)
    with pytest.raises(ic.PrefixError) as ex:
      x.new_session(prefix=bad)
    assert et.value.location == ex.value.location
  s = t.new_session()
  start = s.node
  toks = vocab.token_id("get"), vocab.token_id("_user")
  r = s.accept(list(toks))
  assert r.accepted == 2 and r.complete and not r.terminated and s.can_continue  # get_user_info
  s.rollback(1)
  assert s.node == t.grammar.automaton.walk_bytes(b"get")
  s.rollback(1)
  assert s.node == start
  with pytest.raises(ValueError):
    s.rollback(1)
  s.preview([toks[0]])
  with pytest.raises(RuntimeError):
    s.lookahead([], np.zeros((1, vocab.mask_words), np.int32))


def test_fill_batch_mixes_backends(pair):
  vocab, _, t, x = pair
  sessions = [t.new_session(), None, x.new_session(), t.new_session(prefix=b"get")]
  drafts = np.array([[vocab.token_id("get"), vocab.token_id("_user")]] * 4, np.int32)
  n = np.array([2, 0, 2, 1])
  out = np.zeros((4, 3, vocab.mask_words), np.int32)
  states, enabled = fill_batch(sessions, drafts, n, out)
  assert enabled.tolist() == [True, False, True, True]
  np.testing.assert_array_equal(states[0], states[2])
  np.testing.assert_array_equal(out[0], out[2])
  # after "get", draft "get" is illegal: position 0 Ready, then Unreachable (n = 1)
  assert states[3].tolist() == [mask_layout.READY, mask_layout.UNREACHABLE,
                                mask_layout.UNREACHABLE]
  assert not out[3, 1:].any()
  assert isinstance(sessions[0], TrieSession) and isinstance(sessions[2], XGrammarSession)


def test_vectorized_fill_batch_equals_rowwise(pair):
  vocab, compiler, t, _ = pair
  other = compiler.compile(ic.OutputConstraint.choice(tool_names(300, 5)), backend="trie")
  rng = random.Random(4)
  b, k = 24, 4
  sessions, drafts = [], []
  for i in range(b):
    if i % 7 == 3:
      sessions.append(None)
      drafts.append([0] * k)
      continue
    c = t if i % 2 else other
    s = c.new_session()
    for _ in range(rng.randint(0, 4)):     # random committed state (maybe terminated)
      legal = c.grammar.automaton.legal_ids(s.node)
      if legal.size and not s.terminated:
        s.accept([int(legal[rng.randrange(legal.size)])])
    sessions.append(s)
    drafts.append(_random_drafts(rng, vocab, s, c.grammar.automaton, k))
  drafts = np.array(drafts, np.int32)
  n = np.array([rng.randint(0, k) for _ in range(b)])
  want_out = np.full((b, k + 1, vocab.mask_words), 7, np.int32)
  got_out = want_out.copy()
  want = fill_batch(sessions, drafts, n, want_out)
  got = trie.fill_batch(sessions, drafts, n, got_out)
  np.testing.assert_array_equal(got[0][want[1]], want[0][want[1]])
  np.testing.assert_array_equal(got[1], want[1])
  np.testing.assert_array_equal(got_out[want[1]], want_out[want[1]])
  assert (got_out[~want[1]] == 7).all()       # unconstrained rows untouched
  only = [s for s in sessions if s is not None and s.automaton is t.grammar.automaton]
  m = len(only)
  out1 = np.zeros((m, k + 1, vocab.mask_words), np.int32)
  out2 = np.zeros_like(out1)
  st1, _ = trie.fill_batch(only, drafts[:m], n[:m], out1)      # single automaton: in place
  st2, _ = fill_batch(only, drafts[:m], n[:m], out2)
  np.testing.assert_array_equal(st1, st2)
  np.testing.assert_array_equal(out1, out2)
