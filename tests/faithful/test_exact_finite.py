"""The exact-finite law at library level against independent FP64 oracles: the token trie
equals brute-force enumeration, Φ equals direct summation over members, samples follow μ*
(chi-square) and fail μ_proj (power), greedy is the member-level argmax."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from flax import nnx

from infernix_jax import constrain as ic
from infernix_jax import faithful
from infernix_jax.testing import exact_oracle as h

PROMPT = (1, 1, 2, 1, 1, 2, 1)
# Several tokenizations each ("abc" = abc | ab c | a b c | a bc ...), and different first-token
# fan-out, so the local projection and μ* disagree.
CHOICES = (b"abc", b"ab", b"ba1", b"cab", b"x{y}", b"caba")
SPEC = ic.OutputConstraint.choice([c.decode() for c in CHOICES])


@functools.lru_cache(maxsize=None)
def compiler():
  return ic.ConstraintCompiler(h.toy_vocab())


def trie_of(spec, backend="xgrammar", **kw):
  return faithful.build(compiler().compile(spec, backend=backend).new_session(), h.toy_vocab(),
                        **kw)


def brute_members(strings) -> set[tuple[int, ...]]:
  """Every token sequence (EOS excluded) whose bytes spell one of `strings` (no sessions):
  each string split every way into ordinary tokens of the vocabulary."""
  vocab = h.toy_vocab()
  ids = [t for t in range(vocab.size) if t not in vocab.eos_ids and t not in vocab.control_ids]

  def splits(rest: bytes):
    if not rest:
      yield ()
      return
    for t in ids:
      b = vocab.token_bytes[t]
      if b and rest.startswith(b):
        for tail in splits(rest[len(b):]):
          yield (t,) + tail

  return {seq for s in strings for seq in splits(s)}


@functools.lru_cache(maxsize=None)
def oracle(temperature: float = 1.0, strings: tuple[bytes, ...] = CHOICES):
  """FP64: p(· | prefix) at every prefix of every member of `strings`, then μ* and Φ by
  direct sums."""
  cfg, model = h.tiny_model()
  vocab = h.toy_vocab()
  members = sorted(brute_members(set(strings)))
  prefixes = sorted({m[:i] for m in members for i in range(len(m) + 1)})
  logits = h.full_logits(cfg, model, [list(PROMPT) + list(p) for p in prefixes])
  probs = {}
  for pre, z in zip(prefixes, logits):
    z = z[:vocab.size] / temperature
    e = np.exp(z - z.max())
    probs[pre] = e / e.sum()
  joint = {m: np.prod([probs[m[:i]][m[i]] for i in range(len(m))]) * probs[m][0] for m in members}
  z = sum(joint.values())
  phi = {pre: sum(v for m, v in joint.items() if m[:len(pre)] == pre) /
         np.prod([probs[pre[:i]][pre[i]] for i in range(len(pre))]) for pre in prefixes}
  return {m: v / z for m, v in joint.items()}, phi


@functools.cache
def onestep_oracle(strings: tuple[bytes, ...] = CHOICES):
  """FP64 onestep law: p̂*(t | y) ∝ p(t | y)·Σ_{u legal after y t} p(u | y t), EOS weight
  p(EOS | y); legal sets from the brute-force members."""
  cfg, model = h.tiny_model()
  vocab = h.toy_vocab()
  members = set(brute_members(set(strings)))
  prefixes = sorted({m[:i] for m in members for i in range(len(m) + 1)})
  logits = h.full_logits(cfg, model, [list(PROMPT) + list(p) for p in prefixes])
  probs = {}
  for pre, z in zip(prefixes, logits):
    z = z[:vocab.size]
    e = np.exp(z - z.max())
    probs[pre] = e / e.sum()
  pset = set(prefixes)
  kids = {pre: [t for t in range(1, vocab.size) if pre + (t,) in pset] for pre in prefixes}
  mass = {pre: sum(probs[pre][t] for t in kids[pre]) + (probs[pre][0] if pre in members else 0)
          for pre in prefixes}

  def step(pre):  # (token or 0 for EOS) -> probability under the onestep law
    w = {t: probs[pre][t] * mass[pre + (t,)] for t in kids[pre]}
    if pre in members:
      w[0] = probs[pre][0]
    z = sum(w.values())
    return {t: v / z for t, v in w.items()}

  out = {}
  for m in members:
    pr = 1.0
    for i in range(len(m)):
      pr *= step(m[:i])[m[i]]
    out[m] = pr * step(m)[0]
  return out


@functools.lru_cache(maxsize=None)
def law(temperature: float = 1.0):
  cfg, model = h.tiny_model()
  g, s = nnx.split(model)
  return faithful.ExactFiniteLaw.compute(g, s, cfg, PROMPT, trie_of(SPEC), h.toy_vocab(),
                                         temperature)


@pytest.mark.parametrize("backend", ["xgrammar", "trie", "llguidance"])
def test_trie_is_every_tokenization(backend):
  trie = trie_of(SPEC, backend)
  want = brute_members(set(CHOICES))
  assert set(map(tuple, trie.members())) == want
  assert len(want) > 2 * len(CHOICES)  # several tokenizations per member
  nodes = {tuple(trie.path(i)) for i in range(trie.size)}
  assert nodes == {m[:i] for m in want for i in range(len(m) + 1)}
  assert trie.eos_ids == (0,)


def test_phi_matches_fp64_summation():
  want_mu, want_phi = oracle()
  got = law()
  for i in range(got.trie.size):
    assert np.exp(got.log_phi[i]) == pytest.approx(want_phi[tuple(got.trie.path(i))],
                                                   rel=1e-4, abs=1e-9)
  mu = got.distribution()
  assert set(mu) == set(want_mu)
  for m, v in want_mu.items():
    assert mu[m] == pytest.approx(v, rel=1e-4, abs=1e-9)
  assert got.cost.forwards >= 2 and got.cost.tokens > 0 and got.cost.seconds > 0


@pytest.mark.parametrize("limit", [6, 13])
def test_trie_chunks_cover_every_node_once_and_score_alike(limit):
  """Tree-attention calls over small chunks (root paths repeated as context) score every node
  exactly once and give the same node distributions as the default single chunk."""
  trie = trie_of(SPEC)
  parts = faithful.target.chunks(trie, limit)
  assert len(parts) >= 2
  scored = [n for _, owned in parts for n in owned]
  assert sorted(scored) == list(range(1, trie.size))  # the root is scored by the first call
  for nodes, owned in parts:
    assert len(nodes) <= limit and owned <= set(nodes)
    held = set(nodes) | {0}
    assert all(int(trie.parent[n]) in held for n in nodes)  # closed under ancestors
  cfg, model = h.tiny_model()
  g, s = nnx.split(model)
  edge, eos, cost = faithful.node_logprobs(g, s, cfg, PROMPT, trie, h.toy_vocab().size, 1.0,
                                           tokens_per_call=limit)
  assert cost.forwards == len(parts) + 1  # + the prompt's prefill
  np.testing.assert_allclose(edge, law().edge, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(eos, law().eos, rtol=1e-5, atol=1e-6)


def test_samples_follow_mu_star_and_not_the_local_projection():
  """Chi-square against μ* passes; the same samples fail μ_proj (the power check)."""
  want_mu, _ = oracle()
  cfg, model = h.tiny_model()
  local = h.exact_distribution(cfg, model, PROMPT, h.toy_vocab(), 5, 1.0, choices=CHOICES)
  tv = 0.5 * sum(abs(want_mu.get(k, 0) - local.get(k, 0)) for k in set(want_mu) | set(local))
  assert tv > 0.05, tv  # the laws really differ here
  rng = np.random.default_rng(0)
  samples = [law().sample(rng) for _ in range(4000)]
  assert h.chi_square_pvalue(want_mu, samples) > 1e-3
  assert h.chi_square_pvalue(local, samples) < 1e-6


def test_onestep_law_matches_fp64():
  """The one-step estimate's law equals its FP64 oracle, and differs from μ* here."""
  want = onestep_oracle()
  got = law().onestep().distribution()
  assert set(got) == set(want)
  for m, v in want.items():
    assert got[m] == pytest.approx(v, rel=1e-4, abs=1e-9)
  mu, _ = oracle()
  assert 0.5 * sum(abs(mu[m] - want[m]) for m in mu) > 1e-3


