"""Argument contracts of Qwen XML tool calls: one per tool, shared by grammar and decoder.

Each parameter's value encoding is fixed before any byte arrives: a raw string between the
framing newlines (``<parameter=P>\\nVALUE\\n</parameter>``) or a JSON value. Strict tools
reduce their schema here (declared order, closed names, value grammars); a value the framing
cannot represent is rejected while preparing, never changed.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, Mapping

from infernix_jax.constrain.errors import ConstraintError, SchemaError, UnsupportedSchemaError
from infernix_jax.constrain.framing import _ebnf
from infernix_jax.constrain.framing.tools import ToolDefinition
from infernix_jax.constrain.schema import json_type, python_pattern

VALUE_DELIMITER = "\n</parameter>"  # a raw string ends at its first occurrence
_JSON_TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")
# Value keywords the strict raw-string route does not enforce (everything else is descriptive
# or handled below); format would need its own automaton beside the delimiter exclusion.
_RAW_UNSUPPORTED = ("format", "contentEncoding", "contentMediaType")


class Encoding(enum.Enum):
  """How a parameter's value is written between its framing newlines."""
  RAW = "raw"    # raw text, decoded to a JSON string; ends at the value delimiter
  JSON = "json"  # JSON value text, published verbatim


@dataclasses.dataclass(frozen=True)
class ParamContract:
  """One parameter of a tool call.

  Attributes:
    name: the parameter name written after ``<parameter=``.
    encoding: raw string or JSON value (strict), or the decoding hint (non-strict).
    required: strict only: the call must contain it.
    rules: EBNF rules of the value (strict only); entry rule ``rule`` matches the value
      followed by the value delimiter.
    rule: entry rule name.
  """
  name: str
  encoding: Encoding
  required: bool = False
  rules: str = ""
  rule: str = ""


@dataclasses.dataclass(frozen=True)
class ToolContract:
  """The argument contract of one tool (strict: fixed, ordered params; else open names)."""
  name: str
  strict: bool
  params: tuple[ParamContract, ...]
  declared: Mapping[str, Encoding]  # decoding hint per declared name (non-strict route)

  def encoding_of(self, name: str) -> Encoding | None:
    """The value encoding of parameter ``name``; None for an undeclared non-strict name."""
    return self.declared.get(name)


def _types_of(schema: Mapping[str, Any]) -> set[str] | None:
  """The JSON types a value schema admits (None = any type)."""
  if "const" in schema:
    return {json_type(schema["const"])}
  if "enum" in schema and isinstance(schema["enum"], list):
    return {json_type(v) for v in schema["enum"]}
  t = schema.get("type")
  if isinstance(t, str):
    return {t}
  if isinstance(t, list):
    return set(t)
  for key in ("anyOf", "oneOf"):
    if isinstance(schema.get(key), list):
      out: set[str] = set()
      for sub in schema[key]:
        ts = _types_of(sub) if isinstance(sub, Mapping) else None
        if ts is None:
          return None
        out |= ts
      return out
  if isinstance(schema.get("allOf"), list):
    for sub in schema["allOf"]:
      ts = _types_of(sub) if isinstance(sub, Mapping) else None
      if ts is not None:
        return ts
  if "$ref" in schema:
    return None
  if "properties" in schema:
    return {"object"}
  if "items" in schema or "prefixItems" in schema:
    return {"array"}
  return None


def decoding_hint(schema: Any) -> Encoding:
  """Non-strict decoding: a declared pure string reads as a string, anything else as JSON."""
  if isinstance(schema, Mapping):
    ts = _types_of(schema)
    if ts == {"string"}:
      return Encoding.RAW
  return Encoding.JSON


def _root_properties(tool: ToolDefinition) -> tuple[Mapping[str, Any], list[str]]:
  """The strict root: an object with declared properties and additionalProperties false."""
  schema = tool.parameters
  where = f"tool {tool.name!r} parameters"
  if schema.get("type", "object") != "object":
    raise UnsupportedSchemaError(f"{where}: a strict argument root must be type object",
                                 location="/type")
  for key in ("anyOf", "oneOf", "const", "enum", "$ref", "allOf", "patternProperties",
              "if", "dependentSchemas", "dependentRequired", "propertyNames",
              "unevaluatedProperties", "minProperties", "maxProperties"):
    if key in schema:
      raise UnsupportedSchemaError(f"{where}: {key} at the strict argument root is not "
                                   "supported (the root must be a plain object)",
                                   location=f"/{key}")
  if schema.get("additionalProperties", True) is not False:
    raise UnsupportedSchemaError(f"{where}: strict arguments need additionalProperties: false "
                                 "(the argument names must be closed)",
                                 location="/additionalProperties")
  props = schema.get("properties", {})
  if not isinstance(props, Mapping):
    raise SchemaError(f"{where}: properties must be an object", location="/properties")
  required = schema.get("required", [])
  if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
    raise SchemaError(f"{where}: required must be a list of names", location="/required")
  for r in required:
    if r not in props:
      raise UnsupportedSchemaError(f"{where}: required name {r!r} is not declared in "
                                   "properties", location="/required")
  for name in props:
    if not name or any(c in name for c in "<>\n"):
      raise UnsupportedSchemaError(f"{where}: parameter name {name!r} cannot be written in "
                                   "<parameter=NAME> framing", location=f"/properties/{name}")
  return props, required


