"""Closed objects: what `strict` means for a JSON Schema (OpenAI's structured outputs).

An object accepts no property beyond those it lists, and a `prefixItems` tuple no item
beyond those it lists; a schema that says nothing about extra properties / items gets the
closing keyword written in. `strict: false` keeps JSON Schema's own default (objects open).
Used for strict tool arguments here and for a strict `response_format` by the server.
"""

from __future__ import annotations

from typing import Any, Mapping

# Keywords whose value is one subschema / a list of them / a name -> subschema map.
_ONE = ("additionalProperties", "items", "contains", "not", "if", "then", "else",
        "propertyNames", "unevaluatedItems", "unevaluatedProperties", "additionalItems")
_LIST = ("anyOf", "oneOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
# An object schema with one of these beside `properties` takes properties from elsewhere
# (additionalProperties would not see them): it is left as written.
_COMPOSED = ("allOf", "$ref", "$dynamicRef", "if", "dependentSchemas", "dependencies")


def _is_object(schema: Mapping) -> bool:
  kind = schema.get("type")
  return (kind == "object" or (isinstance(kind, list) and "object" in kind)
          or "properties" in schema or "patternProperties" in schema)


def _with_subschemas(schema: Mapping, fn, all_of_fn) -> dict:
  """A copy of `schema` with `fn` applied to each direct subschema (`all_of_fn` to `allOf`
  members)."""
  out = dict(schema)
  for key in _ONE:
    if isinstance(out.get(key), Mapping):
      out[key] = fn(out[key])
  for key in _LIST:
    if isinstance(out.get(key), list):
      out[key] = [fn(s) for s in out[key]]
  if isinstance(out.get("allOf"), list):
    out["allOf"] = [all_of_fn(s) for s in out["allOf"]]
  for key in _MAP:
    if isinstance(out.get(key), Mapping):
      out[key] = {name: fn(s) for name, s in out[key].items()}
  return out


def close(schema: Any, *, _member: bool = False) -> Any:
  """A copy of `schema` whose objects (and tuples) take nothing they do not declare.

  An object schema with neither `additionalProperties` nor `unevaluatedProperties` gets
  `additionalProperties: false`, unless its properties may come from elsewhere (`allOf`,
  `$ref`, `if`, `dependentSchemas` beside it, or it is itself an `allOf` member: closing
  those would reject what the other part allows). A `prefixItems` tuple without `items` or
  `unevaluatedItems` gets `items: false`. Booleans and non-schemas come back unchanged.
  """
  if not isinstance(schema, Mapping):
    return schema
  out = _with_subschemas(schema, close, lambda s: close(s, _member=True))
  if (_is_object(out) and not _member and "additionalProperties" not in out
      and "unevaluatedProperties" not in out and not any(k in out for k in _COMPOSED)):
    out["additionalProperties"] = False
  if "prefixItems" in out and "items" not in out and "unevaluatedItems" not in out:
    out["items"] = False
  return out


def require_all(schema: Any) -> Any:
  """A copy of `schema` whose object schemas list every declared property in `required`
  (OpenAI's strict normalization of a function's parameters; with `close`, what the Responses
  API does to a tool that does not say `strict`). Any output it accepts, the original accepts.
  """
  if not isinstance(schema, Mapping):
    return schema
  out = _with_subschemas(schema, require_all, require_all)
  props = out.get("properties")
  if isinstance(props, Mapping) and props:
    given = [r for r in out.get("required") or () if isinstance(r, str)]
    out["required"] = given + [name for name in props if name not in given]
  return out
