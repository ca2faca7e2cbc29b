"""Ordinary decoding dispatches the next round's forward phase before the host commits
(`_bridges.Prefetch`), and every result is the one rounds without it give.

Oracle: the same engine and requests with the prefetch off (each verify dispatched after the
host's commit). Compared: token ids, text, finish reason, errors, per-round statistics and
streamed events, over greedy and sampled rows, constrained lanes (whose grammar commit runs
while the prefetched verify does), EOS, max_tokens, a stop string, and lanes that free up and
refill (whose prefetches must not be taken).
"""

from __future__ import annotations

from infernix_jax.runtime import Engine, NoDrafter
from infernix_jax.testing import exact_oracle as h
from tests.runtime.test_device_rounds import outcome, requests


def _engine(prefetch: bool) -> Engine:
  cfg, model = h.tiny_model()
  eng = Engine(model, h.toy_vocab(), NoDrafter(), lanes=3, capacity=48, cfg=cfg)
  if not prefetch:
    eng._prefetch = None
  return eng


def test_prefetched_verifies_give_the_same_results():
  base_events, events = {}, {}
  want = outcome(_engine(False).generate(requests(base_events, constrained=True)), base_events)
  eng = _engine(True)
  got = outcome(eng.generate(requests(events, constrained=True)), events)
  assert got == want
  hits, misses = eng.stats["prefetch_hits"], eng.stats["prefetch_misses"]
  assert hits > misses > 0, (hits, misses)  # most rounds took it; admissions could not
