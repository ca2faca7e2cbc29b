"""The one definition of accepted length (`runtime.accepted_length`): (accepted drafts + rounds)
/ rounds, with the rounds that EOS, a stop string and max_tokens end counted as
`RoundStat` records them.

Oracle: the tiny target's greedy output for one prompt (checked first) and drafts that are
that output followed by EOS; for each case the rounds and the accepted length below are
worked out by hand from the round rules (K = 3 drafts; the host drafts at most
max_tokens - len(output) - 1; tokens after an accepted EOS are not produced).
"""

from __future__ import annotations

import functools

import pytest

from experiments.studies import decode
from infernix_jax.runtime import (Engine, FinishReason, GenerationRequest, RoundStat,
                                  SamplingOptions, accepted_length)
from infernix_jax.testing import exact_oracle as h
from tests.runtime import _stop_oracle
from tests.runtime._scripted import Scripted

K = 3
EOS = 0
GREEDY = SamplingOptions(temperature=0.0, frequency_penalty=1.0)
PROMPT = [13]
# The tiny target's greedy output for PROMPT ("yybbbbaba"), then EOS.
REFERENCE = [13, 13, 2, 2, 2, 5, 5]
FIRST = [K]  # drafts of the first round (later rounds draft up to their limit)


def _script(context, limit):
  """The reference future, EOS, then two ids the target never reaches."""
  done = len(context) - len(PROMPT)
  drafts = (REFERENCE + [EOS, 7, 7])[done:][:limit]
  return drafts[:FIRST[0]] if done == 0 else drafts


@functools.lru_cache(maxsize=None)
def _engine() -> Engine:
  cfg, model = h.tiny_model()
  return Engine(model, h.toy_vocab(), Scripted(k=K, script=_script), lanes=1, capacity=40)


def test_counts_of_rounds():
  assert accepted_length(0, 0) == 0.0
  assert accepted_length(0, 5) == 1.0  # ordinary decoding
  assert accepted_length(3 + 3 + 1, 3) == pytest.approx(10 / 3)


# (first round's drafts, max_tokens, stop strings) -> (rounds, output tokens, accepted length)
CASES = {
    # the target's EOS is the second round's bonus: it counts as that round's token
    "eos bonus": ((3, 20, ()), ([(3, 3), (3, 3)], 7, (6 + 2) / 2)),
    # the third round drafts EOS, 7, 7: EOS accepted, nothing after it; the round keeps one
    # draft and counts 2
    "eos first draft": ((2, 20, ()), ([(2, 2), (3, 3), (3, 1)], 7, (6 + 3) / 3)),
    # the third round drafts 5, EOS, 7: keeps two drafts, counts 3
    "eos second draft": ((1, 20, ()), ([(1, 1), (3, 3), (3, 2)], 7, (6 + 3) / 3)),
    # max_tokens 6: the last round may draft 6 - 4 - 1 = 1 and commits 2, the sixth token
    "max_tokens": ((3, 6, ()), ([(3, 3), (1, 1)], 6, (4 + 2) / 2)),
    "max_tokens short rounds": ((2, 6, ()), ([(2, 2), (2, 2)], 6, (4 + 2) / 2)),
    # "bbb" completes with the fifth token, the second round's first draft: the round keeps
    # that draft and counts 2
    "stop string": ((3, 20, ("bbb",)), ([(3, 3), (3, 1)], 5, (4 + 2) / 2)),
}


@pytest.mark.parametrize("case", CASES)
def test_rounds_that_eos_max_tokens_and_stop_strings_end(case):
  (first, max_tokens, stop), (rounds, tokens, want) = CASES[case]
  engine = _engine()
  FIRST[0] = 0
  plain = engine.generate([GenerationRequest(PROMPT, max_tokens=20, sampling=GREEDY)])[0]
  assert (plain.token_ids, plain.finish_reason) == (REFERENCE, FinishReason.STOP), (
      "the tiny target's greedy output changed: the cases are worked out for REFERENCE")
  FIRST[0] = first
  r = engine.generate([GenerationRequest(PROMPT, max_tokens=max_tokens, sampling=GREEDY,
                                         stop=stop)])[0]
  assert r.error is None
  assert r.token_ids == REFERENCE[:tokens]
  assert r.rounds == [RoundStat(d, a) for d, a in rounds]
  assert r.accepted_length == pytest.approx(want)
  assert r.to_dict()["stats"]["accepted_length"] == pytest.approx(want)
  assert accepted_length(r.accepted, len(r.rounds)) == pytest.approx(want)
  record = {"accepted": r.accepted, "rounds": len(r.rounds)}
  assert decode.accepted_length([record]) == pytest.approx(want)


def test_ngram_engine_results_and_study_records_agree():
  """Greedy n-gram drafts on the tiny target: each result's accepted length, the function
  over its rounds and (sum accepted + rounds) / rounds agree, per request and pooled."""
  prompts = _stop_oracle.PROMPTS
  results = _stop_oracle.engine("ngram-chain").generate(
      [GenerationRequest(p, max_tokens=_stop_oracle.MAX, sampling=GREEDY) for p in prompts])
  assert all(r.error is None for r in results)
  assert any(r.accepted for r in results)  # drafts were accepted
  assert any(r.finish_reason == FinishReason.STOP for r in results)  # a request ends on EOS
  for r in results:
    n, acc = len(r.rounds), sum(s.accepted for s in r.rounds)
    assert r.accepted_length == accepted_length(acc, n) == pytest.approx((acc + n) / n)
  records = [{"accepted": r.accepted, "rounds": len(r.rounds)} for r in results]
  n = sum(len(r.rounds) for r in results)
  acc = sum(s.accepted for r in results for s in r.rounds)
  assert decode.accepted_length(records) == pytest.approx((acc + n) / n)
