"""Exactness of every drafter: T = 0 reproduces ordinary greedy decoding token for token, and
T > 0 reproduces ordinary decoding's sequence distribution (chi-square against FP64 exact
enumeration), with and without a constraint, masked q on and off, in mixed batches.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax.runtime import device_drafters as dd
from infernix_jax.runtime.drafters import JumpForward, NGramDrafter, NoDrafter
from infernix_jax.runtime.engine import Engine
from infernix_jax.runtime.types import GenerationRequest, SamplingOptions
from tests.runtime import helpers as h

K = 3
LANES = 32
PROMPTS = ([1, 1, 2, 1, 1, 2, 1], [8, 12, 13, 9, 8, 12])
CHOICES = (b"abc", b"ab", b"ba1", b"cab", b"x{y}")
SPEC = ic.OutputConstraint.choice([c.decode() for c in CHOICES])


def _drafter(name: str):
  cfg, model = h.tiny_model()
  draft = h.tiny_model(seed=1)
  if name == "none":
    return NoDrafter()
  if name == "ngram":
    return NGramDrafter(k=K, n=2)
  if name == "jump":
    return JumpForward(k=K)
  if name == "ngram+jump":
    return JumpForward(k=K, inner=NGramDrafter(k=K, n=2))
  if name == "draft":
    return dd.make("draft", k=K, draft_model=draft, vocab_size=h.TOY_V)
  if name == "draft-sampling":
    return dd.make("draft", k=K, draft_model=draft, sampling=True, vocab_size=h.TOY_V)
  if name == "mtp+jump":
    return JumpForward(k=K, inner=dd.make("mtp", k=K, target=(cfg, model)))
  return dd.make(name, k=K, target=(cfg, model))  # mtp, dflash, dflash2


@functools.lru_cache(maxsize=None)
def engine(name: str, bridge: str = "stages") -> Engine:
  cfg, model = h.tiny_model()
  return Engine(model, h.toy_vocab(), _drafter(name), lanes=LANES, capacity=32, bridge=bridge)


@functools.lru_cache(maxsize=None)
def exact(prompt_index: int, max_tokens: int, temperature: float, constrained: bool):
  cfg, model = h.tiny_model()
  return h.exact_distribution(cfg, model, PROMPTS[prompt_index], h.toy_vocab(), max_tokens,
                              temperature, choices=CHOICES if constrained else None)


def run(eng, requests, masked_q=True):
  eng.masked_q = eng.host.masked_q = masked_q
  results = eng.generate(requests)
  errors = [r.error for r in results if r.error]
  assert not errors, errors[:3]
  return results


DRAFTERS = ["none", "ngram", "jump", "ngram+jump", "draft", "draft-sampling", "mtp+jump",
            "dflash", "dflash2"]


@pytest.mark.parametrize("name", DRAFTERS)
def test_greedy_equals_ordinary_greedy(name):
  """T = 0: every drafter yields ordinary greedy's tokens, constrained and free rows mixed."""
  eng = engine(name)
  cases = [(p, c) for p in range(len(PROMPTS)) for c in (False, True)]
  requests = [GenerationRequest(PROMPTS[p], max_tokens=6, constraint=SPEC if c else None)
              for p, c in cases]
  for masked_q in (True, False):
    for (p, c), r in zip(cases, run(eng, requests, masked_q)):
      [want] = exact(p, 6, 0.0, c)
      assert tuple(r.token_ids) == want, (name, p, c, masked_q)
      if c:
        assert r.constraint.terminated and r.constraint.complete
        assert r.finish_reason.value == "stop"


SAMPLING = [  # (drafter, constrained, masked q)
    ("none", True, True),
    ("ngram", False, True),
    ("ngram+jump", True, True),
    ("draft-sampling", False, True),
    ("draft-sampling", True, True),
    ("draft-sampling", True, False),
    ("dflash2", True, True),
    ("dflash2", True, False),
    ("mtp+jump", True, True),
    ("dflash", True, True),
    ("draft", False, True),
    ("jump", True, True),
]


