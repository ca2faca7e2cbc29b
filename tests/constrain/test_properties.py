"""Hypothesis properties of session transactions, checked against a brute-force language oracle.

Properties: lookahead leaves no trace; preview+discard is a no-op; preview+commit equals
accepting token by token; lookahead states/masks and preview counts equal the oracle's.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infernix_jax import constrain as ic
from infernix_jax.mask_layout import DEAD_END, READY, UNREACHABLE
from tests.constrain.conftest import TOY_EOS, TOY_TOKENS, toy_vocab
from tests.constrain.test_session import GBNF, gbnf_language, mask_set, oracle_legal

V = len(TOY_TOKENS)
VOCAB = toy_vocab()
COMPILER = ic.ConstraintCompiler(VOCAB)
CASES = {
    "gbnf": (ic.OutputConstraint.grammar(GBNF), gbnf_language()),
    "choice": (ic.OutputConstraint.choice(["ab", "abc", "bq", "", "{\"a\":1}"]),
               {b"ab", b"abc", b"bq", b"", b'{"a":1}'}),
}
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

# Token ids biased towards the ones the languages use, plus EOS, control and out-of-range ids.
token = st.one_of(st.sampled_from([0, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 15, 16, 17, 18, 21,
                                   22]), st.integers(-2, V + 3))
noise = st.lists(token, max_size=9)


@st.composite
def walks(draw, case: str):
  """A mostly-legal token walk for ``case``'s language with an optional noisy tail."""
  language = CASES[case][1]
  prefix, out = b"", []
  for _ in range(draw(st.integers(0, 8))):
    legal = sorted(oracle_legal(language, prefix) - {TOY_EOS})
    if not legal:
      break
    t = draw(st.sampled_from(legal))
    out.append(t)
    prefix += TOY_TOKENS[t]
  if TOY_EOS in oracle_legal(language, prefix) and draw(st.booleans()):
    out.append(TOY_EOS)  # end where the language may end (then anything after is Unreachable)
  return out + draw(st.lists(token, max_size=3))


def case_and_walks(n: int):
  return st.sampled_from(sorted(CASES)).flatmap(
      lambda c: st.tuples(st.just(c), *[st.one_of(walks(c), noise) for _ in range(n)]))


def oracle_prefix(language, toks) -> tuple[int, bytes, bool]:
  """(accepted count, accepted bytes, terminated) of the longest legal prefix of ``toks``."""
  prefix, n = b"", 0
  for t in toks:
    if t not in oracle_legal(language, prefix):
      break
    n += 1
    if t == TOY_EOS:
      return n, prefix, True
    prefix += TOY_TOKENS[t]
  return n, prefix, False


def oracle_lookahead(language, prefix: bytes, terminated: bool, drafts):
  k = len(drafts)
  states = [UNREACHABLE] * (k + 1)
  masks = [set() for _ in range(k + 1)]
  if terminated:
    return states, masks
  for i in range(k + 1):
    legal = oracle_legal(language, prefix)
    if not legal:
      states[i] = DEAD_END
      break
    states[i], masks[i] = READY, legal
    if i == k or drafts[i] not in legal or drafts[i] == TOY_EOS:
      break
    prefix += TOY_TOKENS[drafts[i]]
  return states, masks


def session_view(s, drafts):
  buf = np.zeros((len(drafts) + 1, 1), np.int32)
  states = s.lookahead(drafts, out=buf)
  return list(states), [mask_set(row) for row in buf], s.complete, s.terminated


def fresh(case, history):
  s = COMPILER.compile(CASES[case][0]).new_session()
  s.accept(history)
  return s


@SETTINGS
@given(case_and_walks(3))
def test_lookahead_matches_oracle_and_leaves_no_trace(args):
  case, history, drafts, drafts2 = args
  language = CASES[case][1]
  s = fresh(case, history)
  n, prefix, terminated = oracle_prefix(language, history)
  assert s.tokens_committed == n and s.terminated == terminated
  states, masks = oracle_lookahead(language, prefix, terminated, drafts)
  got = session_view(s, drafts)
  assert got[0] == [int(x) for x in states]
  assert [m if st_ == READY else set() for m, st_ in zip(got[1], got[0])] == masks
  # No trace: a second lookahead equals a fresh session's with the same history.
  assert session_view(s, drafts2) == session_view(fresh(case, history), drafts2)


@SETTINGS
@given(case_and_walks(3))
def test_preview_discard_is_noop(args):
  case, history, produced, drafts = args
  s = fresh(case, history)
  s.preview(produced)
  s.discard()
  assert session_view(s, drafts) == session_view(fresh(case, history), drafts)
  assert s.forced_tokens(4) == fresh(case, history).forced_tokens(4)


@SETTINGS
@given(case_and_walks(3))
def test_preview_commit_equals_accepting(args):
  case, history, produced, drafts = args
  language = CASES[case][1]
  a = fresh(case, history)
  r = a.preview(produced)
  a.commit()
  b = fresh(case, history)
  count = 0
  for t in produced:  # token by token, each step previewed and committed alone
    step = b.preview([t])
    if step.accepted == 0:
      b.discard()
      break
    b.commit()
    count += 1
    if step.terminated:
      break
  assert r.accepted == count
  assert session_view(a, drafts) == session_view(b, drafts)
  # And both equal the oracle on history + produced.
  n_hist, _, term = oracle_prefix(language, history)
  if not term:
    want = oracle_prefix(language, history[:n_hist] + produced)[0] - n_hist
    assert r.accepted == want
  assert r.complete == a.complete and r.terminated == a.terminated
