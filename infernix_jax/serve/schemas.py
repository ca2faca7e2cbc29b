"""JSON Schemas as the server takes them: strict (closed) objects, and the lenient fallback.

`strict: true` (OpenAI's structured outputs, and vLLM's default through xgrammar's strict
mode) means an object accepts no property beyond those it lists: `close` writes
`additionalProperties: false` into every object schema that says nothing about extra
properties, and `items: false` after a `prefixItems` tuple that says nothing about more
items. `strict: false` keeps JSON Schema's own default (objects open).

Tools follow the same rule: a function with `strict: true` has its parameters closed
(`strict_tools`); the Responses API's tools are strict unless they say `strict: false`, and
one that does not say is normalized as OpenAI does (`close` and `require_all`).

`prepare` turns a parsed request into an engine request: under the "auto" backend the
compiler tries every backend, fastest first, and a schema none enforces exactly is refused,
or, with `lenient`, compiled with the unenforceable keywords dropped (reported in the
response's usage).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from infernix_jax.api import RequestError
from infernix_jax.constrain.schema.closing import close, require_all  # noqa: F401  (re-exported)


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
