"""A property of the speculative window: whatever the drafts, a lane decodes as it would alone
with no drafts at T = 0.

Hypothesis draws batches of requests on a tiny target whose vocabulary has Qwen's thinking
and tool markers (so budgets close reasoning mid-window) and whose logits are wider than its
mask words (padding ids past the last mask bit): free requests with stop strings
(substrings of their ordinary text), choice and finite-regex constraints (their grammar ends
at random points), thinking requests with budgets, free or constrained (a framed session).
Drafts mix each request's own ordinary continuation (accepted windows of random length) with
ids in the vocabulary, padding ids, control tokens and EOS. Properties:
- every lane equals its solo run without drafts (ids, text, finish reason);
- every output validates against its constraint (independent oracles: the languages'
  enumerations);
- no stream passes a stop string: streamed text is a prefix of the final text, no stop
  string can still start in what a non-final event sent, and the last event alone is final.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
from flax import nnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infernix_jax import constrain as ic
from infernix_jax import models as im
from infernix_jax.runtime import Engine, FinishReason, GenerationRequest, SamplingOptions
from tests.runtime._scripted import Scripted

TOKENS = ["<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "\n", "\n\n",
          "a", "b", "c", "ab", "ba", "abc", "ca", "1", "2", "x", "y"]
EOS, THINK_OPEN, THINK_CLOSE, NL = 0, 1, 2, 5
CONTROL = (1, 2, 3, 4)
V, VM = len(TOKENS), 40  # one mask word covers ids 0..31: ids 32..39 lie past it
TEXT = list(range(5, V))  # ordinary tokens (prompts)
K, LANES = 3, 2
GREEDY = SamplingOptions(temperature=0.0, frequency_penalty=1.0)  # varied greedy text
CHOICES = ("abc", "ab", "ba1", "cab", "x", "ab\nc")
REGEX_WORDS = {"".join(p) + c + d for n in range(1, 4) for p in itertools.product("ab", repeat=n)
               for c in ("", "c") for d in "12"}
CONSTRAINTS = {"choice": (ic.OutputConstraint.choice(list(CHOICES)), set(CHOICES)),
               "regex": (ic.OutputConstraint.regex("[ab]{1,3}c?[12]"), REGEX_WORDS)}
# prompt -> the ordinary output of the request with that prompt (drafts of the batch run)
CONTINUATIONS: dict[tuple[int, ...], list[int]] = {}
SEED = [0]


def vocab():
  return ic.Vocabulary.from_tokens(TOKENS, eos_ids=[EOS], control=CONTROL, padded_size=VM)


def script(context, limit):
  """Drafts: the request's ordinary continuation, or noise (in-vocabulary, padding, control
  and EOS ids)."""
  rng = np.random.default_rng(hash((SEED[0], tuple(context))) % 2**32)
  future = []
  for prompt, out in CONTINUATIONS.items():
    done = list(context[len(prompt):])
    if tuple(context[:len(prompt)]) == prompt and out[:len(done)] == done:
      future = out[len(done):]
  noise = [lambda: rng.integers(0, V), lambda: rng.integers(V, VM), lambda: rng.choice(CONTROL),
           lambda: EOS]
  drafts = []
  for j in range(int(rng.integers(0, limit + 1))):
    if j < len(future) and rng.random() < 0.7:
      drafts.append(int(future[j]))
    else:
      drafts.append(int(noise[rng.choice(4, p=[0.5, 0.3, 0.1, 0.1])]()))
  return drafts


@functools.lru_cache(maxsize=None)
def engine() -> Engine:
  cfg = im.ModelConfig(vocab_size=VM, dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
                       head_dim=8, ffn_dim=64)
  model = im.Transformer(cfg, rngs=nnx.Rngs(0))
  model.embed[...] = model.embed[...] * 3.0  # logits far from uniform
  return Engine(model, vocab(), Scripted(k=K, script=script), lanes=LANES, capacity=32)


@st.composite
def lanes(draw):
  """(kind, request fields); a free request's "stop" holds (where in its ordinary text,
  length) pairs, turned into substrings of that text by `stops_of`."""
  kind = draw(st.sampled_from(["free", "choice", "regex", "think", "think-choice"]))
  body = draw(st.lists(st.sampled_from(TEXT), min_size=1, max_size=4))
  prompt = list(body)
  if kind.startswith("think"):
    prompt += [THINK_OPEN, NL]
  fields = dict(prompt_ids=prompt, max_tokens=draw(st.integers(1, 12)), sampling=GREEDY)
  if kind in ("free", "think"):
    fields["stop"] = draw(st.lists(st.tuples(st.floats(0, 1, exclude_max=True),
                                             st.integers(1, 3)), min_size=1, max_size=2))
  if kind.startswith("think"):
    fields["thinking_budget"] = draw(st.none() | st.integers(0, 5))
  if kind in ("choice", "regex", "think-choice"):
    fields["constraint"] = CONSTRAINTS["regex" if kind == "regex" else "choice"][0]
  return kind, fields


def stops_of(picks, text: str) -> tuple[str, ...]:
  """Substrings of `text` at the picked places (none when the text is empty)."""
  return tuple(text[int(f * len(text)):int(f * len(text)) + n] for f, n in picks if text)


def run(requests, max_drafts=None):
  """Results and streamed events of `requests`, GenerationRequest fields each."""
  events = [[] for _ in requests]
  results = engine().generate([GenerationRequest(**r, max_drafts=max_drafts,
                                                 on_token=events[i].append)
                               for i, r in enumerate(requests)])
  return results, events


def check_stream(stops, result, events):
  """The stream spells the result and never sends text a stop string may start in."""
  assert events and events[-1].finished and not any(e.finished for e in events[:-1])
  assert [t for e in events for t in e.token_ids] == result.token_ids
  streamed, committed = "", ""
  for e in events:
    streamed += e.text
    committed += "".join(TOKENS[t] for t in e.token_ids)
    assert result.text.startswith(streamed)
    if not e.finished:
      assert not any(s.startswith(committed[i:]) or committed[i:].startswith(s)
                     for s in stops for i in range(len(streamed)))
  assert streamed == result.text


def check_valid(kind, request, result):
  """The output validates against the request's constraint, stop strings and budget."""
  text = result.text
  if kind.startswith("think") and THINK_CLOSE in result.token_ids:
    budget = request.get("thinking_budget")
    assert budget is None or result.token_ids.index(THINK_CLOSE) <= budget + 1
  if kind in ("free", "think"):
    if result.finish_reason == FinishReason.STOP_STRING:
      assert not any(s in text for s in request["stop"])
    return
  if kind == "think-choice":
    if THINK_CLOSE not in result.token_ids:
      assert result.finish_reason == FinishReason.LENGTH
      return
    text = text[text.index("</think>") + len("</think>"):].lstrip("\n")
  words = CONSTRAINTS["regex" if kind == "regex" else "choice"][1]
  if result.finish_reason == FinishReason.STOP:
    assert text in words, (text, result)
  else:
    assert result.finish_reason == FinishReason.LENGTH
    assert any(w.startswith(text) for w in words), (text, result)


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=st.lists(lanes(), min_size=1, max_size=5), seed=st.integers(0, 2**16))
def test_any_drafts_decode_like_each_lane_alone(batch, seed):
  kinds, requests = zip(*batch)
  requests = [dict(r) for r in requests]
  free = [i for i, r in enumerate(requests) if "stop" in r]
  plain, _ = run([dict(requests[i], stop=()) for i in free], max_drafts=0)
  for i, res in zip(free, plain):
    requests[i]["stop"] = stops_of(requests[i]["stop"], res.text)
  CONTINUATIONS.clear()
  solo = []
  for r in requests:
    (res,), (events,) = run([r], max_drafts=0)
    assert res.error is None, res.error
    check_stream(r.get("stop", ()), res, events)
    solo.append(res)
    CONTINUATIONS[tuple(r["prompt_ids"])] = res.token_ids
  SEED[0] = seed
  results, streams = run(requests)
  for kind, r, want, got, events in zip(kinds, requests, solo, results, streams):
    where = (kind, r)
    assert got.error is None, (where, got.error)
    assert (got.token_ids, got.text, got.finish_reason) == (
        want.token_ids, want.text, want.finish_reason), where
    check_stream(r.get("stop", ()), got, events)
    check_valid(kind, r, got)
