"""JSON values in schemas: equality, type domains, and a validator over normalized schemas."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Callable

from infernix_jax.constrain.errors import UnsupportedSchemaError

# Normalized schemas ("NF", produced by ``check``) are dicts of one of these shapes, or None
# for the unsatisfiable schema:
#
#   {}                                   any JSON value
#   {"type": T, ...}                     a typed leaf holding only T's assertions
#   {"anyOf": [NF, ...]}                 union of two or more NFs
#   {"enum": [scalar, ...]}              finite set of scalar values
#   {"$ref": "#/$defs/<name>"}           reference to a normalized definition
#
# Numbers in schema values are ``int`` or ``decimal.Decimal`` (the source is parsed with
# ``parse_float=Decimal`` so that no literal is silently rounded).

TYPES = ("null", "boolean", "object", "array", "string", "number", "integer")


def is_number(v: Any) -> bool:
  return isinstance(v, (int, Decimal)) and not isinstance(v, bool)


def utf8(s: str, ptr: str) -> None:
  """Rejects a string holding a lone surrogate (not valid Unicode text)."""
  try:
    s.encode("utf-8")
  except UnicodeEncodeError:
    raise UnsupportedSchemaError("string holds a lone surrogate (not valid Unicode text)",
                                 ptr) from None


def json_type(v: Any) -> str:
  """The JSON type name of a parsed value (integral numbers report "integer", as JSON Schema)."""
  if v is None:
    return "null"
  if isinstance(v, bool):
    return "boolean"
  if isinstance(v, int) or (isinstance(v, Decimal) and v == v.to_integral_value()):
    return "integer"
  if isinstance(v, Decimal):
    return "number"
  if isinstance(v, float):  # values parsed without parse_float=Decimal (tool definitions)
    return "integer" if v.is_integer() else "number"
  if isinstance(v, str):
    return "string"
  if isinstance(v, list):
    return "array"
  return "object"


def json_equal(a: Any, b: Any) -> bool:
  """JSON equality: numbers by value, booleans distinct from numbers, containers deep."""
  if isinstance(a, bool) or isinstance(b, bool):
    return isinstance(a, bool) and isinstance(b, bool) and a == b
  if is_number(a) and is_number(b):
    return a == b
  if isinstance(a, dict) and isinstance(b, dict):
    return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
  if isinstance(a, list) and isinstance(b, list):
    return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
  if type(a) is not type(b):
    return False
  return a == b


def type_matches(t: str, v: Any) -> bool:
  vt = json_type(v)
  return vt == t or (t == "number" and vt == "integer")


def lower_bound(leaf: dict) -> tuple[Any, bool] | None:
  """(value, exclusive) lower bound of a numeric leaf, or None."""
  if "exclusiveMinimum" in leaf:
    return leaf["exclusiveMinimum"], True
  if "minimum" in leaf:
    return leaf["minimum"], False
  return None


def upper_bound(leaf: dict) -> tuple[Any, bool] | None:
  if "exclusiveMaximum" in leaf:
    return leaf["exclusiveMaximum"], True
  if "maximum" in leaf:
    return leaf["maximum"], False
  return None


class Validator:
  """Decides whether a schema value (const/enum candidate) satisfies a normalized schema.

  Args:
    resolve: maps a ``$ref`` string of an NF to its normalized body (raises if unavailable).
    pattern_regex: maps a pattern source to a compiled Python regex with ECMAScript semantics
      for whole-value matching (search semantics already folded in).
  """

  def __init__(self, resolve: Callable[[str], Any], pattern_regex: Callable[[str], re.Pattern]):
    self.resolve = resolve
    self.pattern_regex = pattern_regex

  def accepts(self, v: Any, nf: dict | None, depth: int = 0) -> bool:
    if nf is None:
      return False
    if depth > 256:
      raise RecursionError("finite value recursion deeper than 256")
    if not nf:
      return True
    if "$ref" in nf:
      return self.accepts(v, self.resolve(nf["$ref"]), depth + 1)
    if "enum" in nf:
      return any(json_equal(v, e) for e in nf["enum"])
    if "anyOf" in nf:
      return any(self.accepts(v, b, depth + 1) for b in nf["anyOf"])
    t = nf["type"]
    if not type_matches(t, v):
      return False
    if t in ("number", "integer"):
      lo, hi = lower_bound(nf), upper_bound(nf)
      if lo is not None and (v < lo[0] or (lo[1] and v == lo[0])):
        return False
      if hi is not None and (v > hi[0] or (hi[1] and v == hi[0])):
        return False
      return True
    if t == "string":
      n = len(v)
      if n < nf.get("minLength", 0) or ("maxLength" in nf and n > nf["maxLength"]):
        return False
      return "pattern" not in nf or self.pattern_regex(nf["pattern"]).fullmatch(v) is not None
    if t == "array":
      if len(v) < nf.get("minItems", 0) or ("maxItems" in nf and len(v) > nf["maxItems"]):
        return False
      prefix = nf.get("prefixItems", [])
      tail = nf.get("items", {})
      for i, item in enumerate(v):
        sub = prefix[i] if i < len(prefix) else (None if tail is False else tail)
        if not self.accepts(item, sub, depth + 1):
          return False
      return True
    if t == "object":
      props = nf.get("properties", {})
      addl = nf.get("additionalProperties", {})
      if any(k not in v for k in nf.get("required", [])):
        return False
      pp = nf.get("_pp")
      for k, item in v.items():
        if k in props:
          sub = props[k]
        elif pp is not None and self.pattern_regex(pp[0]).fullmatch(k):
          sub = pp[1]
        else:
          sub = None if addl is False else addl
        if not self.accepts(item, sub, depth + 1):
          return False
      return True
    return True  # null, boolean: the type check is everything


def const_schema(v: Any) -> dict:
  """A structural NF whose only value is ``v`` (objects/arrays keep JSON whitespace freedom)."""
  if isinstance(v, dict):
    return {"type": "object", "properties": {k: const_schema(x) for k, x in v.items()},
            "required": list(v), "additionalProperties": False}
  if isinstance(v, list):
    return {"type": "array", "prefixItems": [const_schema(x) for x in v], "items": False,
            "minItems": len(v), "maxItems": len(v)}
  return {"enum": [v]}


def type_domain(nf: dict | None, resolve: Callable[[str], Any], depth: int = 0) -> set[str]:
  """The JSON types an NF can produce ("integer" and "number" both map to "number")."""
  if nf is None:
    return set()
  if depth > 64:
    return {"null", "boolean", "object", "array", "string", "number"}
  if not nf:
    return {"null", "boolean", "object", "array", "string", "number"}
  if "$ref" in nf:
    return type_domain(resolve(nf["$ref"]), resolve, depth + 1)
  if "enum" in nf:
    return {"number" if json_type(v) == "integer" else json_type(v) for v in nf["enum"]}
  if "anyOf" in nf:
    out: set[str] = set()
    for b in nf["anyOf"]:
      out |= type_domain(b, resolve, depth + 1)
    return out
  return {"number" if nf["type"] == "integer" else nf["type"]}
