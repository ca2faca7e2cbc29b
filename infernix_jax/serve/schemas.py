"""JSON Schemas as the server takes them: strict (closed) objects, and the lenient fallback.

`strict: true` (OpenAI's structured outputs, and vLLM's default through xgrammar's strict
mode) means an object accepts no property beyond those it lists: `close` writes
`additionalProperties: false` into every object schema that says nothing about extra
properties, and `items: false` after a `prefixItems` tuple that says nothing about more
items. `strict: false` keeps JSON Schema's own default (objects open).

`prepare` turns a parsed request into an engine request: under the "auto" backend the
compiler tries every backend, fastest first, and a schema none enforces exactly is refused,
or, with `lenient`, compiled with the unenforceable keywords dropped (reported in the
response's usage).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from infernix_jax.api import RequestError

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
  out = dict(schema)
  for key in _ONE:
    if isinstance(out.get(key), Mapping):
      out[key] = close(out[key])
  for key in _LIST:
    if isinstance(out.get(key), list):
      out[key] = [close(s) for s in out[key]]
  if isinstance(out.get("allOf"), list):
    out["allOf"] = [close(s, _member=True) for s in out["allOf"]]
  for key in _MAP:
    if isinstance(out.get(key), Mapping):
      out[key] = {name: close(s) for name, s in out[key].items()}
  if (_is_object(out) and not _member and "additionalProperties" not in out
      and "unevaluatedProperties" not in out and not any(k in out for k in _COMPOSED)):
    out["additionalProperties"] = False
  if "prefixItems" in out and "items" not in out and "unevaluatedItems" not in out:
    out["items"] = False
  return out


def client_message(message: str, lenient_field: str) -> str:
  """A compiler message with the library's option names replaced by the body field a client
  sets (`lenient_field`)."""
  return (message.replace("compile with lenient=True", f"set {lenient_field}: true")
          .replace("lenient=True", f"{lenient_field}: true"))


def prepare(llm, parsed, **extra):
  """`llm.prepare` of a parsed request, with the lenient fallback for JSON Schemas.

  Under the "auto" backend the compiler already tries every backend, fastest first, and
  takes the first that enforces the schema exactly (`constrain.backends.candidates`); only
  when none does and the request asked for `lenient` is the schema compiled with its
  unenforceable keywords dropped. Under an explicit backend, `lenient` compiles leniently at
  once. A refusal names only body fields.

  Returns:
    (prepared, dropped): the `api.PreparedRequest` and the `(json_pointer, keyword)` pairs a
    lenient compile dropped (empty when the schema is enforced whole).

  Raises:
    RequestError: the request is invalid; `param` is already the body field.
  """
  from infernix_jax import constrain as ic
  options = dict(parsed.options)
  lenient = bool(options.pop("lenient", False))
  lenient_field = parsed.field("lenient")
  schema = options.get("json_schema")

  def attempt(**override):
    opts = dict(options, **override)
    try:
      return llm.prepare(parsed.prompt, max_drafts=parsed.max_drafts, **opts, **extra)
    except RequestError as e:
      raise RequestError(parsed.field(e.param), client_message(e.message, lenient_field)
                         ) from None

  if schema is None:
    if lenient:
      raise RequestError(lenient_field, "applies to JSON Schema constraints only")
    return attempt(), ()
  if not lenient or llm.backend == "auto":
    try:
      return attempt(), ()
    except RequestError as first:
      schema_field = first.param == parsed.field("json_schema")
      if lenient and schema_field:
        pass  # no backend enforces it whole: compile it leniently below
      elif schema_field and "enforces it exactly" in first.message:
        raise RequestError(first.param, f"{first.message}; or set {lenient_field}: true to "
                           "drop the keywords no backend enforces") from None
      else:
        raise
  prepared = attempt(lenient=True)
  compiled = llm.compiler.compile(ic.OutputConstraint.json_schema(json.dumps(schema),
                                                                  lenient=True),
                                  backend=llm.backend)
  return prepared, tuple(compiled.dropped)
