"""Generation traces (`runtime.trace`): the trace agrees with the result, token by token."""

from __future__ import annotations

import functools
import json

import pytest

from infernix_jax import constrain as ic
from infernix_jax.errors import ParameterError
from infernix_jax.runtime import (Engine, GenerationRequest, JumpForward, NGramDrafter,
                                  SamplingOptions)
from infernix_jax.runtime import _bridges, _host, trace
from infernix_jax.runtime.errors import FeatureConflictError
from infernix_jax.testing import exact_oracle as h

K = 3
CHOICES = ["abcabcab", "abcabc1x", "x{y}abab"]
SPEC = ic.OutputConstraint.choice(CHOICES)


@functools.lru_cache(maxsize=None)
def engine() -> Engine:
  cfg, model = h.tiny_model()
  return Engine(model, h.toy_vocab(), JumpForward(k=K, inner=NGramDrafter(k=K, n=2)), lanes=2,
                capacity=64)


def requests(traced: bool) -> list[GenerationRequest]:
  return [GenerationRequest([1, 2, 3, 1, 2, 3, 1], max_tokens=12, constraint=SPEC, trace=traced),
          GenerationRequest([1, 2, 3, 1, 2, 3, 1, 2], max_tokens=12, trace=traced),
          GenerationRequest([8, 12, 13, 9], max_tokens=10, constraint=SPEC, trace=traced,
                            sampling=SamplingOptions(temperature=1.0, seed=3))]


def test_trace_agrees_with_per_round_and_tokens():
  """Greedy n-gram + jump-forward on the tiny target: every output token has exactly one
  origin, the origins account for every token and every round's [drafted, accepted], and the
  per-position numbers agree with the committed tokens and the brute-force legal sets."""
  vocab = h.toy_vocab()
  eos = set(vocab.eos_ids)
  seen = set()
  for r in engine().generate(requests(traced=True)):
    t = r.trace
    json.dumps(t, allow_nan=False)  # JSON-ready, no NaN
    assert t["format"] == trace.FORMAT and t["version"] == trace.VERSION
    assert t["meta"]["drafter"] == "jump+ngram" and t["meta"]["k"] == K
    assert [x["id"] for x in t["tokens"]] == r.token_ids
    assert "".join(x["text"] for x in t["tokens"]) == r.text
    assert all(x["origin"] in trace.ORIGINS for x in t["tokens"])
    assert [[x["drafted"], x["accepted"]] for x in t["rounds"]] == t["result"]["per_round"] == [
        [s.drafted, s.accepted] for s in r.rounds]
    constrained = r.constraint is not None
    if constrained:
      assert sum(len(x["forced"]) for x in t["rounds"]) == r.constraint.jump_forward_tokens
    greedy = r.prompt_tokens != 4  # the third request samples
    for rd in t["rounds"]:
      mine = [x for x in t["tokens"] if x["round"] == rd["round"]]
      assert [x["id"] for x in mine] == [c for c in rd["committed"] if c not in eos]
      assert rd["eos"] == any(c in eos for c in rd["committed"])
      assert len(rd["drafts"]) == rd["drafted"] and len(rd["positions"]) == rd["drafted"] + 1
      for x in mine:
        i = x["offset"]
        seen.add(x["origin"])
        if i < rd["accepted"]:
          assert x["id"] == rd["drafts"][i]
          assert x["origin"] == ("forced" if i < len(rd["forced"]) else "draft")
        else:
          assert i == rd["accepted"] == len(mine) - 1
          want = ("plain" if rd["drafted"] == 0 else "bonus" if rd["accepted"] == rd["drafted"]
                  else "correction")
          assert x["origin"] == want
          if want == "correction" and greedy:
            assert x["id"] != rd["drafts"][i]  # the rejected draft is not the correction
        pos = rd["positions"][i]
        if greedy:  # the target's top candidate is the greedy token
          assert pos["top"][0][0] == x["id"]
        assert x["id"] in [c for c, _ in pos["top"]] or not greedy
        if constrained:
          before = [y["id"] for y in t["tokens"][:t["tokens"].index(x)]]
          assert pos["state"] == "Ready"
          assert pos["legal"] == int(h.choice_legal([c.encode() for c in CHOICES], vocab,
                                                    before).sum())
        else:
          assert pos["state"] is None and pos["legal"] is None
    for rd in t["rounds"]:
      assert rd["position"] == sum(len([c for c in x["committed"] if c not in eos])
                                   for x in t["rounds"][:rd["round"]])
  assert {"draft", "forced", "correction", "bonus", "plain"} <= seen


