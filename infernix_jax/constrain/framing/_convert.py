"""Source -> EBNF text for embedding: strict tool values and content constraints.

The matcher library converts (text only: the framed grammar compiles through the
ConstraintCompiler and the xgrammar backend); we only print its grammar and rename the rules.
xgrammar is reached through named functions of `constrain._xgr` (the one module that imports
it).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from infernix_jax.constrain import _xgr
from infernix_jax.constrain.errors import (ChoiceError, ConstraintError, GrammarSyntaxError,
                                           RegexError, UnsupportedSchemaError)


def _check_schema(text: str, lenient: bool = False) -> str:
  """The constraint layer's schema-subset check (canonical text for the matcher library)."""
  from infernix_jax.constrain.schema import check_json_schema

  return check_json_schema(text, lenient=lenient).schema_json


def json_value_ebnf(schema: Mapping[str, Any] | bool, *, lenient: bool = False,
                    closed: bool = True) -> str:
  """EBNF (entry ``root``) of a tool argument value: compact ``, `` / ``: `` separators, no
  free whitespace, declared order.

  Args:
    schema: the value's JSON Schema.
    lenient: drop assertion keywords outside the supported subset (not enforced) instead of
      rejecting the schema.
    closed: strict mode: every object takes only the properties it declares (`schema.close`
      writes ``additionalProperties: false`` where the schema says nothing); False keeps
      JSON Schema's default (objects open).
  """
  from infernix_jax.constrain.schema import close

  text = _check_schema(json.dumps(close(schema) if closed else schema), lenient=lenient)
  return _xgr.ebnf_of_json_schema(text, compact=True)


def content_ebnf(constraint) -> tuple[str, bool]:
  """EBNF (entry ``root``) of an `OutputConstraint` as content, and whether it is JSON.

  The constraint layer's own checkers validate the source first (same errors, same subset).
  """
  from infernix_jax.constrain import _choice, _gbnf, _regex
  from infernix_jax.constrain import schema as _schema
  from infernix_jax.constrain.spec import ConstraintKind

  kind = ConstraintKind(constraint.kind)
  try:
    if kind == ConstraintKind.GRAMMAR:
      return _xgr.ebnf_of_ebnf(_gbnf.check_gbnf(constraint.source)), False
    if kind == ConstraintKind.REGEX:
      return _xgr.ebnf_of_regex(_regex.check_regex(constraint.source)), False
    if kind == ConstraintKind.CHOICE:
      values = _choice.canonical_choices(constraint.source)
      return _xgr.ebnf_of_ebnf(_choice.choice_gbnf(values)), False
    if kind == ConstraintKind.JSON_OBJECT:
      text = _schema.JSON_OBJECT_SCHEMA
    else:
      text = _schema.check_json_schema(constraint.source,
                                       lenient=bool(constraint.lenient)).schema_json
    return _xgr.ebnf_of_json_schema(text, compact=False,
                                    max_whitespace=int(constraint.max_whitespace)), True
  except ConstraintError:
    raise
  except RuntimeError as e:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise {ConstraintKind.GRAMMAR: GrammarSyntaxError, ConstraintKind.REGEX: RegexError,
           ConstraintKind.CHOICE: ChoiceError}.get(kind, UnsupportedSchemaError)(
               f"the content constraint could not be converted: {first}") from None


def raw_pattern_ebnf(pattern: str) -> str:
  """EBNF (entry ``root``) of raw text that contains a match of ``pattern`` (JSON Schema search
  semantics) and no line break.

  Removing "\\n" from every character class of the search expression gives exactly the
  matching strings without a line break, so the value can never hold the raw-value delimiter
  (sound; narrower than the schema by the values with line breaks).

  Raises:
    RegexError: the pattern does not parse or is unsupported (the constraint layer's rules).
  """
  from infernix_jax.constrain import _regex

  alphabet = _regex.complement(((0x0A, 0x0A),))
  node = _regex._branches_node(_regex.parse(pattern), search=True, alphabet=alphabet)
  if node is None:
    raise RegexError("the pattern matches no single-line string, so no raw argument value "
                     "can satisfy it")
  try:
    return _xgr.ebnf_of_regex(_regex._emit(node))
  except RuntimeError as e:
    raise RegexError(f"the pattern could not be converted: {str(e).strip().splitlines()[0]}"
                     ) from None
