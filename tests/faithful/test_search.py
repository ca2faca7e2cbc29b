"""Best-first tries: the certified greedy argmax and the tolerance-bounded law, against the
whole trie's exact law and the FP64 enumeration oracle."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from flax import nnx

from infernix_jax import constrain as ic
from infernix_jax import faithful
from infernix_jax.testing import exact_oracle as h

# A larger finite language than the choice tests': many members, many tokenizations each.
WORDS = ("abc", "ab", "ba1", "cab", "x{y}", "caba", "bb", "cc", "abab", "ca", "b1", "xy")
PROMPTS = ((1, 1, 2, 1, 1, 2, 1), (2, 3), (5, 1, 4), (7,))
BUDGET = dict(max_nodes=faithful.DEFAULT_MAX_NODES, max_depth=faithful.DEFAULT_MAX_DEPTH)


@functools.lru_cache(maxsize=None)
def compiled():
  return ic.ConstraintCompiler(h.toy_vocab()).compile(ic.OutputConstraint.choice(list(WORDS)))


@functools.lru_cache(maxsize=None)
def full_law(prompt, temperature):
  cfg, model = h.tiny_model()
  g, s = nnx.split(model)
  trie = faithful.build(compiled().new_session(), h.toy_vocab())
  return faithful.ExactFiniteLaw.compute(g, s, cfg, prompt, trie, h.toy_vocab(), temperature)


def searched(prompt, temperature, tolerance=0.0):
  cfg, model = h.tiny_model()
  g, s = nnx.split(model)
  return faithful.ExactFiniteLaw.search(g, s, cfg, prompt, compiled().new_session(),
                                        h.toy_vocab(), temperature, tolerance=tolerance,
                                        **BUDGET)


def unexpanded(law) -> list[int]:
  """The frontier a search left: leaves that are not members (a whole trie has none)."""
  return [i for i, k in enumerate(law.trie.children) if not k and not law.trie.member[i]]


def string_mass(dist) -> dict[bytes, float]:
  out: dict[bytes, float] = {}
  for seq, v in dist.items():
    text = h.toy_vocab().decode(list(seq))
    out[text] = out.get(text, 0.0) + v
  return out


def test_tolerance_zero_is_the_whole_language():
  full, law = full_law(PROMPTS[0], 1.0), searched(PROMPTS[0], 1.0)
  assert law.stop == "complete" and law.tv_bound == 0.0
  assert law.trie.size == full.trie.size
  want, got = full.distribution(), law.distribution()
  assert set(got) == set(want)
  for seq, v in want.items():
    assert got[seq] == pytest.approx(v, rel=1e-5, abs=1e-12)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_argmax_is_certified_without_the_whole_trie(prompt):
  full, law = full_law(prompt, 0.0), searched(prompt, 0.0)
  vocab = h.toy_vocab()
  assert vocab.decode(list(law.greedy_path)) == vocab.decode(list(full.greedy_path))
  mass = string_mass(full.distribution())
  assert vocab.decode(list(law.greedy_path)) == max(mass, key=mass.get)
  assert law.stop in ("greedy", "complete")


def test_greedy_search_stops_before_the_whole_trie():
  """Once the argmax is certain the search stops: unexpanded prefixes are left over."""
  early = [p for p in PROMPTS if searched(p, 0.0).stop == "greedy"
           and unexpanded(searched(p, 0.0))]
  assert not unexpanded(full_law(PROMPTS[0], 0.0))
  assert early


@pytest.mark.parametrize("tolerance", [0.02, 0.2])
def test_tolerance_bounds_the_distance_to_mu_star(tolerance):
  """The pruned law is μ* restricted to the members found: its distance to μ* (FP64 sums
  over the whole trie's law) is within the certified bound, itself within the tolerance."""
  for prompt in PROMPTS[:2]:
    full, law = full_law(prompt, 1.0), searched(prompt, 1.0, tolerance)
    assert law.tv_bound <= tolerance
    want, got = full.distribution(), law.distribution()
    tv = 0.5 * sum(abs(got.get(m, 0.0) - v) for m, v in want.items())
    assert tv <= law.tv_bound + 1e-9
    if law.stop == "tolerance":
      assert unexpanded(law)
      # the members found keep their μ* ratios
      z = sum(want[m] for m in got)
      for m, v in got.items():
        assert v == pytest.approx(want[m] / z, rel=1e-5)


def test_unexpanded_tokens_are_blocked_by_the_bias():
  law = searched(PROMPTS[0], 1.0, 0.2)
  frontier = [i for i in unexpanded(law)
              if np.isfinite(law.log_phi[int(law.trie.parent[i])])]
  assert frontier
  node = int(law.trie.parent[frontier[0]])
  out = np.zeros(h.toy_vocab().size, np.float32)
  law.bias(node, out, 1.0)
  assert out[law.trie.token[frontier[0]]] == faithful.GREEDY_BLOCK
  assert np.isfinite(out).all()


def test_budget_errors_name_the_way_out():
  cfg, model = h.tiny_model()
  g, s = nnx.split(model)
  with pytest.raises(faithful.LanguageTooLargeError, match="law_tolerance"):
    faithful.ExactFiniteLaw.search(g, s, cfg, PROMPTS[0], compiled().new_session(),
                                   h.toy_vocab(), 1.0, max_nodes=10, max_depth=64)
