"""The JSON Schema subset check: parse, normalize by keyword family, emit what xgrammar enforces."""

from __future__ import annotations

import dataclasses
import json
import re
from decimal import Decimal
from typing import Any

from infernix_jax.constrain.errors import SchemaError, UnsupportedSchemaError
from infernix_jax.constrain.schema import values as sv
from infernix_jax.constrain.schema.arrays import ArrayKeywords
from infernix_jax.constrain.schema.combinators import Merger, finish_leaf, union
from infernix_jax.constrain.schema.enums import EnumKeywords
from infernix_jax.constrain.schema.numbers import NumberKeywords
from infernix_jax.constrain.schema.objects import ObjectKeywords
from infernix_jax.constrain.schema.refs import RefKeywords, esc, reachable
from infernix_jax.constrain.schema.strings import StringKeywords, python_pattern

JSON_OBJECT_SCHEMA = '{"type":"object","additionalProperties":true}'

# Assertion keywords (any draft) outside the supported subset: rejected, or dropped if lenient.
_UNSUPPORTED = frozenset((
    "not", "if", "then", "else", "uniqueItems", "contains", "minContains", "maxContains",
    "multipleOf", "propertyNames", "minProperties", "maxProperties", "unevaluatedItems",
    "unevaluatedProperties", "format", "contentSchema", "$dynamicRef", "$dynamicAnchor",
    "$recursiveRef", "$recursiveAnchor", "$anchor", "discriminator"))
