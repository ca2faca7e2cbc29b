"""Extra stop strings under speculation: a stop string that ends inside a round's accepted
drafts (chains and trees) ends the output exactly where ordinary decoding ends it.

Oracle: the greedy output of a drafter-less engine without stop strings, cut by hand the way
one-token rounds cut it (after each token that brings the output to min_tokens or more, the
first stop string in the whole text ends it: the token ids keep the token that completes
it, the text stops where it starts). Every engine, ordinary decoding included, must give
those token ids, that text and finish reason, and stream exactly that text and those ids,
the last event alone marked finished.
"""

from __future__ import annotations

import functools

import pytest

from infernix_jax.runtime import (Engine, FinishReason, GenerationRequest, NGramDrafter,
                                  SamplingOptions)
from infernix_jax.testing import exact_oracle as h
from tests.runtime._scripted import Scripted, ScriptedTree

K = 3
MAX = 16
# A frequency penalty keeps the tiny target's greedy output from repeating one token.
GREEDY = SamplingOptions(temperature=0.0, frequency_penalty=1.0)
PROMPTS = ([1, 1, 2, 1, 1, 2, 1], [8, 12, 13, 9, 8, 12], [5, 10, 3, 3, 7])


@functools.lru_cache(maxsize=None)
def reference() -> dict[tuple[int, ...], tuple[list[int], str, FinishReason]]:
  """prompt -> (token ids, text, finish reason) of ordinary greedy decoding, no stop string."""
  out = engine("none").generate([GenerationRequest(p, max_tokens=MAX, sampling=GREEDY)
                                 for p in PROMPTS])
  assert all(r.error is None for r in out)
  return {tuple(p): (r.token_ids, r.text, r.finish_reason) for p, r in zip(PROMPTS, out)}


def _future(context) -> list[int] | None:
  """The reference tokens after `context` (a prompt + a prefix of its reference output)."""
  for prompt, (ids, _, _) in reference().items():
    done = list(context[len(prompt):])
    if tuple(context[:len(prompt)]) == prompt and ids[:len(done)] == done:
      return ids[len(done):]
  return None


def oracle_chain(context, limit):
  """Drafts the reference future: verification accepts every draft."""
  return (_future(context) or [])[:limit]


def oracle_tree(context, limit):
  """The reference future as a path of up to three nodes, with a wrong sibling of its root."""
  path = (_future(context) or [])[:min(limit, 3)]
  if not path:
    return [], []
  wrong = path[0] % (h.TOY_V - 1) + 1  # another non-EOS id
  drafts, parents = [path[0], wrong], [-1, -1]
  for j, t in enumerate(path[1:]):
    drafts.append(t)
    parents.append(0 if j == 0 else len(drafts) - 2)
  return drafts, parents


@functools.lru_cache(maxsize=None)
def engine(kind: str) -> Engine:
  drafter = {"none": lambda: None,
             "oracle-chain": lambda: Scripted(k=K, script=oracle_chain),
             "oracle-tree": lambda: ScriptedTree(k=K + 1, script=oracle_tree),
             "ngram-chain": lambda: NGramDrafter(k=K, n=2),
             "ngram-tree": lambda: NGramDrafter(k=K, n=2, tree=True)}[kind]()
  cfg, model = h.tiny_model()
  return Engine(model, h.toy_vocab(), drafter, lanes=8, capacity=40)


def expected(prompt, stops, min_tokens=0):
  """(token ids, text, finish reason) that one-token rounds give with `stops`."""
  ids, _, finish = reference()[tuple(prompt)]
  text = ""
  for j, t in enumerate(ids):
    text += h.TOY_TOKENS[t]
    if j + 1 < min_tokens:
      continue
    hits = [text.find(s) for s in stops if s in text]
    if hits:
      return ids[:j + 1], text[:min(hits)], FinishReason.STOP_STRING
  return ids, "".join(h.TOY_TOKENS[t] for t in ids), finish


def cases():
  """(prompt, stops, min_tokens): every substring of one to three characters of each
  reference text as a stop string, some pairs, and a few under min_tokens."""
  out = []
  for prompt in PROMPTS:
    text = reference()[tuple(prompt)][1]
    subs = sorted({text[i:i + n] for n in (1, 2, 3) for i in range(len(text) - n + 1)})
    out += [(prompt, (s,), 0) for s in subs]
    out += [(prompt, (a, b), 0) for a, b in zip(subs[::5], subs[3::5])]
    out += [(prompt, (s,), m) for s, m in zip(subs[::7], (3, 6, 9, 12))]
  return out


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
