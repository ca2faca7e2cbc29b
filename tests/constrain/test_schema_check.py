"""JSON Schema checker: errors with JSON Pointers, lenient drops, and exact rewrites vs jsonschema."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax.constrain import _xgr
from infernix_jax.constrain.schema import JSON_OBJECT_SCHEMA, check_json_schema
from infernix_jax.testing.schema_oracle import Walker
from infernix_jax.constrain.errors import RegexError, SchemaError, UnsupportedSchemaError

EOS = 256


@pytest.fixture(scope="module")
def byte_vocab():
  return ic.Vocabulary.from_tokens([bytes([i]) for i in range(256)] + [b"<eos>"],
                                   eos_ids=[EOS], name="bytes")


def matcher_for(vocab, schema: dict):
  text = check_json_schema(json.dumps(schema)).schema_json
  return _xgr.new_matcher(_xgr.compile_json_schema(vocab, text, max_whitespace=32))


def accepted(vocab, schema: dict, value) -> bool:
  return Walker(EOS).accepts(matcher_for(vocab, schema), value)


# Errors ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("schema,cls,loc,words", [
    ({"properties": {"a": {"type": "string", "format": "email"}}}, UnsupportedSchemaError,
     "/properties/a/format", "format"),
    ({"if": {"type": "string"}, "then": {"minLength": 1}}, UnsupportedSchemaError, "/if", "if"),
    ({"type": "array", "uniqueItems": True}, UnsupportedSchemaError, "/uniqueItems", "uniqueItems"),
    ({"type": "array", "contains": {}}, UnsupportedSchemaError, "/contains", "contains"),
    ({"type": "number", "multipleOf": 2}, UnsupportedSchemaError, "/multipleOf", "multipleOf"),
    ({"patternProperties": {"^a": {}}}, UnsupportedSchemaError, "/patternProperties", "closed"),
    ({"patternProperties": {"^a": {}, "b": {}}, "additionalProperties": False},
     UnsupportedSchemaError, "/patternProperties", "several"),
    ({"properties": {"ab": {}}, "patternProperties": {"^a": {}}, "additionalProperties": False},
     UnsupportedSchemaError, "/patternProperties", "declared"),
    ({"patternProperties": {"(?=x)": {}}, "additionalProperties": False}, RegexError,
     "/patternProperties/(?=x)", "lookahead"),
    ({"propertyNames": {"maxLength": 3}}, UnsupportedSchemaError, "/propertyNames", "propertyN"),
    ({"minProperties": 1}, UnsupportedSchemaError, "/minProperties", "minProperties"),
    ({"items": {"maxProperties": 1}}, UnsupportedSchemaError, "/items/maxProperties", "maxProp"),
    ({"unevaluatedProperties": False}, UnsupportedSchemaError, "/unevaluatedProperties", "uneval"),
    ({"dependentRequired": {"a": 3}}, SchemaError, "/dependentRequired/a", "arrays of names"),
    ({"$schema": "http://json-schema.org/draft-07/schema#",
      "dependencies": {"a": ["b"], "c": {"maxProperties": 2}}}, UnsupportedSchemaError,
     "/dependencies/c/maxProperties", "maxProperties"),
    ({"dependentRequired": {k: [] for k in "abcdefg"}}, UnsupportedSchemaError,
     "/dependentRequired", "dependencies"),
    ({"not": {"type": "null"}}, UnsupportedSchemaError, "/not", "not"),
    ({"$defs": {"a": {"$id": "x", "type": "string"}}, "$ref": "#/$defs/a"},
     UnsupportedSchemaError, "/$defs/a/$id", "$id"),
    ({"$ref": "other.json#/a"}, UnsupportedSchemaError, "/$ref", "outside this document"),
    ({"$ref": "#foo"}, UnsupportedSchemaError, "/$ref", "anchor"),
    ({"$ref": "#/$defs/missing"}, SchemaError, "/$ref", "does not resolve"),
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, UnsupportedSchemaError, "/oneOf",
     "oneOf"),
    ({"oneOf": [{"minimum": 1}, {"maximum": 5}]}, UnsupportedSchemaError, "/oneOf", "anyOf"),
    ({"oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, UnsupportedSchemaError, "/oneOf",
     "exclusive"),
    ({"type": "string", "pattern": "a", "minLength": 2, "maxLength": 4},
     UnsupportedSchemaError, "/minLength", "pattern"),
    ({"type": "string", "pattern": "^[a-z]+[0-9]*$", "maxLength": 4},
     UnsupportedSchemaError, "/maxLength", "pattern"),
    ({"type": "string", "pattern": "^[a-z]+$", "minLength": 5, "maxLength": 4}, SchemaError, "",
     "unsatisfiable"),
    ({"allOf": [{"pattern": "a"}, {"pattern": "b"}]}, UnsupportedSchemaError, "", "patterns"),
    ({"properties": {"p": {"pattern": "(?=a)"}}}, RegexError, "/properties/p/pattern",
     "lookahead"),
    ({"type": "strin"}, SchemaError, "/type", "type must be"),
    ({"type": ["string", "string"]}, SchemaError, "/type", "distinct"),
    ({"required": "a"}, SchemaError, "/required", "required"),
    ({"minLength": -1}, SchemaError, "/minLength", "non-negative"),
    ({"maxItems": 1.5}, SchemaError, "/maxItems", "non-negative"),
    ({"minimum": "3"}, SchemaError, "/minimum", "number"),
    ({"anyOf": []}, SchemaError, "/anyOf", "non-empty"),
    ({"enum": 3}, SchemaError, "/enum", "array"),
    ({"items": [{"type": "integer"}]}, SchemaError, "/items", "prefixItems"),
    ({"properties": {"a": 3}}, SchemaError, "/properties/a", "JSON object or a boolean"),
    ({"const": 12345678901234567890123}, UnsupportedSchemaError, "/const", "64-bit"),
    ({"type": "integer", "minimum": 5, "maximum": 4}, SchemaError, "", "unsatisfiable"),
    ({"allOf": [{"type": "string"}, {"type": "integer"}]}, SchemaError, "", "unsatisfiable"),
    (False, SchemaError, "", "unsatisfiable"),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"a": {}},
      "properties": {"x": {"$ref": "#/definitions/a", "type": "string"}}},
     UnsupportedSchemaError, "/properties/x/$ref", "allOf"),
])
def test_errors_name_the_keyword(schema, cls, loc, words):
  with pytest.raises(cls) as e:
    check_json_schema(json.dumps(schema))
  assert e.value.location == loc, str(e.value)
  assert words in str(e.value)
  assert isinstance(e.value, ic.ConstraintError)


@pytest.mark.parametrize("text,words", [
    ("{", "not valid JSON"), ('{"type": NaN}', "NaN"), ('{"a": 1, "a": 2}', "duplicate key"),
    ("[1]", "JSON object or a boolean"), ("", "not valid JSON"), ('"x"', "JSON object"),
])
def test_invalid_text(text, words):
  with pytest.raises(SchemaError, match=words):
    check_json_schema(text)


@pytest.mark.parametrize("text,loc", [
    ('{"enum": [1, 0.10000000000000000001]}', "/enum/1"),
    ('{"maximum": 1e400}', "/maximum"),
    ('{"const": {"a": [2.00000000000000000000001]}}', "/const/a/0"),
])
def test_numbers_that_binary64_would_round_are_rejected(text, loc):
  with pytest.raises(UnsupportedSchemaError, match="rounded") as e:
    check_json_schema(text)
  assert e.value.location == loc


def test_not_text():
  with pytest.raises(SchemaError, match="as text"):
    check_json_schema({"type": "string"})


def test_lenient_drops_and_records():
  schema = {"type": "object", "properties": {
      "a": {"type": "string", "format": "date"},
      "b": {"type": "array", "uniqueItems": True, "items": {"type": "integer"}}},
      "minProperties": 1}
  check = check_json_schema(json.dumps(schema), lenient=True)
  assert sorted(check.dropped) == [("/minProperties", "minProperties"),
                                   ("/properties/a/format", "format"),
                                   ("/properties/b/uniqueItems", "uniqueItems")]
  out = json.loads(check.schema_json)
  assert "format" not in check.schema_json and "uniqueItems" not in check.schema_json
  assert out["properties"]["b"]["items"] == {"type": "integer"}
  assert check_json_schema('{"type":"integer"}', lenient=True).dropped == ()


def test_lenient_oneof_is_recorded():
  check = check_json_schema('{"oneOf":[{"type":"integer"},{"type":"number"}]}',
                                    lenient=True)
  assert check.dropped == (("/oneOf", "oneOf"),)


def test_canonical_text_is_deterministic_and_order_preserving():
  a = check_json_schema('{"title":"t","type":"object","properties":{"z":{},"a":{}}}')
  b = check_json_schema('{ "type" : "object", "properties": {"z": {}, "a": {}}, '
                                '"description": "d"}')
  assert a == b
  assert list(json.loads(a.schema_json)["properties"]) == ["z", "a"]
  assert "title" not in a.schema_json and "description" not in b.schema_json


def test_json_object_schema_is_an_open_object(byte_vocab):
  m = _xgr.new_matcher(_xgr.compile_json_schema(byte_vocab, JSON_OBJECT_SCHEMA,
                                                max_whitespace=32))
  walker = Walker(EOS)
  assert walker.accepts(m, {"a": [1, {"b": None}]})
  for scalar in (1, "x", None, [1]):
    m = _xgr.new_matcher(_xgr.compile_json_schema(byte_vocab, JSON_OBJECT_SCHEMA,
                                                  max_whitespace=32))
    assert not walker.accepts(m, scalar)


# Exact rewrites: each schema is one that xgrammar alone would relax. Acceptance by the real
# matcher must equal jsonschema's verdict on every candidate value.
REWRITES = [
    ({"allOf": [{"type": "integer"}, {"minimum": 3}]}, [1, 3, 4, 2.5, "x"]),
    ({"anyOf": [{"type": "integer"}, {"type": "string"}], "minimum": 3, "maxLength": 1},
     [1, 3, "a", "ab", None]),
    ({"minLength": 2}, ["a", "ab", 1, None, [], {}]),
    ({"minimum": 2}, [1, 2, "a", True]),
    ({"type": "string", "enum": ["a", 1, "b"]}, ["a", 1, "b", "c"]),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"]},
     [{"a": 1}, {"a": 1, "b": "x"}, {"b": 2}, {"b": 1, "a": 1, "c": 3}]),
    ({"$ref": "#/$defs/a", "$defs": {"a": {"type": "integer"}}, "minimum": 3}, [1, 3, 5]),
    ({"type": "string", "pattern": "b+c"}, ["abbcd", "bc", "ac", "", "xbbbc"]),
    ({"type": "string", "pattern": "^a|b$"}, ["ax", "xb", "xa", "bx"]),
    ({"type": "string", "minLength": 1, "maxLength": 2}, ["", "a", "é😀", "abc"]),
    ({"const": {"a": [1, 2]}}, [{"a": [1, 2]}, {"a": [1]}, {"a": [1, 2], "b": 1}, [1, 2]]),
    ({"enum": [[1], {"x": None}, "s"]}, [[1], {"x": None}, "s", [], {"x": 0}]),
    ({"type": "integer", "exclusiveMinimum": 1.5, "maximum": 3.7}, [1, 2, 3, 4]),
    ({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}, [0, 0.5, 1, -1]),
    ({"type": "array", "prefixItems": [{"type": "integer"}, False]}, [[], [1], [1, 2]]),
    ({"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "string"},
      "maxItems": 2}, [[1], [1, "a"], [1, "a", "b"], [1, 2]]),
    ({"type": "object", "properties": {"kind": {"const": "a"}, "v": {"type": "integer"}},
      "oneOf": [{"properties": {"kind": {"const": "a"}}, "required": ["kind"]},
                {"properties": {"kind": {"const": "b"}}, "required": ["kind"]}]},
     [{"kind": "a"}, {"kind": "b"}, {"v": 1}, {"kind": "a", "v": 2}]),
    ({"oneOf": [{"type": "object", "properties": {"t": {"enum": ["x"]}, "x": {"type": "integer"}},
                 "required": ["t", "x"], "additionalProperties": False},
                {"type": "object", "properties": {"t": {"enum": ["y"]}}, "required": ["t"],
                 "additionalProperties": False}]},
     [{"t": "x", "x": 1}, {"t": "y"}, {"t": "x"}, {"t": "y", "x": 1}]),
    ({"$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"},
                                                          "v": {"type": "integer"}},
                         "required": ["v"], "additionalProperties": False}},
      "$ref": "#/$defs/node"},
     [{"v": 1}, {"v": 1, "next": {"v": 2}}, {"v": 1, "next": {}}, {}]),
    ({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},
                {"properties": {"a": {"minimum": 0}, "b": {"type": "string"}},
                 "additionalProperties": False}]},
     [{"a": 1}, {"a": -1}, {"a": 1, "b": "s"}, {"c": 1}, {"b": 2}]),
    ({"type": ["integer", "null"], "maximum": 0}, [None, 0, 1, "x"]),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "no": False}},
     [{"a": 1}, {"no": 1}, {"a": 1, "x": 2}, {"x": None}]),
    ({"allOf": [{"properties": {"a": False}}, {"properties": {"a": {}, "b": {}}}]},
     [{"b": 1}, {"a": 1}, {"c": 1}, 3]),
    ({"type": "string", "maxLength": 2**40}, ["", "abc"]),
    ({"type": "object", "properties": {"a": {}, "b": {"type": "integer"}},
      "dependentRequired": {"a": ["b"]}},
     [{}, {"a": 1}, {"a": 1, "b": 2}, {"b": 2}, {"a": 1, "b": "x"}, {"c": 1, "a": 2}, 5]),
    ({"dependentSchemas": {"card": {"properties": {"billing": {"type": "string"}},
                                    "required": ["billing"]}}},
     [{}, {"card": 1}, {"card": 1, "billing": "x"}, {"card": 1, "billing": 2}, {"billing": 2},
      "s", None]),

    ({"type": "object", "properties": {"id": {"type": "integer"}},
      "patternProperties": {"^x-[a-z]+$": {"type": "string"}}, "additionalProperties": False},
     [{"id": 1}, {"id": 1, "x-ab": "s"}, {"x-ab": 1}, {"y": "s"}, {"x-": "s"}, {"id": 1, "x-a": "s",
                                                                          "x-b": "t"}]),
    ({"enum": [{"x-a": "s"}, {"x-a": 1}, {"q": 1}],
      "patternProperties": {"x": {"type": "string"}}, "additionalProperties": False},
     [{"x-a": "s"}, {"x-a": 1}, {"q": 1}]),
    ({"oneOf": [{"properties": {"k": {"enum": ["a"]}}, "required": ["k"]},
                {"properties": {"k": {"enum": ["b"]}}, "required": ["k"]}]},
     [{"k": "a"}, {"k": "b"}, {"k": "c"}, None, 1, "s", [], {}]),
    ({"oneOf": [{"type": ["string", "integer"]}, {"type": "string"}]}, ["s", 1, None]),
    ({"oneOf": [{"minimum": 3}, {"type": "string"}]}, [1, 3, "s", None]),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "ab": {}},
      "additionalProperties": {"type": "string"}},
     [{"a": 1, "abc": "x"}, {"a": "x"}, {"ab": 1, "b": "s"}, {"b": 2}, {"": "e", "a": 0}]),
    ({"type": "string", "pattern": "^[a-c]+$", "minLength": 2, "maxLength": 3},
     ["a", "ab", "abc", "abca", "abd"]),
    ({"type": "string", "pattern": "^x[0-9]*$|^(yz)+$", "maxLength": 4},
     ["x", "x123", "x1234", "yz", "yzyz", "yzyzyz"]),
    ({"type": "string", "pattern": "b", "minLength": 1}, ["b", "abc", "", "aaa"]),
    ({"oneOf": [{"type": "object", "properties": {"a": {}}, "required": ["a"],
                 "additionalProperties": False},
                {"type": "object", "properties": {"b": {}}, "required": ["b"],
                 "additionalProperties": False}]},
     [{"a": 1}, {"b": 1}, {"a": 1, "b": 1}, {}]),
]


@pytest.mark.parametrize("schema,values", REWRITES)
def test_rewrites_are_exact_against_jsonschema(byte_vocab, schema, values):
  validator = jsonschema.Draft202012Validator(schema)
  for v in values:
    assert accepted(byte_vocab, schema, v) == validator.is_valid(v), (schema, v)


RANDOM_WALK_SCHEMAS = [
    {"type": "string", "minLength": 1, "maxLength": 3},
    {"type": "string", "pattern": "^[a-c]+$"},
    {"type": "string", "pattern": "[0-9]"},
    {"type": "string", "pattern": "^\\S\\s?.$"},
    {"type": "object", "properties": {"n": {"type": "number", "minimum": -1.5,
                                            "exclusiveMaximum": 2.25}}, "required": ["n"],
     "additionalProperties": False},
    {"type": "array", "prefixItems": [{"const": {"k": [True, None]}}], "items": False,
     "minItems": 1},
    {"anyOf": [{"type": "integer", "minimum": -3, "maximum": 3}, {"enum": ["p", "q"]}]},
]


@pytest.mark.parametrize("schema", RANDOM_WALK_SCHEMAS)
def test_random_walks_validate(byte_vocab, schema):
  """Every completed random byte walk on the compiled constraint satisfies the schema."""
  compiler = ic.ConstraintCompiler(byte_vocab)
  compiled = compiler.compile(ic.OutputConstraint.json_schema(json.dumps(schema)))
  validator = jsonschema.Draft202012Validator(schema)
  rng = np.random.default_rng(0)
  buf = np.zeros((1, byte_vocab.mask_words), np.int32)
  done = 0
  for _ in range(40):
    session = compiled.new_session()
    out = bytearray()
    for _step in range(60):
      session.lookahead([], out=buf)
      bits = np.unpackbits(buf[0].view(np.uint8), bitorder="little")[:EOS + 1]
      legal = np.flatnonzero(bits)
      if EOS in legal and (rng.random() < 0.3 or len(legal) == 1):
        tok = EOS
      else:
        choices = legal[legal != EOS]
        tok = int(rng.choice(choices))
      session.accept([tok])
      if tok == EOS:
        break
      out.append(tok)
    if session.terminated:
      done += 1
      value = json.loads(out.decode("utf-8"))
      assert validator.is_valid(value), (schema, out)
  assert done >= 5


def test_draft04_boolean_exclusive_bounds(byte_vocab):
  schema = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer",
            "minimum": 0, "exclusiveMinimum": True, "maximum": 3, "exclusiveMaximum": False}
  out = json.loads(check_json_schema(json.dumps(schema)).schema_json)
  assert out == {"type": "integer", "minimum": 1, "maximum": 3}
  for v, ok in ((0, False), (1, True), (3, True), (4, False)):
    assert accepted(byte_vocab, schema, v) == ok


def test_additional_keys_cannot_respell_declared_names(byte_vocab):
  """xgrammar alone accepts {"\\u0061": "x"} next to a declared integer "a"; we must not."""
  schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
  m = matcher_for(byte_vocab, schema)
  assert not (m.accept_string(b'{"\\u0061":"x"}') and m.accept_token(EOS))
  m = matcher_for(byte_vocab, schema)
  assert not (m.accept_string(b'{"a":1,"a":"x"}') and m.accept_token(EOS))
  m = matcher_for(byte_vocab, schema)
  assert m.accept_string(b'{"a":1,"b":"x"}') and m.accept_token(EOS) and m.is_terminated()
