"""Per-lane grammar work in threads: xgrammar lanes fill their lookahead masks and preview
their commits on the lane pool (`constrain.lane_pool`), with the results of one thread.

Oracle: the same engine and requests with `HostState.lane_threads = 0` (every lane on the
calling thread). Compared: token ids, finish reasons, errors and round statistics, over
lanes under xgrammar-compiled JSON Schema and regex constraints, ordinary decoding and n-gram
drafts (K = 3: several masks per lane and round).
"""

from __future__ import annotations

import pytest

from infernix_jax import constrain as ic
from infernix_jax.constrain import lane_pool
from infernix_jax.runtime import Engine, GenerationRequest, NGramDrafter, NoDrafter
from infernix_jax.testing import exact_oracle as h

SCHEMA = '{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}}}'
CONSTRAINTS = (ic.OutputConstraint.json_schema(SCHEMA),
               ic.OutputConstraint.regex("(ab|c)+x|[12]+y"))


def _requests():
  prompts = ([1, 1, 2, 1], [8, 12, 13], [5, 10, 3, 3], [2, 4, 6], [9, 9, 1], [3, 1, 4])
  return [GenerationRequest(p, max_tokens=12, constraint=CONSTRAINTS[i % 2], backend="xgrammar")
          for i, p in enumerate(prompts)]


def _outcome(results):
  return [(r.token_ids, r.finish_reason, r.error, [(x.drafted, x.accepted) for x in r.rounds])
          for r in results]


@pytest.mark.parametrize("drafter", [NoDrafter, lambda: NGramDrafter(k=3, n=1)])
def test_lane_threads_give_one_threads_results(drafter, monkeypatch):
  cfg, model = h.tiny_model()
  one = Engine(model, h.toy_vocab(), drafter(), lanes=3, capacity=48, cfg=cfg)
  one.host.lane_threads = 0
  want = _outcome(one.generate(_requests()))
  threaded = []
  real = lane_pool.run_each
  monkeypatch.setattr(lane_pool, "run_each",
                      lambda fn, items, threads: threaded.append(threads > 1 and len(items) > 1)
                      or real(fn, items, threads))
  eng = Engine(model, h.toy_vocab(), drafter(), lanes=3, capacity=48, cfg=cfg)
  eng.host.lane_threads = 2
  assert _outcome(eng.generate(_requests())) == want
  assert any(threaded)  # some fill or preview ran on the pool
  assert all(r[2] is None for r in want)
