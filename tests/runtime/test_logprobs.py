"""GenerationRequest(logprobs=N): each output token's log p under the distribution it was
sampled from (masked, penalised, tempered, truncated; greedy: T = 1, masked, penalised),
checked against an FP64 oracle of ordinary decoding's per-position law, with speculation."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax.runtime import drafters
from infernix_jax.runtime.engine import Engine
from infernix_jax.runtime.types import GenerationRequest, SamplingOptions
from infernix_jax.testing import exact_oracle as h

CHOICES = (b"abc", b"ab", b"ba1", b"cab", b"x{y}")
SPEC = ic.OutputConstraint.choice([c.decode() for c in CHOICES])
PROMPT = [1, 1, 2, 1, 1, 2, 1]


@functools.lru_cache(maxsize=None)
def _engine(name: str) -> Engine:
  cfg, model = h.tiny_model()
  options = {"k": 3, "n": 2} if name == "ngram" else {"k": 3, "sampling": True,
                                                     "model": h.tiny_model(seed=1)}
  if name == "ngram/tree":  # token trees: each output token at its node's row
    name, options = "ngram", {"k": 2, "n": 2, "tree": True}
  drafter = drafters.create(name, options, target=(cfg, model), jump_forward=name == "ngram")
  return Engine(model, h.toy_vocab(), drafter, lanes=4, capacity=32)


def _oracle(out, request, constrained):
  """FP64 log p of each output token at its position, and the distribution there."""
  cfg, model = h.tiny_model()
  vocab = h.toy_vocab()
  s = request.sampling
  rows = []
  for i, t in enumerate(out):
    key = tuple(out[:i])
    [z] = h.full_logits(cfg, model, [list(request.prompt_ids) + list(key)])
    for u in set(key) | set(request.prompt_ids):
      z[u] = z[u] / s.repetition_penalty if z[u] > 0 else z[u] * s.repetition_penalty
    for u in set(key):
      z[u] -= s.presence_penalty + s.frequency_penalty * key.count(u)
    legal = np.zeros(cfg.vocab_size, bool)
    legal[:vocab.size] = (h.choice_legal(CHOICES, vocab, key) if constrained
                          else np.ones(vocab.size, bool))
    if i < request.min_tokens and legal[1:].any():
      legal[0] = False  # EOS (id 0) banned before min_tokens
    temperature = s.temperature if s.temperature > 0 else 1.0
    if s.temperature > 0 and s.top_k:
      cut = np.sort(np.where(legal, z, -np.inf))[::-1][min(s.top_k, legal.sum()) - 1]
      legal &= z >= cut
    zt = np.where(legal, z / temperature, -np.inf)
    logp = zt - np.logaddexp.reduce(zt[legal])
    rows.append(logp)
  return rows


CASES = [
    ("ngram", True, dict(temperature=1.0, top_k=3, repetition_penalty=1.5,
                         presence_penalty=0.3), dict(min_tokens=2, logprobs=5)),
    ("ngram", False, dict(temperature=0.8, frequency_penalty=0.5), dict(logprobs=3)),
    ("ngram", True, dict(temperature=0.0, repetition_penalty=2.0), dict(logprobs=2)),
    ("draft", True, dict(temperature=1.0, repetition_penalty=1.3), dict(logprobs=20)),
    ("draft", False, dict(temperature=1.2), dict(logprobs=0, ignore_eos=True)),
]


@pytest.mark.parametrize("name", ["ngram", "draft", "ngram/tree"])
def test_logprobs_equal_the_fp64_law_of_each_position(name):
  eng = _engine(name)
  cases = [c for c in CASES if c[0] == name.split("/")[0]]
  if name == "ngram/tree":  # the richest case (penalties, top-k, min_tokens, a constraint)
    cases = cases[:1]
  requests = [GenerationRequest(PROMPT, max_tokens=5, constraint=SPEC if constrained else None,
                                sampling=SamplingOptions(seed=seed, **sampling), **extra)
              for _, constrained, sampling, extra in cases for seed in range(4)]
  plain = GenerationRequest(PROMPT, max_tokens=5, sampling=SamplingOptions(temperature=1.0))
  results = eng.generate(requests + [plain])
  assert results[-1].logprobs is None
  assert sum(r.accepted for r in results) > 0  # drafts were accepted and scored
  for request, result in zip(requests, results):
    assert not result.error, result.error
    constrained = request.constraint is not None
    lps = result.logprobs
    assert [x.token_id for x in lps] == result.token_ids
    for x, logp in zip(lps, _oracle(result.token_ids, request, constrained)):
      assert np.isfinite(x.logprob)
      np.testing.assert_allclose(x.logprob, logp[x.token_id], atol=2e-4)
      support = np.flatnonzero(np.isfinite(logp))
      want = sorted(support, key=lambda t: (-logp[t], t))[:request.logprobs]
      assert [t for t, _ in x.top] == [int(t) for t in want], (request, x)
      np.testing.assert_allclose([v for _, v in x.top], logp[want], atol=2e-4)


def test_logprobs_are_refused_on_the_callback_bridge():
  from infernix_jax.constrain.errors import FeatureConflictError
  cfg, model = h.tiny_model()
  eng = Engine(model, h.toy_vocab(), lanes=2, capacity=32, bridge="callback")
  with pytest.raises(FeatureConflictError, match="logprobs needs the engine's stages bridge"):
    eng.submit(GenerationRequest(PROMPT, max_tokens=2, logprobs=1))


def test_llm_prepare_passes_the_fields_through():
  """`LLM.generate(..., repetition_penalty=, min_tokens=, ignore_eos=, logprobs=)` on the tiny
  target: the fields reach the engine (Completion.logprobs), and ignore_eos with a
  constraint is refused naming ignore_eos."""
  from infernix_jax.errors import RequestConflictError

  llm = h.tiny_llm()
  c = llm.generate(PROMPT, max_tokens=5, temperature=1.0, seed=3, repetition_penalty=1.4,
                   min_tokens=5, logprobs=2)
  assert len(c.token_ids) == 5 and [x.token_id for x in c.logprobs] == c.token_ids
  assert all(len(x.top) == 2 and x.logprob <= 0 for x in c.logprobs)
  assert c.result.to_dict()["logprobs"][0][0] == c.token_ids[0]
  c = llm.generate(PROMPT, max_tokens=4, ignore_eos=True)
  assert len(c.token_ids) == 4 and c.logprobs is None
  with pytest.raises(RequestConflictError, match="ignore_eos=True cannot") as err:
    llm.generate(PROMPT, max_tokens=4, ignore_eos=True, choice=["ab"])
  assert err.value.param == "ignore_eos"
