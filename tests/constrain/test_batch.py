"""fill_batch against per-session lookahead: disabled rows, ragged draft extents, batch matcher."""

from __future__ import annotations

import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax.mask_layout import READY, UNREACHABLE
from tests.constrain.conftest import toy_vocab

GBNF = 'root ::= "{" ("\\"a\\":" | "\\"b\\":") ("1" | "12") "}"\n'


def _sessions(vocab):
  c = ic.ConstraintCompiler(vocab)
  grammar = c.compile(ic.OutputConstraint.grammar(GBNF))
  choice = c.compile(ic.OutputConstraint.choice(["ab", "abc", "ba"]))
  return [grammar.new_session(), None, choice.new_session(), grammar.new_session(prefix=b'{"'),
          None, choice.new_session()]


@pytest.mark.parametrize("threads", [0, 2])
def test_fill_batch_equals_rowwise_lookahead(threads):
  vocab = toy_vocab()
  sessions = _sessions(vocab)
  reference = _sessions(vocab)
  k = 4
  drafts = np.array([[15, 2, 16, 21], [2, 2, 2, 2], [5, 4, 0, 2], [2, 16, 22, 9], [0, 0, 0, 0],
                     [3, 3, 3, 3]], np.int32)
  n_drafts = np.array([4, 4, 3, 2, 0, 1])
  out = np.full((len(sessions), k + 1, vocab.mask_words), -5, np.int32)
  states, enabled = ic.fill_batch(sessions, drafts, n_drafts, out, batch_threads=threads)
  assert list(enabled) == [s is not None for s in sessions]
  for b, ref in enumerate(reference):
    if ref is None:
      assert (out[b] == -5).all() and (states[b] == READY).all()  # disabled: not filled
      continue
    n = int(n_drafts[b])
    buf = np.zeros((n + 1, vocab.mask_words), np.int32)
    want = ref.lookahead(drafts[b, :n], out=buf)
    assert np.array_equal(states[b, :n + 1], want)
    assert np.array_equal(out[b, :n + 1], buf)
    assert (states[b, n + 1:] == UNREACHABLE).all() and (out[b, n + 1:] == 0).all()
  assert list(states[0]) == [READY] * 5                     # {" a ": 1 then the bonus
  assert list(states[2]) == [READY, READY, READY, UNREACHABLE, UNREACHABLE]  # "ab" "c" EOS
  # A second fill (now with cached committed masks) gives the same answer.
  out2 = np.zeros_like(out)
  states2, _ = ic.fill_batch(sessions, drafts, n_drafts, out2, batch_threads=threads)
  assert np.array_equal(states2, states)
  assert all(np.array_equal(out2[b], out[b]) for b in range(len(sessions)) if sessions[b])


def test_fill_batch_shape_checks():
  vocab = toy_vocab()
  sessions = _sessions(vocab)[:2]
  out = np.zeros((2, 3, vocab.mask_words), np.int32)
  with pytest.raises(ValueError):
    ic.fill_batch(sessions, np.zeros((2, 3), np.int32), [0, 0], out)  # K mismatch
  with pytest.raises(ValueError):
    ic.fill_batch(sessions, np.zeros((2, 2), np.int32), [3, 0], out)  # n_drafts > K
  with pytest.raises(ValueError):
    ic.fill_batch(sessions, np.zeros((2, 2), np.int32), [0, 0], out.astype(np.int64))


def test_fill_batch_qwen3_batch_matcher(qwen3_vocab):
  c = ic.ConstraintCompiler(qwen3_vocab)
  compiled = c.compile(ic.OutputConstraint.json_schema('{"type":"array","items":{"type":"integer"}}'))
  sessions = [compiled.new_session() for _ in range(8)]
  for i, s in enumerate(sessions):
    s.accept([qwen3_vocab.token_id("[")] + [qwen3_vocab.token_id(str(i))] * (i % 3))
  drafts = np.full((8, 2), qwen3_vocab.token_id(","), np.int32)
  out_a = np.zeros((8, 3, qwen3_vocab.mask_words), np.int32)
  out_b = np.zeros_like(out_a)
  sa, _ = ic.fill_batch(sessions, drafts, np.full(8, 2), out_a)
  fresh = [compiled.new_session(prefix=qwen3_vocab.decode(
      [qwen3_vocab.token_id("[")] + [qwen3_vocab.token_id(str(i))] * (i % 3))) for i in range(8)]
  assert all(s._frontier is None for s in fresh)  # position 0 comes from the batch matcher
  sb, _ = ic.fill_batch(fresh, drafts, np.full(8, 2), out_b, batch_threads=2)
  assert np.array_equal(sa, sb) and np.array_equal(out_a, out_b)
