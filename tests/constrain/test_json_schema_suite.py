"""JSON-Schema-Test-Suite: supported schemas accept exactly their valid instances; others raise."""

from __future__ import annotations

from pathlib import Path

import pytest

from infernix_jax import constrain as ic
from infernix_jax.testing import schema_suite

SUITE = Path(__file__).resolve().parents[2] / "../shared/data/json-schema-test-suite"
EOS = 256


@pytest.fixture(scope="module")
def byte_vocab():
  return ic.Vocabulary.from_tokens([bytes([i]) for i in range(256)] + [b"<eos>"],
                                   eos_ids=[EOS], name="bytes")


@pytest.fixture(scope="module")
def compiler(byte_vocab):
  return ic.ConstraintCompiler(byte_vocab)


@pytest.mark.parametrize("draft", ["draft2020-12", "draft7"])
def test_suite(draft, byte_vocab, compiler):
  if not (SUITE / "tests" / draft).exists():
    pytest.skip("shared data (json-schema-test-suite) not present")
  total = schema_suite.SuiteCounts()
  for path in schema_suite.suite_files(SUITE, draft):
    total.add(schema_suite.run_file(path, byte_vocab, EOS, draft7=draft == "draft7",
                                     compiler=compiler))
  print(f"{draft}: {total}")
  assert not total.failures, total.failures[:10]
  # Coverage floors (measured: docs/results/schema_coverage.md) so regressions are visible.
  assert total.supported >= {"draft2020-12": 140, "draft7": 135}[draft]
  assert total.passed >= 0.9 * (total.cases - total.budget)
  assert total.known_gap == 0 and total.budget <= 5


@pytest.mark.parametrize("schema,keyword", [
    ('{"type": "object", "uniqueItems": true}', "uniqueItems"),
    ('{"items": {"$dynamicRef": "#x"}}', "$dynamicRef"),
    ('{"$ref": "http://localhost:1234/draft2020-12/integer.json"}', "$ref"),
])
def test_unsupported_names_keyword_through_compiler(compiler, schema, keyword):
  with pytest.raises((ic.UnsupportedSchemaError, ic.NoExactBackendError)) as e:
    compiler.compile(ic.OutputConstraint.json_schema(schema))
  assert e.value.location.endswith(keyword)
