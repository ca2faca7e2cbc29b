"""Output constraints from keyword options: the one place their exclusivity is checked.

The Python API takes these keywords, the CLI maps its flags onto them (files read first),
and the server maps `response_format` / `structured_outputs` onto them.
"""

from __future__ import annotations

import json
from typing import Mapping

from infernix_jax.errors import ParameterError

__all__ = ["CONSTRAINT_OPTIONS", "check_exclusive", "constraint_from_options", "option_of"]

CONSTRAINT_OPTIONS = ("json_schema", "json_object", "regex", "choice", "grammar", "constraint")


def check_exclusive(*, lenient: bool = False, **given: bool) -> None:
  """The exclusivity rules alone, over which options are given (a surface that reads files
  for some options checks this before reading them).

  Raises:
    ParameterError: two constraint options (param: the second), or lenient without
      json_schema.
  """
  names = [name for name in CONSTRAINT_OPTIONS if given.get(name)]
  if len(names) > 1:
    raise ParameterError(names[1], f"the constraint options are mutually exclusive: got "
                         f"{' and '.join(names)}; give one")
  if lenient and not given.get("json_schema"):
    raise ParameterError("lenient", "applies to json_schema only")


def constraint_from_options(*, json_schema=None, json_object=False, regex=None, choice=None,
                            grammar=None, lenient=False, constraint=None):
  """The OutputConstraint of the mutually exclusive constraint options (or None).

  Args:
    json_schema: a JSON Schema (dict, bool or JSON text); json_object: any JSON object;
    regex: a regex over the whole output; choice: a list of strings; grammar: GBNF text;
    constraint: an `OutputConstraint` as is; lenient: json_schema only.

  Raises:
    ParameterError: the option at fault (`param` is the keyword's name; two given: the
      second); a constraint's own errors come later, from compiling it.
  """
  from infernix_jax import constrain as ic
  check_exclusive(json_schema=json_schema is not None, json_object=bool(json_object),
                  regex=regex is not None, choice=choice is not None,
                  grammar=grammar is not None, constraint=constraint is not None,
                  lenient=bool(lenient))
  if constraint is not None:
    if not isinstance(constraint, ic.OutputConstraint):
      raise ParameterError("constraint", f"expected an OutputConstraint, got "
                         f"{type(constraint).__name__}")
    return constraint
  if json_schema is not None:
    if isinstance(json_schema, (Mapping, bool)):
      json_schema = json.dumps(json_schema)
    if not isinstance(json_schema, str):
      raise ParameterError("json_schema", f"expected a schema (dict or JSON text), got "
                         f"{type(json_schema).__name__}")
    return ic.OutputConstraint.json_schema(json_schema, lenient=bool(lenient))
  if json_object:
    return ic.OutputConstraint.json_object()
  if regex is not None:
    if not isinstance(regex, str):
      raise ParameterError("regex", f"expected a string, got {type(regex).__name__}")
    return ic.OutputConstraint.regex(regex)
  if choice is not None:
    if isinstance(choice, (str, bytes)) or not all(isinstance(c, str) for c in choice):
      raise ParameterError("choice", "expected a list of strings")
    if not choice:
      raise ParameterError("choice", "the list is empty")
    return ic.OutputConstraint.choice(list(choice))
  if grammar is not None:
    if not isinstance(grammar, str):
      raise ParameterError("grammar", f"expected GBNF text, got {type(grammar).__name__}")
    return ic.OutputConstraint.grammar(grammar)
  return None


def _constraint_param(constraint) -> str:
  """The `prepare` parameter a constraint came from (its kind's name)."""
  kind = str(getattr(constraint.kind, "value", constraint.kind))
  return kind if kind in ("json_object", "json_schema", "regex", "choice", "grammar") else (
      "constraint")


def option_of(constraint) -> str:
  """The keyword option an OutputConstraint is given by (its kind's name), for errors found
  when it compiles."""
  kind = str(getattr(constraint.kind, "value", constraint.kind))
  return kind if kind in CONSTRAINT_OPTIONS else "constraint"