@pytest.mark.parametrize("name,constrained,masked_q", SAMPLING)
def test_sampling_distribution_equals_ordinary(name, constrained, masked_q):
  """T = 1: the distribution of outputs equals ordinary decoding's (exact enumeration)."""
  n, max_tokens = 1200, 3 if not constrained else 4
  requests = [GenerationRequest(PROMPTS[0], max_tokens=max_tokens,
                                constraint=SPEC if constrained else None,
                                sampling=SamplingOptions(temperature=1.0, seed=s))
              for s in range(n)]
  results = run(engine(name), requests, masked_q)
  pvalue = h.chi_square_pvalue(exact(0, max_tokens, 1.0, constrained),
                               [tuple(r.token_ids) for r in results])
  assert pvalue > 1e-3, (name, constrained, masked_q, pvalue)
  if name not in ("ngram", "none"):  # drafts really are verified (not just ordinary decoding)
    assert sum(r.drafted for r in results) > 0


def test_top_k_over_legal_tokens():
  """top_k = 2 (chosen among legal tokens) through the engine matches the FP64 oracle."""
  cfg, model = h.tiny_model()
  want = h.exact_distribution(cfg, model, PROMPTS[1], h.toy_vocab(), 4, 1.0, choices=CHOICES,
                              top_k=2)
  requests = [GenerationRequest(PROMPTS[1], max_tokens=4, constraint=SPEC,
                                sampling=SamplingOptions(temperature=1.0, top_k=2, seed=s))
              for s in range(1200)]
  results = run(engine("ngram+jump"), requests)
  assert h.chi_square_pvalue(want, [tuple(r.token_ids) for r in results]) > 1e-3


@pytest.mark.parametrize("bridge", ["stages", "callback"])
def test_penalties_over_committed_and_drafted_history(bridge):
  """Presence/frequency penalties: the history is the committed output plus the round's
  hypothetical drafts; the distribution matches ordinary decoding with penalties."""
  cfg, model = h.tiny_model()
  want = h.exact_distribution(cfg, model, PROMPTS[0], h.toy_vocab(), 3, 1.0, presence=1.5,
                              frequency=0.7)
  requests = [GenerationRequest(PROMPTS[0], max_tokens=3, sampling=SamplingOptions(
      temperature=1.0, presence_penalty=1.5, frequency_penalty=0.7, seed=s)) for s in range(1200)]
  results = run(engine("ngram+jump", bridge), requests)
  assert h.chi_square_pvalue(want, [tuple(r.token_ids) for r in results]) > 1e-3
  assert sum(r.accepted for r in results) > 0  # drafts were accepted under penalties


def test_wrong_target_fails_the_same_check():
  """Negative control: samples of ordinary decoding at T = 1.4 fail the T = 1 test."""
  requests = [GenerationRequest(PROMPTS[0], max_tokens=3,
                                sampling=SamplingOptions(temperature=1.4, seed=s))
              for s in range(1200)]
  results = run(engine("ngram"), requests)
  assert h.chi_square_pvalue(exact(0, 3, 1.0, False),
                             [tuple(r.token_ids) for r in results]) < 1e-3


@pytest.mark.parametrize("name", ["ngram+jump", "dflash2"])
def test_callback_bridge_equals_stages_bridge(name):
  """The io_callback loop produces exactly the stages bridge's tokens (same randomness)."""
  requests = lambda: [GenerationRequest(PROMPTS[s % 2], max_tokens=4,
                                        constraint=SPEC if s % 3 else None,
                                        sampling=SamplingOptions(temperature=1.0, seed=s))
                      for s in range(48)]
  a = run(engine(name), requests())
  b = run(engine(name, "callback"), requests())
  assert [r.token_ids for r in a] == [r.token_ids for r in b]
  assert [len(r.rounds) for r in a] == [len(r.rounds) for r in b]
  assert engine(name, "callback").stats["callback_seconds"] > 0


def test_masked_q_raises_greedy_acceptance():
  """Masked q redraws illegal sampled drafts from the legal part of q: more accepted."""
  requests = [GenerationRequest(PROMPTS[0], max_tokens=4, constraint=SPEC,
                                sampling=SamplingOptions(temperature=0.0, seed=s))
              for s in range(64)]
  on = run(engine("draft-sampling"), requests, True)
  off = run(engine("draft-sampling"), [GenerationRequest(
      r.prompt_ids, max_tokens=4, constraint=SPEC, sampling=r.sampling) for r in requests], False)
  rate = lambda rs: np.mean([r.accepted_length for r in rs])
  assert rate(on) > rate(off)