def _raw_string_rules(rule: str, schema: Mapping[str, Any], pointer: str) -> str:
  """Rules for a strict raw string value followed by the value delimiter."""
  for key in _RAW_UNSUPPORTED:
    if key in schema:
      raise UnsupportedSchemaError(
          f"{key} on a raw string argument is not supported yet (it would have to hold "
          "together with the raw value delimiter)", location=f"{pointer}/{key}")
  if "pattern" in schema and not ("const" in schema or "enum" in schema):
    if "minLength" in schema or "maxLength" in schema:
      raise UnsupportedSchemaError("pattern together with minLength/maxLength on a raw string "
                                   "argument is not supported yet",
                                   location=f"{pointer}/pattern")
    from infernix_jax.constrain.framing._convert import raw_pattern_ebnf
    try:
      body = _ebnf.rename_rules(raw_pattern_ebnf(schema["pattern"]), f"{rule}_")
    except ConstraintError as e:
      raise type(e)(e.message, location=f"{pointer}/pattern") from None
    return f"{body}\n{rule} ::= {rule}_root {_ebnf.lit(VALUE_DELIMITER)}"
  values = None
  if "const" in schema:
    values = [schema["const"]]
  elif "enum" in schema:
    values = list(schema["enum"])
  close = _ebnf.lit(VALUE_DELIMITER)
  if values is not None:
    keep = [v for v in values if isinstance(v, str) and VALUE_DELIMITER not in v]
    if "pattern" in schema:
      found = python_pattern(schema["pattern"])
      keep = [v for v in keep if found.search(v)]
    lo, hi = schema.get("minLength", 0), schema.get("maxLength")
    keep = [v for v in keep if len(v) >= lo and (hi is None or len(v) <= hi)]
    if not keep:
      what = "const" if "const" in schema else "enum"
      raise UnsupportedSchemaError(
          f"no {what} value can be represented as a raw argument (each contains the "
          f"delimiter {VALUE_DELIMITER!r} or violates the length bounds)",
          location=f"{pointer}/{what}")
    alts = " | ".join(f"({_ebnf.lit(v)})" for v in dict.fromkeys(keep))
    return f"{rule} ::= ({alts}) {close}"
  lo, hi = schema.get("minLength"), schema.get("maxLength")
  if lo is not None or hi is not None:
    # Length-bounded raw strings are generated without line breaks: no value then holds the
    # delimiter, and the character count is a plain counted repetition (sound, narrower).
    lo = int(lo or 0)
    if hi is not None and int(hi) < lo:
      raise UnsupportedSchemaError("maxLength < minLength", location=f"{pointer}/maxLength")
    rep = f"{{{lo}, {int(hi) if hi is not None else -1}}}"
    return f"{rule} ::= [^\\n]{rep} {close}"
  return _ebnf.until_delimiter_rules(rule, VALUE_DELIMITER)


def build_contract(tool: ToolDefinition, index: int, json_value_ebnf) -> ToolContract:
  """The argument contract of ``tool`` (strict: with the value grammars).

  Args:
    tool: the definition.
    index: the tool's position (rule-name namespace).
    json_value_ebnf: ``f(schema_dict) -> ebnf`` converting a JSON value schema to EBNF text
      with entry rule ``root`` (compact separators, no free whitespace, closed objects).

  Raises:
    UnsupportedSchemaError / SchemaError: the strict schema cannot be represented.
  """
  props = tool.parameters.get("properties", {})
  declared = {n: decoding_hint(s) for n, s in props.items()} if isinstance(props, Mapping) else {}
  if not tool.strict:
    return ToolContract(tool.name, False, (), declared)
  props, required = _root_properties(tool)
  defs = {k: tool.parameters[k] for k in ("$defs", "definitions") if k in tool.parameters}
  params = []
  for j, (name, schema) in enumerate(props.items()):
    pointer = f"/properties/{name}"
    if schema is True:
      schema = {}
    if not isinstance(schema, Mapping):
      raise UnsupportedSchemaError(f"tool {tool.name!r}: parameter {name!r} must be a schema "
                                   "object", location=pointer)
    rule = f"t{index}_p{j}"
    types = _types_of(schema)
    if types is None or ("string" in types and len(types) > 1):
      raise UnsupportedSchemaError(
          f"tool {tool.name!r}: parameter {name!r} admits strings and other types, so the "
          "raw-string / JSON choice of the framing is ambiguous; declare one of them",
          location=pointer)
    bad = types - set(_JSON_TYPES)
    if bad:
      raise UnsupportedSchemaError(f"tool {tool.name!r}: unknown type {sorted(bad)[0]!r}",
                                   location=f"{pointer}/type")
    if types == {"string"}:
      rules = _raw_string_rules(rule, schema, pointer)
      enc = Encoding.RAW
    else:
      value_schema = {**schema, **defs} if defs else dict(schema)
      try:
        ebnf = json_value_ebnf(value_schema)
      except ConstraintError as e:  # the subset checker's error: relocate under the tool
        raise type(e)(f"tool {tool.name!r}: parameter {name!r}: {e.message}",
                      location=pointer + (e.location or "")) from None
      except Exception as e:  # the library's conversion error: say where
        raise UnsupportedSchemaError(f"tool {tool.name!r}: parameter {name!r}: {e}",
                                     location=pointer) from None
      body = _ebnf.rename_rules(ebnf, f"{rule}_")
      rules = f"{body}\n{rule} ::= {rule}_root {_ebnf.lit(VALUE_DELIMITER)}"
      enc = Encoding.JSON
    params.append(ParamContract(name, enc, name in required, rules, rule))
  return ToolContract(tool.name, True, tuple(params),
                      {p.name: p.encoding for p in params})


def canonical_json(value: Any) -> str:
  """The JSON text the decoder publishes for a parsed value (template separators)."""
  return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
