"""Fuzzing the user-facing parsers: only ConstraintError (or success) ever comes out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infernix_jax import constrain as ic
from infernix_jax.constrain import _choice, _gbnf, _regex, _xgr
from infernix_jax.constrain.schema import check_json_schema
from infernix_jax.constrain.schema.strings import schema_pattern

GBNF_DIR = Path(__file__).resolve().parents[2] / "../shared/data/gbnf"
FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def byte_vocab():
  return ic.Vocabulary.from_tokens([bytes([i]) for i in range(256)] + [b"<eos>"], eos_ids=[256])


def only_constraint_errors(fn, *args, **kw):
  try:
    return fn(*args, **kw)
  except ic.ConstraintError:
    return None


REGEX_ATOMS = st.sampled_from(list("ab.|()[]^$*+?{}-,\\0123456789dDwWsSbBpPkuxc<>=!:") +
                              ["\\u{", "(?", "(?:", "(?<", "{2,3}", "[^", "\\p{L}", "é", "😀",
                               "\n", "\\u00e9", "\\x4"])
REGEXY = st.lists(REGEX_ATOMS, max_size=14).map("".join)


@FUZZ
@given(st.one_of(st.text(max_size=30), REGEXY))
def test_regex_checker_never_crashes(pattern):
  out = only_constraint_errors(_regex.check_regex, pattern)
  assert out is None or isinstance(out, str)
  only_constraint_errors(schema_pattern, pattern)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(REGEXY)
def test_accepted_regexes_compile(byte_vocab, pattern):
  """A pattern the checker accepts compiles in xgrammar (the checker's output is valid)."""
  out = only_constraint_errors(_regex.check_regex, pattern)
  if out is not None:
    _xgr.compile_regex(byte_vocab, out)


def _grammar_seeds() -> list[str]:
  seeds = ['root ::= "a" | b\nb ::= [0-9]+ ("x" b)?\n', 'root ::= ("a" | "b")* "\\n"\n']
  if GBNF_DIR.exists():
    seeds += [p.read_text(encoding="utf-8") for p in sorted(GBNF_DIR.glob("*.gbnf"))]
  return seeds


@st.composite
def mutated_grammar(draw):
  text = draw(st.sampled_from(_grammar_seeds()))
  for _ in range(draw(st.integers(1, 4))):
    if not text:
      break
    i = draw(st.integers(0, len(text) - 1))
    op = draw(st.sampled_from(["delete", "insert", "replace"]))
    piece = draw(st.sampled_from(list("\"[]()|*+?:=\\\n #-^{},") + ["::=", "root", "\\x", "\\u"]))
    if op == "delete":
      text = text[:i] + text[i + 1:]
    elif op == "insert":
      text = text[:i] + piece + text[i:]
    else:
      text = text[:i] + piece + text[i + 1:]
  return text


@FUZZ
@given(st.one_of(st.text(max_size=40), mutated_grammar()))
def test_gbnf_checker_never_crashes(text):
  out = only_constraint_errors(_gbnf.check_gbnf, text)
  assert out is None or out == text


@FUZZ
@given(st.one_of(st.none(), st.integers(), st.text(max_size=5),
                 st.lists(st.one_of(st.text(max_size=6), st.integers(), st.none()), max_size=6),
                 st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2)))
def test_choice_never_crashes(values):
  out = only_constraint_errors(_choice.canonical_choices, values)
  if out is not None:
    assert list(out) == sorted(set(values), key=lambda s: s.encode("utf-8"))
    assert _choice.choice_gbnf(values).startswith("root ::= ")


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
              st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6)),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.text(max_size=6), children, max_size=4)),
    max_leaves=12)

KEYWORDS = ["type", "properties", "required", "additionalProperties", "items", "prefixItems",
            "minItems", "maxItems", "minLength", "maxLength", "pattern", "minimum", "maximum",
            "exclusiveMinimum", "exclusiveMaximum", "const", "enum", "anyOf", "oneOf", "allOf",
            "$ref", "$defs", "definitions", "format", "not", "title", "uniqueItems", "if",
            "additionalItems", "$id", "$schema", "minProperties"]
TYPES = st.sampled_from(["null", "boolean", "object", "array", "string", "number", "integer"])


def _keyword_value(children):
  return st.one_of(
      TYPES, st.lists(TYPES, max_size=3), st.integers(-3, 12), st.booleans(),
      st.sampled_from(["#", "#/$defs/a", "#/definitions/b", "#/properties/x", "http://x/y",
                       "^[a-c]+$", "a|b", "(", "\\d{2}", "email"]),
      children, st.lists(children, max_size=3),
      st.dictionaries(st.sampled_from(["a", "b", "x"]), children, max_size=3),
      st.lists(st.sampled_from(["a", "b", "x"]), max_size=3), JSON_VALUES)


SCHEMAS = st.recursive(
    st.one_of(st.booleans(), st.just({})),
    lambda children: st.dictionaries(st.sampled_from(KEYWORDS), _keyword_value(children),
                                     max_size=5),
    max_leaves=10)


@FUZZ
@given(st.one_of(st.text(max_size=40), JSON_VALUES.map(json.dumps)))
def test_schema_checker_on_random_text(text):
  only_constraint_errors(check_json_schema, text)


@settings(max_examples=250, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(SCHEMAS, st.booleans())
def test_schema_like_dicts_check_and_compile(byte_vocab, schema, lenient):
  """Schema-like input: ConstraintError or a schema that xgrammar compiles as given."""
  check = only_constraint_errors(check_json_schema, json.dumps(schema), lenient=lenient)
  if check is not None:
    _xgr.compile_json_schema(byte_vocab, check.schema_json, max_whitespace=32)