def test_tracing_does_not_change_the_output_and_untraced_rounds_skip_it(monkeypatch):
  """Same tokens traced or not; an untraced run never enters the trace hooks."""
  traced = engine().generate(requests(traced=True))

  def boom(*args, **kw):
    raise AssertionError("an untraced request entered the trace hook")
  monkeypatch.setattr(_bridges.StagesIO, "trace", boom)
  monkeypatch.setattr(_host.HostState, "trace_round", boom)
  for name in ("begin", "device", "commit", "close", "to_json"):
    monkeypatch.setattr(trace.RequestTrace, name, boom)
  plain = engine().generate(requests(traced=False))
  assert [r.token_ids for r in plain] == [r.token_ids for r in traced]
  assert [r.trace for r in plain] == [None] * 3
  assert [[(s.drafted, s.accepted) for s in r.rounds] for r in plain] == [
      [(s.drafted, s.accepted) for s in r.rounds] for r in traced]


def test_trace_is_a_boolean_and_needs_the_stages_bridge():
  with pytest.raises(ParameterError) as e:
    GenerationRequest([1], trace="yes").validate()
  assert e.value.param == "trace"
  cfg, model = h.tiny_model()
  eng = Engine(model, h.toy_vocab(), NGramDrafter(k=K), lanes=1, capacity=32, bridge="callback")
  with pytest.raises(FeatureConflictError, match="stages bridge"):
    eng.submit(GenerationRequest([1, 2], max_tokens=2, trace=True))


def test_server_body_field_trace():
  from infernix_jax.api import RequestError
  from infernix_jax.serve import requests as rq
  body = {"messages": [{"role": "user", "content": "hi"}], "trace": True}
  assert rq.parse_chat(body, drafter="ngram", k=4).options["trace"] is True
  assert "trace" not in rq.parse_text({"prompt": "hi"}, drafter="ngram", k=4).options
  with pytest.raises(RequestError) as e:
    rq.parse_text({"prompt": "hi", "trace": "yes"}, drafter="ngram", k=4)
  assert e.value.param == "trace"


def test_api_completion_carries_the_trace(smollm2_llm):
  """`LLM.generate(..., trace=True)` on the embedded model: the trace names the model and
  agrees with the completion's tokens and rounds."""
  c = smollm2_llm.generate("Pick a colour", choice=["red", "green", "blue"], max_tokens=8,
                           trace=True)
  t = c.trace
  assert t is not None and t["meta"]["model"] == smollm2_llm.model_name
  assert [x["id"] for x in t["tokens"]] == c.token_ids
  assert len(t["rounds"]) == c.stats["rounds"]
  assert smollm2_llm.generate("Pick a colour", choice=["red", "green", "blue"],
                              max_tokens=8).trace is None


def test_a_sampling_drafter_records_q_and_masked_q_redraws():
  """A draft model sampling its drafts at T = 1 under a choice constraint: each traced round
  records the drafter's top q per draft, and where the masked q redrew an illegal proposal
  the redraw names the position, the proposed and the redrawn token, and the redrawn token is
  the one verified."""
  from infernix_jax.runtime import drafters

  cfg, model = h.tiny_model()
  drafter = drafters.create("draft", {"k": K, "model": h.tiny_model(seed=1), "sampling": True},
                            target=(cfg, model))
  eng = Engine(model, h.toy_vocab(), drafter, lanes=2, capacity=64)
  reqs = [GenerationRequest([8, 12, 13, 9], max_tokens=10, constraint=SPEC, trace=True,
                            sampling=SamplingOptions(temperature=1.0, seed=s)) for s in range(6)]
  redraws = 0
  for r in eng.generate(reqs):
    for rd in r.trace["rounds"]:
      if not rd["drafted"]:
        continue
      assert rd["q"] is not None and len(rd["q"]) == rd["drafted"]
      assert all(row and 0 < sum(p for _, p in row) <= 1 + 1e-4 for row in rd["q"])  # 5 digits
      if rd["redraw"]:
        redraws += 1
        i = rd["redraw"]["position"]
        assert rd["redraw"]["drafted"] == rd["proposed"][i] != rd["drafts"][i]
        assert rd["redraw"]["redrawn"] == rd["drafts"][i]
  assert redraws > 0  # the untrained draft model proposes illegal tokens often