def test_greedy_is_the_member_level_argmax():
  want_mu, _ = oracle()
  vocab = h.toy_vocab()
  mass: dict[bytes, float] = {}
  for m, v in want_mu.items():
    mass[vocab.decode(m)] = mass.get(vocab.decode(m), 0.0) + v
  best = max(mass, key=mass.get)
  path = law(0.0).greedy_path
  assert vocab.decode(path) == best
  tokenizations = {m: v for m, v in want_mu.items() if vocab.decode(m) == best}
  assert path == max(tokenizations, key=tokenizations.get)


@pytest.mark.parametrize("backend", ["xgrammar", "llguidance"])
def test_json_enum_needs_compact_whitespace(backend):
  schema = json.dumps({"enum": [1, 2, 12, 21]})
  with pytest.raises(ic.ConstraintError, match="max_whitespace=0"):
    faithful.check_finite_kind(ic.OutputConstraint.json_schema(schema))
  with pytest.raises(ic.ConstraintError, match="json_object accepts infinitely many"):
    faithful.check_finite_kind(ic.OutputConstraint.json_object())
  spec = ic.OutputConstraint.json_schema(schema, max_whitespace=0)
  faithful.check_finite_kind(spec)
  trie = trie_of(spec, backend)
  assert set(map(tuple, trie.members())) == brute_members({b"1", b"2", b"12", b"21"})


DYCK = 'root ::= (p p?)?\np ::= "{" q "}"\nq ::= ("{}" "{}"?)?'
DYCK_WORDS = tuple(sorted({b""} | {b"{" + q + b"}" for q in (b"", b"{}", b"{}{}")} | {
    b"{" + a + b"}{" + b + b"}" for a in (b"", b"{}", b"{}{}") for b in (b"", b"{}", b"{}{}")}))


def test_bounded_dyck_grammar():
  """Balanced braces of depth <= 2, at most two top-level pairs."""
  trie = trie_of(ic.OutputConstraint.grammar(DYCK))
  want = set(DYCK_WORDS)
  vocab = h.toy_vocab()
  assert {vocab.decode(m) for m in trie.members()} == want
  assert set(map(tuple, trie.members())) == brute_members(want)


def test_too_large_or_infinite_languages_are_refused():
  with pytest.raises(faithful.LanguageTooLargeError, match="max_depth=8 tokens"):
    trie_of(ic.OutputConstraint.regex("a+"), max_depth=8)
  with pytest.raises(faithful.LanguageTooLargeError, match="max_nodes=5"):
    trie_of(SPEC, max_nodes=5, name="choice ['abc', ...]")
