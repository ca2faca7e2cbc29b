"""Extra stop strings under speculation: a stop string that ends inside a round's accepted
drafts (chains and trees) ends the output exactly where ordinary decoding ends it, through the
engine and the Python API (the oracle: `_stop_oracle`).

Every engine, ordinary decoding included, must give the oracle's token ids, text and finish
reason, and stream exactly that text and those ids, the last event alone marked finished.
"""

from __future__ import annotations

import pytest

from infernix_jax.runtime import FinishReason, GenerationRequest
from infernix_jax.testing import exact_oracle as h
from tests.runtime._stop_oracle import (GREEDY, MAX, PROMPTS, cases, engine, expected, llm,
                                        reference, round_cases)


@pytest.mark.slow  # an engine per drafter, hundreds of requests each
@pytest.mark.parametrize("kind", ["none", "oracle-chain", "oracle-tree", "ngram-chain",
                                  "ngram-tree"])
def test_stop_strings_match_ordinary_decoding(kind):
  eng = engine(kind)
  events: dict[str, list] = {}
  requests = []
  for i, (prompt, stops, min_tokens) in enumerate(cases()):
    rid = f"{kind}-{i}"
    events[rid] = []
    requests.append(GenerationRequest(prompt, max_tokens=MAX, sampling=GREEDY, stop=stops,
                                      min_tokens=min_tokens, request_id=rid,
                                      on_token=events[rid].append))
  results = eng.generate(requests)
  kept_in_last_round = set()
  for (prompt, stops, min_tokens), r in zip(cases(), results):
    want_ids, want_text, want_finish = expected(prompt, stops, min_tokens)
    where = (kind, prompt, stops, min_tokens)
    assert r.error is None, where
    assert (r.token_ids, r.text, r.finish_reason) == (want_ids, want_text, want_finish), where
    evs = events[r.request_id]
    assert "".join(e.text for e in evs) == r.text, where
    assert [t for e in evs for t in e.token_ids] == r.token_ids, where
    assert evs[-1].finished and not any(e.finished for e in evs[:-1]), where
    if r.finish_reason == FinishReason.STOP_STRING:
      kept_in_last_round.add(len(r.token_ids) - sum(x.accepted + 1 for x in r.rounds[:-1]))
  if kind.startswith("oracle"):  # stops completed at every position of a round's window
    assert kept_in_last_round == {1, 2, 3, 4}, kept_in_last_round


@pytest.mark.slow  # two engines
def test_streams_hold_back_a_possible_stop():
  """Text that may begin a stop string is streamed only once it cannot, and text holding a
  stop string that min_tokens keeps unchecked waits for the check."""
  ids, text, _ = reference()[tuple(PROMPTS[0])]
  for stops, min_tokens in (((text[2:5] + "#",), 0), ((text[1:3],), 6)):
    for kind in ("none", "oracle-chain"):
      events = []
      r = engine(kind).generate([GenerationRequest(PROMPTS[0], max_tokens=MAX, sampling=GREEDY,
                                                   stop=stops, min_tokens=min_tokens,
                                                   on_token=events.append)])[0]
      streamed, committed = "", ""
      for e in events:
        streamed += e.text
        committed += "".join(h.TOY_TOKENS[t] for t in e.token_ids)
        assert r.text.startswith(streamed)
        if not e.finished:  # no stop string can start in what went out
          assert not any(s.startswith(committed[i:]) or committed[i:].startswith(s)
                         for s in stops for i in range(len(streamed))), (kind, stops, events)
      assert streamed == r.text


@pytest.mark.slow  # three LLMs on the tiny target
@pytest.mark.parametrize("kind", ["oracle-chain", "oracle-tree"])
def test_api_stop_strings_inside_accepted_drafts(kind):
  """`LLM.generate` with a stop string completed at each position of a round: token ids,
  text, finish reason, usage and the `on_token` stream equal the oracle's and ordinary
  decoding's (the same LLM without a drafter)."""
  for prompt, stops in round_cases():
    want_ids, want_text, _ = expected(prompt, stops)
    runs = {}
    for k in ("none", kind):
      events = []
      c = llm(k).generate(prompt, max_tokens=MAX, temperature=0.0, frequency_penalty=1.0,
                          stop=list(stops), on_token=events.append)
      runs[k] = c
      where = (k, prompt, stops)
      assert (c.token_ids, c.text, c.content, c.finish_reason) == (
          want_ids, want_text, want_text, "stop_string"), where
      assert "".join(e.text for e in events) == want_text, where
      assert [t for e in events for t in e.token_ids] == want_ids, where
      assert events[-1].finished and not any(e.finished for e in events[:-1]), where
      # Usage counts the kept tokens; every round but the last commits one token past its
      # accepted drafts, so no dropped token is counted as accepted.
      assert c.stats["accepted"] <= len(want_ids) - c.stats["rounds"] + 1, where
    assert runs[kind].stats["drafted"] > 0