_HINTS = {
    "if": "express the cases with anyOf", "then": "express the cases with anyOf",
    "else": "express the cases with anyOf", "format": "use a pattern instead",
    "patternProperties": "declare the properties or use additionalProperties",
    "multipleOf": "use an integer range or enum", "not": "state the allowed values positively",
    "uniqueItems": "drop it or use an enum of arrays",
}
_BY_TYPE = {
    "object": ("properties", "required", "additionalProperties", "patternProperties"),  # and
    # dependent*/dependencies, which build typeless schemas of their own
    "array": ("items", "prefixItems", "additionalItems", "minItems", "maxItems"),
    "string": ("minLength", "maxLength", "pattern"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"),
}
_BY_TYPE["integer"] = _BY_TYPE["number"]
_TYPED_KEYWORDS = frozenset(k for ks in _BY_TYPE.values() for k in ks)
_KNOWN_DIALECT = re.compile(
    r"^https?://json-schema\.org/(draft/20(20-12|19-09)|draft-0[3-7])/(schema)?#?$")
_ALL_TYPES = ("null", "boolean", "object", "array", "string", "number")


@dataclasses.dataclass(frozen=True)
class SchemaCheck:
  """Result of :func:`check_json_schema`.

  Attributes:
    schema_json: the canonical schema text to hand to xgrammar's ``compile_json_schema``
      (order-preserving, annotations stripped, lenient-dropped keywords removed, rewritten
      into forms xgrammar enforces exactly). Deterministic: equal inputs give equal text.
    dropped: ``(json_pointer, keyword)`` for each keyword dropped under ``lenient=True``.
  """
  schema_json: str
  dropped: tuple[tuple[str, str], ...] = ()


def _pairs(pairs):
  out = {}
  for k, v in pairs:
    if k in out:
      raise SchemaError(f"duplicate key {k!r} in a JSON object; each key may appear once")
    out[k] = v
  return out


def _bad_constant(name):
  raise SchemaError(f"{name} is not valid JSON; use a finite number")


def parse_schema_text(text: str) -> Any:
  """Parses schema JSON with exact numbers (Decimal), rejecting duplicates and NaN."""
  if not isinstance(text, str):
    raise SchemaError(f"a JSON Schema must be given as text, got {type(text).__name__}")
  try:
    return json.loads(text, object_pairs_hook=_pairs, parse_float=Decimal,
                      parse_constant=_bad_constant)
  except json.JSONDecodeError as e:
    raise SchemaError(f"the schema is not valid JSON: {e.msg} (line {e.lineno} column "
                      f"{e.colno})") from None
  except RecursionError:
    raise SchemaError("the schema nests too deeply to parse") from None


class _Normalizer(RefKeywords, EnumKeywords, NumberKeywords, StringKeywords, ArrayKeywords,
                  ObjectKeywords, Merger):
  """Walks a parsed schema into the normal form, collecting referenced definitions."""

  def __init__(self, doc: Any, lenient: bool):
    self.doc = doc
    self.lenient = lenient
    self.dropped: list[tuple[str, str]] = []
    schema_uri = doc.get("$schema", "") if isinstance(doc, dict) else ""
    self.draft7 = isinstance(schema_uri, str) and re.search(r"draft-0[3-7]", schema_uri) is not None
    if schema_uri and (not isinstance(schema_uri, str) or not _KNOWN_DIALECT.search(schema_uri)):
      # A custom meta-schema may switch vocabularies on or off; we never fetch it.
      raise UnsupportedSchemaError(
          f"unknown $schema dialect {schema_uri!r}; use draft 2020-12 (or draft-07/06/04/"
          "2019-09) or leave $schema out", "/$schema")
    self.defs: dict[str, str] = {}       # target pointer -> def name
    self.bodies: dict[str, Any] = {}     # def name -> NF (absent while being normalized)
    self.validator = sv.Validator(self.resolve, python_pattern)
    self.merges = 0

  # Errors -------------------------------------------------------------------------------------
  def fail(self, message: str, ptr: str, keyword: str) -> None:
    """Rejects ``keyword`` at ``ptr`` (or records and returns if lenient)."""
    if self.lenient:
      self.dropped.append((ptr, keyword))
      return
    raise UnsupportedSchemaError(message, ptr)

  def invalid(self, message: str, ptr: str):
    raise SchemaError(message, ptr)

  # Schemas ----------------------------------------------------------------------------------
  def node(self, s: Any, ptr: str) -> dict | None:
    """NF of the schema ``s`` at JSON Pointer ``ptr`` (None = matches nothing)."""
    if s is True:
      return {}
    if s is False:
      return None
    if not isinstance(s, dict):
      self.invalid("a schema must be a JSON object or a boolean", ptr)
    for k in s:
      at = f"{ptr}/{esc(k)}"
      if k == "$id" and ptr:
        self.fail("$id inside a schema (a nested resource) is not supported; move the "
                  "subschema under $defs and reference it with '#/$defs/...'", at, k)
      elif k in _UNSUPPORTED:
        hint = _HINTS.get(k, "remove it, or compile with lenient=True to drop it")
        self.fail(f"keyword {k!r} is not supported; {hint}", at, k)
      elif k == "additionalItems" and not self.draft7:
        continue  # not a 2020-12 keyword: an annotation there
      elif k == "items" and isinstance(s[k], list) and not self.draft7:
        self.invalid("in draft 2020-12 'items' must be a schema; use prefixItems for "
                     "positional items", at)
    parts: list[dict | None] = []
    if "$ref" in s:
      if self.draft7 and any(k in s for k in _TYPED_KEYWORDS | {"type", "enum", "const",
                                                                 "anyOf", "oneOf", "allOf"}):
        self.fail("in draft-07 keywords next to $ref are ignored by the standard; wrap them "
                  "with the reference in allOf", f"{ptr}/$ref", "$ref")
        # lenient: draft-07 semantics ignore the siblings
        return self.ref(s["$ref"], f"{ptr}/$ref")
      parts.append(self.ref(s["$ref"], f"{ptr}/$ref"))
    typed = self.typed(s, ptr)
    if typed is not None or "type" in s:
      parts.append(typed)
    if "anyOf" in s:
      parts.append(union(self.branches(s, "anyOf", ptr)))
    if "allOf" in s:
      for b in self.branches(s, "allOf", ptr):
        parts.append(b)
    parts.extend(self.dependencies(s, ptr))
    out: dict | None = {}
    for p in parts:
      out = self.merge(out, p, ptr)
    if "oneOf" in s:
      out = self.one_of(s, out, ptr)
    for key in ("const", "enum"):
      if key in s:
        out = self.values(s, key, f"{ptr}/{key}", out)
    return out

  def typed(self, s: dict, ptr: str) -> dict | None:
    """NF of ``type`` plus the type-specific assertions; None only if none of it is present."""
    if "type" in s:
      t = s["type"]
      types = [t] if isinstance(t, str) else t
      if (not isinstance(types, list) or not types or len(set(map(str, types))) != len(types)
          or not all(isinstance(x, str) and x in sv.TYPES for x in types)):
        self.invalid(f"type must be one of {', '.join(sv.TYPES)} or a non-empty array of "
                     "distinct names", f"{ptr}/type")
    elif any(k in s for k in _TYPED_KEYWORDS):
      types = list(_ALL_TYPES)  # assertions apply only to their own type; others pass freely
    else:
      return None
    leaves = [self.leaf(t, s, ptr) for t in types]
    return union(leaves)

  def leaf(self, t: str, s: dict, ptr: str) -> dict | None:
    out: dict[str, Any] = {"type": t}
    if t in ("number", "integer"):
      self.number_leaf(s, ptr, out)
    elif t == "string":
      self.string_leaf(s, ptr, out)
    elif t == "array":
      return self.array(s, ptr)
    elif t == "object":
      return self.obj(s, ptr)
    return finish_leaf(out)

  def count(self, s: dict, k: str, ptr: str) -> int:
    v = s[k]
    if isinstance(v, Decimal) and v == v.to_integral_value():
      v = int(v)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
      self.invalid(f"{k} must be a non-negative integer", f"{ptr}/{k}")
    return v

  # Output -----------------------------------------------------------------------------------
  def emit(self, nf: Any) -> Any:
    """Converts an NF into the JSON value xgrammar gets (patterns rewritten, keys cleaned)."""
    if nf is None:
      return False
    if isinstance(nf, list):
      return [self.emit(x) for x in nf]
    if not isinstance(nf, dict) or "enum" in nf:
      return nf
    if nf.get("type") == "string":
      return self.emit_string(nf)
    out = {}
    if nf.get("type") == "object":
      nf, out = self.emit_object(nf)
    for k, v in nf.items():
      if k.startswith("_"):
        continue
      if k == "patternProperties":
        out[k] = {pk: self.emit(pv) for pk, pv in v.items()}
        continue
      if k in ("properties",):
        out[k] = {pk: self.emit(pv) for pk, pv in v.items()}
      elif k in ("prefixItems", "anyOf", "items", "additionalProperties"):
        out[k] = self.emit(v) if v is not False else False
      else:
        out[k] = v
    return out


def dumps(value: Any) -> str:
  """Compact, order-preserving JSON text; Decimals keep their exact source spelling."""
  if isinstance(value, dict):
    return "{" + ",".join(f"{json.dumps(k)}:{dumps(v)}" for k, v in value.items()) + "}"
  if isinstance(value, list):
    return "[" + ",".join(dumps(v) for v in value) + "]"
  if isinstance(value, Decimal):
    return str(value)
  return json.dumps(value)


def check_json_schema(text: str, *, lenient: bool = False) -> SchemaCheck:
  """Validates a JSON Schema against the supported subset and returns the text xgrammar gets.

  xgrammar 0.2.8's ``compile_json_schema`` silently ignores or weakens several keywords
  (``allOf``, siblings of ``anyOf``/``$ref``, ``minLength`` next to ``pattern``, ``required``
  names missing from ``properties``, typeless assertions, ``type`` next to ``enum``; pattern
  and length strings admit raw control characters; a pattern is a whole-string match). We
  therefore normalize the schema ourselves (see ``values`` for the normal form), reject what
  cannot be expressed exactly (with the keyword's JSON Pointer), and hand xgrammar a schema
  that only uses forms it enforces exactly. Annotations are stripped; property order is kept.

  Args:
    text: the schema source (JSON text).
    lenient: drop unsupported assertion keywords instead of rejecting them; each is recorded
      in ``dropped`` and the output never claims to satisfy it.

  Returns:
    A :class:`SchemaCheck`.

  Raises:
    SchemaError: invalid JSON, an invalid schema, or a schema no value satisfies.
    UnsupportedSchemaError: a keyword outside the supported subset; ``location`` is its JSON
      Pointer and the message says what to do instead.
    RegexError: an invalid ``pattern`` (location = its JSON Pointer).
  """
  doc = parse_schema_text(text)
  n = _Normalizer(doc, lenient)
  try:
    root = n.node(doc, "")
    if root is None:
      raise SchemaError("no JSON value satisfies this schema (it is unsatisfiable)", "")
    out = n.emit(root)
    defs = {name: n.emit(body) for name, body in n.bodies.items()}
  except RecursionError:
    raise UnsupportedSchemaError("the schema nests too deeply", None) from None
  if out is False:
    raise SchemaError("no JSON value satisfies this schema (it is unsatisfiable)", "")
  defs = reachable(out, defs)
  if defs:
    out = dict(out)
    out["$defs"] = defs
  return SchemaCheck(dumps(out), tuple(n.dropped))
