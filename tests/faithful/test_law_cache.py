"""LawCache: its key names the target (one cache shared by engines over different targets
keeps their laws apart), and a max_tokens that would cut an output of the law is refused."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from flax import nnx

from infernix_jax import constrain as ic
from infernix_jax import faithful
from infernix_jax.runtime.types import GenerationRequest, SamplingOptions
from infernix_jax.testing import exact_oracle as h
from tests.faithful.test_exact_finite import PROMPT, SPEC, compiler, trie_of

LONGEST = 4  # "x{y}" and "caba" one byte per token


@functools.lru_cache(maxsize=None)
def target(seed: int = 0, layers: int = 2):
  cfg, model = h.tiny_model(seed=seed, layers=layers)
  g, s = nnx.split(model)
  return g, s, cfg


def request(max_tokens=LONGEST + 1, temperature=1.0, **kw) -> GenerationRequest:
  return GenerationRequest(PROMPT, max_tokens=max_tokens, constraint=SPEC,
                           sampling_law="exact-finite",
                           sampling=SamplingOptions(temperature=temperature, seed=0), **kw)


def test_a_shared_cache_gives_each_target_its_own_law():
  cache = faithful.LawCache()
  law0, t0 = cache.get(request(), compiler(), *target(0))
  law1, t1 = cache.get(request(), compiler(), *target(1))  # same cfg, other weights
  assert t0 > 0 and t1 > 0 and law1 is not law0
  d0, d1 = law0.distribution(), law1.distribution()
  assert set(d0) == set(d1)
  assert max(abs(d0[m] - d1[m]) for m in d0) > 1e-3
  alone, _ = faithful.LawCache().get(request(), compiler(), *target(1))
  np.testing.assert_allclose([d1[m] for m in d1], [alone.distribution()[m] for m in d1])
  again, seconds = cache.get(request(), compiler(), *target(0))
  assert again is law0 and seconds == 0.0


def test_fingerprint_names_the_weights_and_the_config():
  g, s, cfg = target(0)
  _, s_again = nnx.split(h.tiny_model(seed=0)[1])  # another state object, the same weights
  name = faithful.target_fingerprint(cfg, s)
  assert faithful.target_fingerprint(cfg, s) == name == faithful.target_fingerprint(cfg, s_again)
  assert len(name) == 16
  _, other_weights, same_cfg = target(1)
  assert same_cfg == cfg and faithful.target_fingerprint(cfg, other_weights) != name
  _, s1, cfg1 = target(0, layers=1)
  assert cfg1 != cfg and faithful.target_fingerprint(cfg1, s1) != name


def test_max_tokens_below_the_longest_member_is_refused():
  assert trie_of(SPEC).longest_member() == LONGEST
  cache = faithful.LawCache()
  with pytest.raises(faithful.MaxTokensTooSmallError,
                     match=rf"max_tokens={LONGEST - 1} is below the {LONGEST} tokens of its "
                           rf"longest member.*at least {LONGEST} \({LONGEST + 1} to let") as e:
    cache.get(request(max_tokens=LONGEST - 1), compiler(), *target())
  assert isinstance(e.value, ic.FeatureConflictError) and e.value.param == "max_tokens"
  assert (e.value.max_tokens, e.value.longest) == (LONGEST - 1, LONGEST)
  law, _ = cache.get(request(max_tokens=LONGEST), compiler(), *target())
  assert max(len(m) for m in law.distribution()) == LONGEST
  with pytest.raises(faithful.MaxTokensTooSmallError):  # a cache hit is checked too
    cache.get(request(max_tokens=2), compiler(), *target())


def test_the_whole_trie_is_refused_before_any_forward(monkeypatch):
  def no_forwards(*args, **kw):
    raise AssertionError("the target ran before the refusal")
  monkeypatch.setattr(faithful.ExactFiniteLaw, "compute", no_forwards)
  with pytest.raises(faithful.MaxTokensTooSmallError):
    faithful.LawCache().get(request(max_tokens=1), compiler(), *target())


def test_greedy_is_checked_against_its_one_output():
  cache = faithful.LawCache()
  law, _ = cache.get(request(max_tokens=LONGEST + 1, temperature=0.0), compiler(), *target())
  n = len(law.greedy_path)
  assert 0 < n
  with pytest.raises(faithful.MaxTokensTooSmallError, match=f"{n} tokens of greedy's output"):
    cache.get(request(max_tokens=n - 1, temperature=0.0), compiler(), *target())
  assert cache.get(request(max_tokens=n, temperature=0.0), compiler(), *target())[0] is law


def test_a_tolerance_is_checked_against_the_members_the_search_kept():
  law, _ = faithful.LawCache().get(request(law_tolerance=0.2), compiler(), *target())
  kept = max(len(m) for m in law.distribution())
  assert law.stop == "tolerance" and law.trie.longest_member() == kept
  with pytest.raises(faithful.MaxTokensTooSmallError, match="best-first search kept"):
    faithful.LawCache().get(request(max_tokens=kept - 1, law_tolerance=0.2), compiler(),
                            *target())
