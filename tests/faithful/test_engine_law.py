"""sampling_law="exact-finite" through the engine: samples of ordinary decoding and of every
kind of drafter follow the FP64 μ* (chi-square), greedy is the member-level argmax, local lanes
in the same batch keep their law, and invalid combinations are refused before queueing.

Power: each chi-square test draws N = 300 samples and passes at p > 1e-3. Against the naive
variant (the local law μ_proj, what an engine that ignored sampling_law would sample) the
noncentrality at N = 300 is about 4,700 on the 6-choice set (7 pooled bins; 26,000 on the
Dyck set), and 0.99 power at these degrees of freedom needs only 45-55: the tests reject
μ_proj with probability 1 - 1e-12 or better, and still reject at 0.99 a law 100 times
closer to μ* than μ_proj is (chi-square distance). The onestep oracle is as far from μ*
(noncentrality 1,400 at N = 300). (N was 1,200.)
"""

from __future__ import annotations

import functools

import pytest

from infernix_jax import constrain as ic
from infernix_jax.runtime import drafters
from infernix_jax.runtime.engine import Engine
from infernix_jax.runtime.types import GenerationRequest, SamplingOptions
from infernix_jax.testing import exact_oracle as h
from tests.faithful.test_exact_finite import (CHOICES, DYCK, DYCK_WORDS, PROMPT, SPEC,
                                              onestep_oracle, oracle)

K = 3
LANES = 32
N = 300  # samples per chi-square test (power: the module docstring)
MAX_TOKENS = 5  # the longest member tokenization is 4 tokens, + EOS


@functools.lru_cache(maxsize=None)
def engine(name: str, bridge: str = "stages", device_automaton: bool = False) -> Engine:
  cfg, model = h.tiny_model()
  base, sampling = name.removesuffix("/sampling"), name.endswith("/sampling")
  jump, base = base.startswith("jump+"), base.removeprefix("jump+")
  pool = dict(k=K, model=h.tiny_model(seed=1), n=2, weights="random", sampling=sampling)
  opts = {f: v for f, v in pool.items() if f in drafters.fields(base)}
  drafter = drafters.create(base, opts, target=(cfg, model),
                            jump_forward=jump) if name != "none" else None
  return Engine(model, h.toy_vocab(), drafter, lanes=LANES, capacity=32, bridge=bridge,
                device_automaton=device_automaton)


def requests(n, law="exact-finite", temperature=1.0, **kw):
  return [GenerationRequest(PROMPT, max_tokens=MAX_TOKENS, constraint=SPEC, sampling_law=law,
                            sampling=SamplingOptions(temperature=temperature, seed=s), **kw)
          for s in range(n)]


def outputs(eng, reqs):
  results = eng.generate(reqs)
  errors = [r.error for r in results if r.error]
  assert not errors, errors[:3]
  return results


@pytest.mark.parametrize("name", ["none", "jump+ngram", "mtp", "dflash2/sampling"])
def test_engine_samples_follow_mu_star(name):
  """N samples of each drafter kind follow μ* (power against μ_proj: the module docstring)."""
  want, _ = oracle()
  results = outputs(engine(name), requests(N))
  samples = [tuple(r.token_ids) for r in results]
  assert h.chi_square_pvalue(want, samples) > 1e-3, name
  assert all(r.finish_reason.value == "stop" for r in results)
  if name != "none":
    assert sum(r.drafted for r in results) > 0  # drafts really were verified against p*
  report = results[0].constraint
  assert report.law_trie_nodes > 0


def test_law_tolerance_samples_follow_the_certified_law():
  """law_tolerance > 0: the engine samples μ* restricted to the members a best-first search
  found (oracle: the FP64 μ* renormalized over them), whose TV to μ* the report bounds."""
  from flax import nnx

  from infernix_jax import faithful
  mu, _ = oracle()
  cfg, model = h.tiny_model()
  g, s = nnx.split(model)
  session = ic.ConstraintCompiler(h.toy_vocab()).compile(SPEC).new_session()
  law = faithful.ExactFiniteLaw.search(g, s, cfg, PROMPT, session, h.toy_vocab(), 1.0,
                                       tolerance=0.2, max_nodes=10_000, max_depth=64)
  kept = set(law.distribution())
  assert law.stop == "tolerance" and kept < set(mu)  # some members were left out
  results = outputs(engine("jump+ngram"), requests(N, law_tolerance=0.2))
  report = results[0].constraint
  assert report.law_stop == "tolerance" and report.law_tv_bound == pytest.approx(law.tv_bound)
  samples = [tuple(r.token_ids) for r in results]
  z = sum(mu[m] for m in kept)
  assert h.chi_square_pvalue({m: mu[m] / z for m in kept}, samples) > 1e-3
  assert 0.5 * sum(abs(mu[m] - (mu[m] / z if m in kept else 0.0)) for m in mu) <= 0.2


def test_onestep_law_through_the_engine():
  """sampling_law="onestep" (finite constraint): samples follow its FP64 oracle."""
  want = onestep_oracle()
  results = outputs(engine("jump+ngram"), requests(N, law="onestep"))
  assert h.chi_square_pvalue(want, [tuple(r.token_ids) for r in results]) > 1e-3


