"""JSON Schemas as the server takes them: strict (closed) objects, and the backend fallback.

`strict: true` (OpenAI's structured outputs, and vLLM's default through xgrammar's strict
mode) means an object accepts no property beyond those it lists: `close` writes
`additionalProperties: false` into every object schema that says nothing about extra
properties, and `items: false` after a `prefixItems` tuple that says nothing about more
items. `strict: false` keeps JSON Schema's own default (objects open).

Tools follow the same rule: a function with `strict: true` has its parameters closed
(`strict_tools`); the Responses API's tools are strict unless they say `strict: false`, and
one that does not say is normalized as OpenAI does (`close` and `require_all`).

`prepare` turns a parsed request into an engine request with the schema fallback: under the
"auto" backend a schema that xgrammar (through our checker) cannot express exactly is tried
on llguidance, and only then refused, or, with `lenient`, compiled with the unenforceable
keywords dropped (reported in the response's usage).
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


def require_all(schema: Any) -> Any:
  """A copy of `schema` whose object schemas list every declared property in `required`
  (OpenAI's strict normalization of a function's parameters; with `close`, what the Responses
  API does to a tool that does not say `strict`). Any output it accepts, the original accepts.
  """
  if not isinstance(schema, Mapping):
    return schema
  out = dict(schema)
  for key in _ONE:
    if isinstance(out.get(key), Mapping):
      out[key] = require_all(out[key])
  for key in _LIST + ("allOf",):
    if isinstance(out.get(key), list):
      out[key] = [require_all(s) for s in out[key]]
  for key in _MAP:
    if isinstance(out.get(key), Mapping):
      out[key] = {name: require_all(s) for name, s in out[key].items()}
  props = out.get("properties")
  if isinstance(props, Mapping) and props:
    given = [r for r in out.get("required") or () if isinstance(r, str)]
    out["required"] = given + [name for name in props if name not in given]
  return out


def strict_tools(tools: list) -> list:
  """The request's function tools, each `strict: true` one with its parameters closed
  (`close`, as a strict `response_format` schema is). Tools without `strict` stay open (Chat
  Completions' default); malformed entries are left for the tool parser to report.
  """
  out = []
  for tool in tools:
    fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
    if (isinstance(fn, Mapping) and fn.get("strict") is True
        and isinstance(fn.get("parameters"), Mapping)):
      fn = dict(fn, parameters=close(fn["parameters"]))
      tool = dict(tool, function=fn) if "function" in tool else fn
    out.append(tool)
  return out


def client_message(message: str, lenient_field: str) -> str:
  """A compiler message with the library's option names replaced by the body field a client
  sets (`lenient_field`)."""
  return (message.replace("compile with lenient=True", f"set {lenient_field}: true")
          .replace("lenient=True", f"{lenient_field}: true"))


def prepare(llm, parsed, **extra):
  """`llm.prepare` of a parsed request, with the schema fallback of the "auto" backend.

  Order: the request as given (xgrammar through our checker under "auto"); then, for a JSON
  Schema under "auto", llguidance; then, if the request asked for `lenient`, the schema with
  its unenforceable keywords dropped. A refusal names only body fields.

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

  if schema is None or llm.backend != "auto":
    if lenient and schema is None:
      raise RequestError(lenient_field, "applies to JSON Schema constraints only")
    if not lenient:
      return attempt(), ()
    prepared = attempt(lenient=True)
    compiled = llm.compiler.compile(ic.OutputConstraint.json_schema(json.dumps(schema),
                                                                    lenient=True),
                                    backend=llm.backend)
    return prepared, tuple(compiled.dropped)
  try:
    return attempt(), ()
  except RequestError as first:
    if first.param != parsed.field("json_schema"):
      raise
    text = json.dumps(schema)
    if _has_backend("llguidance"):
      try:
        return attempt(json_schema=None,
                       constraint=ic.OutputConstraint.json_schema(text).with_backend(
                           "llguidance")), ()
      except RequestError:
        pass
    if not lenient:
      hint = "" if lenient_field in first.message else (
          f"; or set {lenient_field}: true to drop the keywords no backend enforces")
      raise RequestError(first.param, f"{first.message} (neither xgrammar nor llguidance "
                         f"enforces it exactly{hint})") from None
    prepared = attempt(lenient=True)
    compiled = llm.compiler.compile(ic.OutputConstraint.json_schema(text, lenient=True))
    return prepared, tuple(compiled.dropped)


def _has_backend(name: str) -> bool:
  from infernix_jax.constrain import backends
  try:
    backends.get(name)
  except (ValueError, ImportError):
    return False
  return True
