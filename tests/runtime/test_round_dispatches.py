"""A stages round of a host drafter dispatches two compiled programs (its forward phase and its
Finish) and reads the device once (Finish's outputs, for the host's commit).

Counted: every call of a jitted device step (`_round._JIT`, the state's `_state` programs)
while `_bridges.run_stages` runs, and every `jax.device_get` there that reads a device array.
Admissions, retired lanes and forced closes run outside the round. Oracle: the round's
written shape (forward + Finish; the commit waits in the state for the next forward), with
rounds that need optional steps (the min_tokens ban, logprobs, a trace) kept out of the
requests. The tokens are checked against the same engine with every commit applied at once.
"""

from __future__ import annotations

import collections

import jax
import pytest

from infernix_jax import constrain as ic
from infernix_jax.runtime import (Engine, GenerationRequest, NoDrafter, SamplingOptions, _bridges,
                                  _round, _state, drafters)
from infernix_jax.testing import exact_oracle as h

PROMPTS = ([1, 1, 2, 1, 1, 2, 1], [8, 12, 13, 9, 8, 12], [5, 10, 3, 3, 7])


def _requests():
  out = []
  for i, prompt in enumerate(PROMPTS):
    sampling = SamplingOptions(temperature=0.0 if i == 0 else 0.7, seed=3 + i)
    kw = {"constraint": ic.OutputConstraint.regex("(ab|c)+x")} if i == 1 else {}
    out.append(GenerationRequest(prompt, max_tokens=12, sampling=sampling, request_id=f"r{i}",
                                 **kw))
  return out


class _Counter:
  """Counts jitted dispatches and device reads inside `run_stages`, per round."""

  def __init__(self, monkeypatch):
    self.rounds = []  # (dispatches, reads) per round
    self.now = None
    for fn, jitted in list(_round._JIT.items()):
      monkeypatch.setitem(_round._JIT, fn, self._counted(jitted))
    for name in ("_COMMIT", "_SETTLE", "_RESET"):
      monkeypatch.setattr(_state, name, self._counted(getattr(_state, name)))
    real_get = jax.device_get

    def device_get(x):
      if self.now is not None and any(isinstance(a, jax.Array) for a in jax.tree.leaves(x)):
        self.now["reads"] += 1
      return real_get(x)

    monkeypatch.setattr(jax, "device_get", device_get)
    real_round = _bridges.run_stages

    def run_stages(*args, **kwargs):
      self.now = collections.Counter()
      try:
        return real_round(*args, **kwargs)
      finally:
        self.rounds.append((self.now["dispatches"], self.now["reads"]))
        self.now = None

    monkeypatch.setattr(_bridges, "run_stages", run_stages)

  def _counted(self, jitted):
    def call(*args, **kwargs):
      if self.now is not None:
        self.now["dispatches"] += 1
      return jitted(*args, **kwargs)
    return call


def _tokens(eng):
  return [(r.request_id, r.token_ids, str(r.finish_reason)) for r in eng.generate(_requests())]


@pytest.mark.parametrize("kind", ["ngram+jump", "none"])
def test_a_host_drafter_round_dispatches_forward_and_finish_and_reads_once(kind, monkeypatch):
  cfg, model = h.tiny_model()

  def engine():
    d = (drafters.create("ngram", {"k": 3, "n": 2}, jump_forward=True) if kind == "ngram+jump"
         else NoDrafter())
    return Engine(model, h.toy_vocab(), d, lanes=2, capacity=48, cfg=cfg)

  eng = engine()
  eng.warmup(prompt_lengths=[len(p) for p in PROMPTS])
  counter = _Counter(monkeypatch)
  got = _tokens(eng)
  rounds = counter.rounds
  assert len(rounds) == eng.stats["rounds"] > 6
  # Every round dispatches its forward and its Finish and reads Finish's outputs once. In
  # ordinary decoding the round before dispatches the forward (the prefetch): a round then
  # dispatches its Finish and the next round's forward, and a prefetch the next round could
  # not take (a miss, or one left after the last round) costs one dispatch more.
  dispatches = [d for d, _ in rounds]
  if kind == "none":
    assert set(dispatches) <= {1, 2, 3}, rounds
    assert sum(dispatches) <= 2 * len(rounds) + eng.stats["prefetch_misses"] + 1, rounds
    assert eng.stats["prefetch_hits"] > len(rounds) // 2
  else:
    assert set(dispatches) == {2}, rounds
  assert all(r == 1 for _, r in rounds), rounds
  monkeypatch.undo()
  # The same tokens with every commit applied at once (settled after each round).
  eng = engine()
  real = _bridges.run_stages
  monkeypatch.setattr(_bridges, "run_stages",
                      lambda *a, **kw: _state.settle(real(*a, **kw)))
  assert _tokens(eng) == got
