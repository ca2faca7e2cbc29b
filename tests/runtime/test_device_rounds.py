"""Rounds without the host: with `device_rounds` N > 1, lanes that need no host step run up
to N rounds per dispatch, and every result is the one the host-driven rounds give.

Oracle: the same engine, requests and seeds with N = 1 (every round through the host; its
equality with ordinary decoding is the exactness matrix's). Compared: token ids, text, finish
reason, per-round statistics, and the streamed events' ids and finished flags. The tiny toy
target samples EOS often, so rounds cut by EOS, by max_tokens and by a stop string all occur.
"""

from __future__ import annotations

import functools

import pytest

from infernix_jax import constrain as ic
from infernix_jax.runtime import (Engine, GenerationRequest, NoDrafter, SamplingOptions,
                                  drafters)
from infernix_jax.testing import exact_oracle as h

K = 3
PROMPTS = ([1, 1, 2, 1, 1, 2, 1], [8, 12, 13, 9, 8, 12], [5, 10, 3, 3, 7], [2, 4, 6],
           [9, 9, 1], [3, 1, 4, 1, 5])


def _drafter(name: str):
  cfg, model = h.tiny_model()
  if name == "none":
    return NoDrafter()
  if name == "mtp":  # a device drafter (random weights: some drafts accepted, most not)
    return drafters.create("mtp", {"k": K, "weights": "random"}, target=(cfg, model))
  if name == "draft-self":  # the target as its own draft model: every draft accepted
    return drafters.create("draft", {"k": K, "model": (cfg, model)}, target=(cfg, model))
  raise ValueError(name)


@functools.lru_cache(maxsize=None)
def engine(name: str, rounds: int) -> Engine:
  cfg, model = h.tiny_model()
  return Engine(model, h.toy_vocab(), _drafter(name), lanes=3, capacity=48, cfg=cfg,
                device_rounds=rounds)


def requests(events: dict, constrained: bool = False) -> list[GenerationRequest]:
  """Greedy and seeded sampled rows, max_tokens from 1 up, ignore_eos, a draft cap; more
  requests than lanes, so lanes free up and refill between loops. `constrained` adds a stop
  string and a lane under a regex."""
  out = []
  for i, prompt in enumerate(PROMPTS * 2):
    sampling = (SamplingOptions(temperature=0.0) if i % 3 == 0 else
                SamplingOptions(temperature=1.5, seed=100 + i, top_k=9 if i % 4 == 1 else 0))
    rid = f"r{i}"
    events[rid] = []
    kw = {}
    if i == 4:
      kw["ignore_eos"] = True
    if i == 5:
      kw["max_drafts"] = 1
    if constrained and i == 7:
      kw["stop"] = ("1 2",)
    if constrained and i == 2:
      kw["constraint"] = ic.OutputConstraint.regex("(ab|c)+x")
    out.append(GenerationRequest(prompt, max_tokens=1 + (7 * i) % 24, sampling=sampling,
                                 request_id=rid, on_token=events[rid].append, **kw))
  return out


def outcome(results, events):
  return [(r.request_id, r.token_ids, r.text, r.finish_reason, r.error,
           [(x.drafted, x.accepted) for x in r.rounds],
           [(e.token_ids, e.finished) for e in events[r.request_id]]) for r in results]


SLOW = pytest.mark.slow  # make test only: the other cells cover the same paths


@pytest.mark.parametrize("name,constrained", [
    ("none", False), ("draft-self", True), pytest.param("none", True, marks=SLOW),
    pytest.param("draft-self", False, marks=SLOW), pytest.param("mtp", False, marks=SLOW),
    pytest.param("mtp", True, marks=SLOW)])
def test_device_rounds_equal_host_rounds(name, constrained):
  base_events, loop_events = {}, {}
  base = engine(name, 1)
  base_rounds = base.stats["rounds"]
  want = outcome(base.generate(requests(base_events, constrained)), base_events)
  base_rounds = base.stats["rounds"] - base_rounds
  eng = engine(name, 6)
  before = dict(eng.stats)
  got = outcome(eng.generate(requests(loop_events, constrained)), loop_events)
  assert got == want
  loops = eng.stats["device_loops"] - before.get("device_loops", 0)
  rounds = eng.stats["rounds"] - before.get("rounds", 0)
  assert loops > 0 and rounds > loops  # some dispatches ran several rounds
  if not constrained:  # lanes stop on the device where the host stops them, and free lanes
    assert rounds == base_rounds  # refill at the same rounds (a stop string is seen later)
  finishes = {r[3] for r in want}
  assert len(finishes) >= 2, finishes  # EOS and max_tokens (and a stop string) both cut


def test_a_lane_that_needs_the_host_runs_host_rounds():
  """A constrained lane keeps every round on the host while it is active."""
  eng = engine("none", 6)
  before = eng.stats["device_loops"]
  rid = "only"
  r = eng.generate([GenerationRequest(PROMPTS[0], max_tokens=8, request_id=rid,
                                      constraint=ic.OutputConstraint.regex("(ab|c)+x"))])[0]
  assert r.error is None and eng.stats["device_loops"] == before
