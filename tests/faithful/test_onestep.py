"""sampling_law="onestep" as `OneStepLaw` (no trie, on-demand forwards): its bias gives the
estimator p̂*(t | y) ∝ p(t | y)·Φ̂(y t) at every node of a finite language (equal to the trie
analysis `ExactFiniteLaw.onestep` and to an FP64 oracle from full causal forwards), tokens past
the evaluated candidates keep the local weight, and the engine decodes unbounded grammars with
it, samples its law exactly with speculation (chi-square) and reports the forwards it spent."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from flax import nnx

from infernix_jax import constrain as ic
from infernix_jax import faithful
from infernix_jax.faithful.onestep import OneStepLaw
from infernix_jax.runtime.types import GenerationRequest, SamplingOptions
from infernix_jax.testing import exact_oracle as h
from tests.faithful.test_engine_law import engine, outputs, requests
from tests.faithful.test_exact_finite import (
  CHOICES,
  PROMPT,
  SPEC,
  compiler,
  onestep_oracle,
  trie_of,
)

NESTED = 'root ::= "{" root "}" | "{}"'  # balanced braces of any depth: an infinite language
LONG_PROMPT = tuple((np.arange(90) * 7 % 13 + 1).tolist())  # past the law's direct-verify limit


def target():
  cfg, model = h.tiny_model()
  return (*nnx.split(model), cfg)


def onestep_law(spec=SPEC, prompt=PROMPT, **kw) -> OneStepLaw:
  g, s, cfg = target()
  return OneStepLaw(g, s, cfg, prompt, compiler().compile(spec), h.toy_vocab(), **kw)


@functools.cache
def trie_law(temperature: float) -> faithful.ExactFiniteLaw:
  g, s, cfg = target()
  return faithful.ExactFiniteLaw.compute(g, s, cfg, PROMPT, trie_of(SPEC), h.toy_vocab(),
                                         temperature).onestep()


def biased(law: faithful.ExactFiniteLaw, node: int, row: np.ndarray, temperature: float):
  """log of exp(log p + bias / T) on the node's children and EOS (unnormalized: the bias holds
  −log Z, so these are the law's log probabilities if it is right)."""
  kids = law.trie.children[node]
  got = np.asarray([law.edge[c] + row[t] / temperature for t, c in kids.items()])
  eos = law.eos[node] + row[0] / temperature if law.trie.member[node] else -np.inf
  return got, eos


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_bias_is_the_trie_estimator_at_every_node(temperature):
  """candidates >= every legal set: at each trie node, alone and as a verified position of a
  draft chain, the biased p equals ExactFiniteLaw.onestep().next_logprobs (normalized too)."""
  want_law = trie_law(temperature)
  trie = want_law.trie
  law = onestep_law(candidates=16)
  for node in range(trie.size):  # one position: the state after the node's path
    out = np.zeros((1, h.TOY_VM), np.float32)
    law.bias_row(law.advance(0, trie.path(node)), [], out, temperature)
    _, lp, lp_eos = want_law.next_logprobs(node)
    got, eos = biased(want_law, node, out[0], temperature)
    np.testing.assert_allclose(got, lp, rtol=1e-5, atol=1e-5)
    assert eos == pytest.approx(lp_eos, rel=1e-5, abs=1e-5) or lp_eos == eos == -np.inf
  for leaf in trie.leaves():  # every node of a root-to-leaf chain in one bias_row
    path = trie.path(int(leaf))
    drafts = path + [12]  # and "x" after a complete member: unreachable, no bias
    out = np.zeros((len(drafts) + 1, h.TOY_VM), np.float32)
    law.bias_row(law.advance(0, []), drafts, out, temperature)
    for i in range(len(path) + 1):
      node = trie.walk(path[:i])
      _, lp, lp_eos = want_law.next_logprobs(node)
      got, eos = biased(want_law, node, out[i], temperature)
      np.testing.assert_allclose(got, lp, rtol=1e-5, atol=1e-5)
    assert not out[len(path) + 1].any()
  assert law.cost.forwards > trie.size and law.cost.tokens > 0 and law.cost.seconds > 0


def fp64_onestep(prompt, prefix, temperature, candidates=None):
  """FP64 oracle from full causal forwards (`models.forward`) and brute-force legal sets:
  {token (0 = EOS): p̂*(token | prefix)}, Φ̂ = 1 beyond the `candidates` most probable."""
  cfg, model = h.tiny_model()
  vocab = h.toy_vocab()
  legal = np.flatnonzero(h.choice_legal(CHOICES, vocab, prefix))
  toks = [int(t) for t in legal if t != 0]
  rows = [list(prompt) + list(prefix)] + [list(prompt) + list(prefix) + [t] for t in toks]
  logits = h.full_logits(cfg, model, rows)[:, :vocab.size] / temperature
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  order = sorted(toks, key=lambda t: -probs[0, t])
  chosen = set(order[:candidates]) if candidates else set(toks)
  w = {}
  for j, t in enumerate(toks):
    after = h.choice_legal(CHOICES, vocab, list(prefix) + [t])
    w[t] = probs[0, t] * (probs[j + 1, after].sum() if t in chosen else 1.0)
  if 0 in legal:
    w[0] = probs[0, 0]
  z = sum(w.values())
  return {t: v / z for t, v in w.items()}, order


def law_at(law, prefix, temperature) -> dict[int, float]:
  """The law's p̂* over the legal set after prefix: FP64 softmax of logits / T + bias / T."""
  cfg, model = h.tiny_model()
  vocab = h.toy_vocab()
  out = np.zeros((1, h.TOY_VM), np.float32)
  law.bias_row(law.advance(0, prefix), [], out, temperature)
  legal = np.flatnonzero(h.choice_legal(CHOICES, vocab, prefix))
  z = h.full_logits(cfg, model, [list(law.prompt) + list(prefix)])[0, legal] / temperature
  z = z + out[0, legal].astype(np.float64) / temperature
  p = np.exp(z - z.max())
  return dict(zip(legal.tolist(), p / p.sum()))