def test_device_automaton_lanes_follow_mu_star():
  """Trie lanes whose masks come from the device automaton get the same host bias."""
  want, _ = oracle()
  reqs = requests(N, backend="trie")
  results = outputs(engine("jump+ngram", device_automaton=True), reqs)
  assert h.chi_square_pvalue(want, [tuple(r.token_ids) for r in results]) > 1e-3


def test_bounded_dyck_grammar_follows_mu_star():
  """A context-free (bounded) language through the engine: μ* over its 13 members."""
  want, _ = oracle(1.0, DYCK_WORDS)
  reqs = [GenerationRequest(PROMPT, max_tokens=13, sampling_law="exact-finite",
                            constraint=ic.OutputConstraint.grammar(DYCK),
                            sampling=SamplingOptions(temperature=1.0, seed=s)) for s in range(N)]
  eng = Engine(h.tiny_model()[1], h.toy_vocab(), engine("jump+ngram").drafter, lanes=LANES,
               capacity=32)
  results = outputs(eng, reqs)
  assert h.chi_square_pvalue(want, [tuple(r.token_ids) for r in results]) > 1e-3


def test_local_lanes_keep_the_local_law_in_a_mixed_batch():
  """Half the lanes exact-finite, half local: each half follows its own law (and the local
  half fails μ*, the power check of the engine path)."""
  cfg, model = h.tiny_model()
  want, _ = oracle()
  local = h.exact_distribution(cfg, model, PROMPT, h.toy_vocab(), MAX_TOKENS, 1.0,
                               choices=CHOICES)
  reqs = [r for pair in zip(requests(N), requests(N, law="local")) for r in pair]
  for i, r in enumerate(reqs):
    r.sampling = SamplingOptions(temperature=1.0, seed=i)
  results = outputs(engine("jump+ngram"), reqs)
  star = [tuple(r.token_ids) for r in results[0::2]]
  proj = [tuple(r.token_ids) for r in results[1::2]]
  assert h.chi_square_pvalue(want, star) > 1e-3
  assert h.chi_square_pvalue(local, proj) > 1e-3
  assert h.chi_square_pvalue(want, proj) < 1e-6


def test_local_law_is_bit_identical_without_law_lanes():
  """No lane with another law: no bias is uploaded, the tokens are today's."""
  eng = engine("jump+ngram")
  before = eng.host.stats["bias_bytes_uploaded"]
  a = outputs(eng, requests(64, law="local"))
  assert eng.host.stats["bias_bytes_uploaded"] == before
  _, model = h.tiny_model()
  b = outputs(Engine(model, h.toy_vocab(), eng.drafter, lanes=LANES, capacity=32),
              requests(64, law="local"))
  assert [r.token_ids for r in a] == [r.token_ids for r in b]


@pytest.mark.parametrize("name", ["none", "jump+ngram", "dflash"])
def test_engine_greedy_is_the_member_level_argmax(name):
  want, _ = oracle()
  vocab = h.toy_vocab()
  mass: dict[bytes, float] = {}
  for m, v in want.items():
    mass[vocab.decode(m)] = mass.get(vocab.decode(m), 0.0) + v
  best = max(mass, key=mass.get)
  [r] = outputs(engine(name), requests(1, temperature=0.0))
  assert vocab.decode(r.token_ids) == best
  tokenizations = {m: v for m, v in want.items() if vocab.decode(m) == best}
  assert tuple(r.token_ids) == max(tokenizations, key=tokenizations.get)


def test_invalid_combinations_are_refused():
  eng = engine("none")
  with pytest.raises(ValueError, match="sampling_law='nope' must be one of local, exact-finite"):
    eng.submit(GenerationRequest(PROMPT, MAX_TOKENS, constraint=SPEC, sampling_law="nope"))
  with pytest.raises(ic.ConstraintError, match="needs a finite output constraint"):
    eng.submit(GenerationRequest(PROMPT, MAX_TOKENS, sampling_law="exact-finite"))
  with pytest.raises(ic.ConstraintError, match="cannot be combined with top_k, min_p"):
    eng.submit(GenerationRequest(PROMPT, MAX_TOKENS, constraint=SPEC,
                                 sampling_law="exact-finite",
                                 sampling=SamplingOptions(temperature=1.0, top_k=2, min_p=0.1)))
  with pytest.raises(ic.ConstraintError, match="max_whitespace=0"):
    eng.submit(GenerationRequest(PROMPT, MAX_TOKENS, constraint=ic.OutputConstraint.json_schema(
        '{"enum": [1, 2]}'), sampling_law="exact-finite"))
  with pytest.raises(ic.ConstraintError, match="max_depth=64"):
    eng.submit(GenerationRequest(PROMPT, MAX_TOKENS, constraint=ic.OutputConstraint.regex("a+"),
                                 sampling_law="exact-finite",
                                 sampling=SamplingOptions(temperature=1.0)))
  for bad in (-0.1, 1.0, "0.1", True):
    with pytest.raises(ValueError, match="law_tolerance=.* must be a number in"):
      eng.submit(GenerationRequest(PROMPT, MAX_TOKENS, constraint=SPEC,
                                   sampling_law="exact-finite", law_tolerance=bad))
  with pytest.raises(ValueError, match="applies to sampling_law='exact-finite' only"):
    eng.submit(GenerationRequest(PROMPT, MAX_TOKENS, constraint=SPEC, law_tolerance=0.1))
  with pytest.raises(ic.ConstraintError, match="needs the engine's stages bridge"):
    engine("none", "callback").submit(requests(1)[0])
  assert not eng.busy
