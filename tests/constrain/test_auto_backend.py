"""`auto`: the fastest exact backend per constraint kind, the next one where it refuses.

Oracles: jsonschema (with its format checker) validates every walk a compiled schema allows;
a refusal must name the keyword and its JSON Pointer.
"""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax.constrain import backends
from infernix_jax.testing.random_walk import random_walk

pytest.importorskip("llguidance")


@pytest.fixture(scope="module")
def compiler(qwen3_vocab):
  return ic.ConstraintCompiler(qwen3_vocab)


def _walks_validate(compiled, schema: dict, walks: int = 6) -> int:
  """Random walks of the compiled schema; each finished one must validate. -> finished."""
  vocab = compiled.vocab
  checker = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
  done = 0
  for seed in range(walks):
    session = compiled.new_session()
    ids, terminated = random_walk(session, np.random.default_rng(seed), max_tokens=300)
    if not terminated:
      continue
    text = vocab.decode([t for t in ids if t not in vocab.eos_ids])
    errors = list(checker.iter_errors(json.loads(text)))
    assert not errors, (text, errors[0].message)
    done += 1
  return done


FORMATS = {"type": "object", "required": ["day", "ip", "id"], "additionalProperties": False,
           "properties": {"day": {"type": "string", "format": "date"},
                          "ip": {"type": "string", "format": "ipv4"},
                          "id": {"type": "string", "format": "uuid"}}}
PATTERN_PROPERTIES = {"type": "object", "minProperties": 1, "additionalProperties": False,
                      "patternProperties": {"^x_[a-z]{1,4}$": {"type": "integer"}}}


@pytest.mark.parametrize("schema", [FORMATS, PATTERN_PROPERTIES], ids=["format", "patternProperties"])
def test_auto_compiles_schemas_from_the_wild_and_every_output_validates(compiler, schema):
  compiled = compiler.compile(ic.OutputConstraint.json_schema(json.dumps(schema)))
  assert compiled.backend in backends.names()
  assert _walks_validate(compiled, schema) >= 3


def test_format_is_refused_by_xgrammar_alone_and_taken_by_the_next_backend(compiler):
  text = json.dumps(FORMATS)
  with pytest.raises(ic.UnsupportedSchemaError) as e:
    compiler.compile(ic.OutputConstraint.json_schema(text), backend="xgrammar")
  assert "format" in str(e.value) and e.value.location == "/properties/day/format"
  assert compiler.compile(ic.OutputConstraint.json_schema(text)).backend == "llguidance"


@pytest.mark.parametrize("schema,keyword,pointer", [
    ({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "integer"},
                                                "uniqueItems": True}}},
     "uniqueItems", "/properties/tags/uniqueItems"),
    ({"type": "object", "properties": {"a": {"type": "integer"}},
      "if": {"properties": {"a": {"const": 1}}}, "then": {"required": ["b"]}},
     "if", "/if"),
], ids=["uniqueItems", "if-then-else"])
def test_a_schema_no_backend_enforces_is_refused_naming_keyword_and_pointer(compiler, schema,
                                                                           keyword, pointer):
  with pytest.raises(ic.NoExactBackendError) as e:
    compiler.compile(ic.OutputConstraint.json_schema(json.dumps(schema)))
  message = str(e.value)
  assert keyword in message and e.value.location == pointer
  assert isinstance(e.value, ic.UnsupportedConstraintError)
  for name in backends.candidates(ic.OutputConstraint.json_schema("{}")):
    assert f"{name}:" in message  # what each backend said
  assert compiler.stats.errors >= 1


def test_an_explicit_backend_is_kept(compiler):
  spec = ic.OutputConstraint.json_schema(json.dumps(
      {"type": "object", "properties": {"a": {"type": "integer"}}}))
  for name in ("xgrammar", "llguidance"):
    assert compiler.compile(spec, backend=name).backend == name
    assert backends.candidates(spec, name) == (name,)


def test_auto_follows_the_measured_order():
  order = backends.auto_order()
  for kind, spec in {"json_schema": ic.OutputConstraint.json_schema("{}"),
                     "regex": ic.OutputConstraint.regex("[0-9]+"),
                     "grammar": ic.OutputConstraint.grammar('root ::= "a"')}.items():
    got = backends.candidates(spec)
    measured = [n for n in order.get(kind, ()) if n in backends.names() and n != "trie"]
    assert list(got[:len(measured)]) == measured, (kind, got, measured)
    assert "trie" not in got and set(got) == set(backends.names()) - {"trie"}
  assert order.get("json_schema", ("llguidance",))[0] == "llguidance"


def test_the_auto_refusal_is_cached_per_backend_not_as_a_hit(compiler):
  spec = ic.OutputConstraint.json_schema(json.dumps(FORMATS))
  first = compiler.compile(spec)
  again = compiler.compile(spec)
  assert again.cache_status == "hit" and again.backend == first.backend
  assert spec in compiler


def test_the_constraint_report_names_the_backend_that_compiled_it(smollm2_vocab):
  from infernix_jax.runtime import GenerationRequest
  from infernix_jax.runtime._session import build_session

  compiler = ic.ConstraintCompiler(smollm2_vocab)
  for spec, name in [(ic.OutputConstraint.json_schema(json.dumps(FORMATS)), "llguidance"),
                     (ic.OutputConstraint.regex("[0-9]{3}"), None),
                     (ic.OutputConstraint.choice(["yes", "no"]), None)]:
    session, report = build_session(GenerationRequest([1, 2, 3], constraint=spec), compiler)
    assert report.backend == session.backend == compiler.compile(spec).backend
    assert report.backend == (name or backends.resolve(spec))