@pytest.mark.parametrize("prompt", [PROMPT, LONG_PROMPT], ids=["short", "long"])
@pytest.mark.parametrize("prefix", [(), (1,), (7,)])
def test_bias_matches_a_fp64_oracle(prompt, prefix):
  """The one-step law at a position equals Σ-over-legal-sets from full FP64 forwards (a long
  prompt goes through the law's chunked prefill and grows its cache)."""
  want, _ = fp64_onestep(prompt, prefix, 0.8)
  got = law_at(onestep_law(prompt=prompt), prefix, 0.8)
  assert set(got) == set(want)
  for t, v in want.items():
    assert got[t] == pytest.approx(v, rel=1e-5, abs=1e-7), t


def test_tokens_past_the_candidates_keep_the_local_weight():
  """candidates=2 at the root (8 legal first tokens): the two most probable are weighted by
  Φ̂, every other token (and EOS) keeps p; the ratio between two of them is the local law's."""
  cfg, model = h.tiny_model()
  law = onestep_law(candidates=2)
  want, order = fp64_onestep(PROMPT, (), 1.0, candidates=2)
  assert len(order) >= 6
  got = law_at(law, (), 1.0)
  for t, v in want.items():
    assert got[t] == pytest.approx(v, rel=1e-5, abs=1e-7), t
  p = h.exact_distribution(cfg, model, PROMPT, h.toy_vocab(), 1, 1.0)  # unconstrained p(t)
  a, b = order[2], order[-1]
  assert got[a] / got[b] == pytest.approx(p[(a,)] / p[(b,)], rel=1e-5)
  full, _ = fp64_onestep(PROMPT, (), 1.0)
  assert max(abs(full[t] - want[t]) for t in want) > 1e-3  # Φ̂ really changes the others


def test_greedy_forces_the_estimator_argmax():
  """T = 0: every node forces the argmax of p̂* (p at T = 1; EOS on ties) with GREEDY_BLOCK on
  the other legal tokens; the engine's greedy output is the trie estimator's greedy path."""
  want_law = trie_law(1.0)
  trie = want_law.trie
  law = onestep_law()
  for node in range(trie.size):
    tokens, lp, lp_eos = want_law.next_logprobs(node)
    out = np.zeros((1, h.TOY_VM), np.float32)
    law.bias_row(law.advance(0, trie.path(node)), [], out, 0.0)
    best = 0 if not len(tokens) or lp_eos >= lp.max() else int(tokens[np.argmax(lp)])
    assert out[0, best] == 0.0
    legal = list(trie.children[node]) + ([0] if trie.member[node] else [])
    assert all(out[0, t] == faithful.GREEDY_BLOCK for t in legal if t != best)
  [r] = outputs(engine("ngram"), requests(1, law="onestep", temperature=0.0))
  assert tuple(r.token_ids) == want_law.greedy_path


@pytest.mark.parametrize("name", ["none", "ngram"])
@pytest.mark.parametrize("spec", [
    ic.OutputConstraint.grammar(NESTED),
    ic.OutputConstraint.json_schema(json.dumps({"type": "integer"})),  # default whitespace
], ids=["nested-braces", "json-integer"])
def test_engine_decodes_unbounded_languages(name, spec):
  """No trie: outputs follow the constraint, EOS ends complete ones, the report counts the
  law's forwards (the same language is refused at submit when sampled under exact-finite)."""
  eng = engine(name)
  reqs = [GenerationRequest(PROMPT, max_tokens=16, constraint=spec, sampling_law="onestep",
                            sampling=SamplingOptions(temperature=t, seed=s))
          for s, t in enumerate([1.0] * 7 + [0.0])]
  results = outputs(eng, reqs)
  for r in results:
    session = compiler().compile(spec).new_session()
    assert int(session.accept(r.token_ids).accepted) == len(r.token_ids)
    if r.finish_reason.value == "stop":
      assert session.complete
    report = r.constraint
    assert report.law_trie_nodes == 0
    assert report.law_forwards >= 2 and report.law_tokens > 0 and report.law_seconds > 0
  assert any(r.finish_reason.value == "stop" for r in results)
  if name != "none":
    assert sum(r.drafted for r in results) > 0
  with pytest.raises(ic.ConstraintError):  # sampling μ* exactly needs the whole (infinite) trie
    eng.submit(GenerationRequest(PROMPT, max_tokens=16, constraint=spec,
                                 sampling_law="exact-finite",
                                 sampling=SamplingOptions(temperature=1.0)))
  assert not eng.busy


def test_engine_samples_follow_the_estimator_with_a_sampling_drafter():
  """Chi-square of onestep engine samples (a sampling drafter: residual draws under p̂*)
  against the estimator's FP64 law over whole outputs."""
  want = onestep_oracle()
  results = outputs(engine("dflash2/sampling"), requests(600, law="onestep"))
  assert h.chi_square_pvalue(want, [tuple(r.token_ids) for r in results]) > 1e-3
  assert sum(r.drafted for r in results) > 0
  assert all(r.finish_reason.value == "stop" for r in results)


def test_onestep_is_refused_without_a_constraint():
  with pytest.raises(ic.ConstraintError, match="needs an output constraint"):
    engine("none").submit(GenerationRequest(PROMPT, 4, sampling_law="onestep"))
  law, _ = faithful.LawCache().get(requests(1, law="onestep")[0], compiler(), *target())
  assert isinstance(law, OneStepLaw) and law.cost.forwards == 0  # no trie, no Φ yet
