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
    encoding: raw string or JSON value (checked), or the decoding hint (a free value).
    required: the call must contain it.
    rules: EBNF rules of the value; entry rule ``rule`` matches the value followed by the
      value delimiter.
    rule: entry rule name.
    checked: the rules enforce the parameter's schema (False: any value, for a non-strict
      parameter whose schema the framing cannot represent).
  """
  name: str
  encoding: Encoding
  required: bool = False
  rules: str = ""
  rule: str = ""
  checked: bool = True


@dataclasses.dataclass(frozen=True)
class ToolContract:
  """The argument contract of one tool.

  Strict: the declared parameters in declared order, closed names, checked values. A checked
  non-strict tool: the declared parameters in any order, each once, their values checked
  where the framing can represent their schema, the ``required`` ones present (the name
  companion enforces order-free presence and uniqueness), undeclared names allowed unless
  ``closed``. Unchecked: open names, free values.

  Attributes:
    name: the tool name.
    strict: the strict route.
    params: the declared parameters the grammar spells (strict or checked).
    declared: decoding hint per declared name.
    checked: the arguments follow the tool's parameters (True for strict tools).
    closed: undeclared parameter names are refused (strict, or additionalProperties false).
    required: names every call must contain (checked non-strict tools).
  """
  name: str
  strict: bool
  params: tuple[ParamContract, ...]
  declared: Mapping[str, Encoding]
  checked: bool = False
  closed: bool = False
  required: tuple[str, ...] = ()

  def encoding_of(self, name: str) -> Encoding | None:
    """The value encoding of parameter ``name``; None for an undeclared non-strict name."""
    return self.declared.get(name)

  def value_checked(self, name: str) -> bool:
    """Whether the grammar enforces the value of parameter ``name`` (its text then is the
    argument as written: a JSON value is published verbatim)."""
    return any(p.name == name and p.checked for p in self.params)


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


_ROOT_COMPOSED = ("anyOf", "oneOf", "const", "enum", "$ref", "allOf", "patternProperties",
                  "if", "dependentSchemas", "dependentRequired", "propertyNames",
                  "unevaluatedProperties", "minProperties", "maxProperties")


def _root_properties(tool: ToolDefinition, schema: Mapping[str, Any]
                     ) -> tuple[Mapping[str, Any], list[str]]:
  """The root of the arguments: a plain object's declared properties and required names.

  Raises:
    UnsupportedSchemaError / SchemaError: the root is not a plain object the framing can
      write, or a required name is not declared while the object is closed.
  """
  where = f"tool {tool.name!r} parameters"
  if schema.get("type", "object") != "object":
    raise UnsupportedSchemaError(f"{where}: an argument root must be type object",
                                 location="/type")
  for key in _ROOT_COMPOSED:
    if key in schema:
      raise UnsupportedSchemaError(f"{where}: {key} at the argument root is not supported "
                                   "(the root must be a plain object)", location=f"/{key}")
  props = schema.get("properties", {})
  if not isinstance(props, Mapping):
    raise SchemaError(f"{where}: properties must be an object", location="/properties")
  required = schema.get("required", [])
  if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
    raise SchemaError(f"{where}: required must be a list of names", location="/required")
  closed = schema.get("additionalProperties", True) is False
  for r in required:
    if r not in props and closed:
      raise UnsupportedSchemaError(f"{where}: required name {r!r} is not declared in "
                                   "properties", location="/required")
    if not _writable(r):
      raise UnsupportedSchemaError(f"{where}: required name {r!r} cannot be written in "
                                   "<parameter=NAME> framing", location="/required")
  return props, required


def _writable(name: str) -> bool:
  return bool(name) and not any(c in name for c in "<>\n")


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


def build_contract(tool: ToolDefinition, index: int, json_value_ebnf,
                   checked: bool | None = None) -> ToolContract:
  """The argument contract of ``tool`` (strict or checked: with the value grammars).

  A strict tool's parameters are closed first (`schema.close`: every object takes only the
  properties it declares); a checked non-strict tool keeps JSON Schema's open objects and
  its assertion keywords outside the supported subset are dropped (a parameter the framing
  cannot represent at all takes any value; a root that is not a plain object leaves the
  call unchecked).

  Args:
    tool: the definition.
    index: the tool's position (rule-name namespace).
    json_value_ebnf: ``f(schema_dict, lenient=, closed=) -> ebnf`` converting a JSON value
      schema to EBNF text with entry rule ``root`` (compact separators, no free whitespace).
    checked: whether a non-strict tool's arguments follow its parameters (the call policy's
      `tools.arguments_checked`; None: only strict tools).

  Raises:
    UnsupportedSchemaError / SchemaError: the strict schema cannot be represented, or a
      checked call can never be written (a required name outside a closed object).
  """
  props = tool.parameters.get("properties", {})
  declared = {n: decoding_hint(s) for n, s in props.items()} if isinstance(props, Mapping) else {}
  if not tool.strict and not checked:
    return ToolContract(tool.name, False, (), declared)
  if tool.strict:
    from infernix_jax.constrain.schema import close
    schema = close(tool.parameters)
    if schema.get("additionalProperties", True) is not False:
      raise UnsupportedSchemaError(
          f"tool {tool.name!r} parameters: strict arguments need additionalProperties: false "
          "(the argument names must be closed)", location="/additionalProperties")
  else:
    schema = tool.parameters
    if schema.get("type", "object") != "object" or any(k in schema for k in _ROOT_COMPOSED):
      return ToolContract(tool.name, False, (), declared)
  props, required = _root_properties(tool, schema)
  defs = {k: schema[k] for k in ("$defs", "definitions") if k in schema}
  params = []
  for j, (name, sub) in enumerate(props.items()):
    pointer = f"/properties/{name}"
    if not _writable(name):
      if tool.strict:
        raise UnsupportedSchemaError(f"tool {tool.name!r} parameters: parameter name {name!r} "
                                     "cannot be written in <parameter=NAME> framing",
                                     location=pointer)
      continue  # an optional name no call can write
    rule = f"t{index}_p{j}"
    try:
      params.append(_param(tool, name, sub, rule, pointer, defs, json_value_ebnf,
                           name in required))
    except ConstraintError:
      if tool.strict:
        raise
      params.append(ParamContract(name, decoding_hint(sub), name in required,
                                  _ebnf.until_delimiter_rules(rule, VALUE_DELIMITER), rule,
                                  checked=False))
  if tool.strict:
    return ToolContract(tool.name, True, tuple(params), {p.name: p.encoding for p in params},
                        checked=True, closed=True, required=tuple(required))
  return ToolContract(tool.name, False, tuple(params), {**declared, **{
      p.name: p.encoding for p in params}}, checked=True,
      closed=schema.get("additionalProperties", True) is False, required=tuple(required))


def _param(tool: ToolDefinition, name: str, schema: Any, rule: str, pointer: str,
           defs: Mapping[str, Any], json_value_ebnf, required: bool) -> ParamContract:
  """One checked parameter (raw string or JSON value rules); non-strict tools drop the
  keywords the framing does not enforce.

  Raises:
    ConstraintError: the framing cannot represent the parameter's schema.
  """
  strict = tool.strict
  if schema is True:
    schema = {}
  if not isinstance(schema, Mapping):
    raise UnsupportedSchemaError(f"tool {tool.name!r}: parameter {name!r} must be a schema "
                                 "object", location=pointer)
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
    if not strict:
      schema = {k: v for k, v in schema.items() if k not in _RAW_UNSUPPORTED}
    return ParamContract(name, Encoding.RAW, required, _raw_string_rules(rule, schema, pointer),
                         rule)
  value_schema = {**schema, **defs} if defs else dict(schema)
  try:
    ebnf = json_value_ebnf(value_schema, lenient=not strict, closed=strict)
  except ConstraintError as e:  # the subset checker's error: relocate under the tool
    raise type(e)(f"tool {tool.name!r}: parameter {name!r}: {e.message}",
                  location=pointer + (e.location or "")) from None
  except Exception as e:  # the library's conversion error: say where
    raise UnsupportedSchemaError(f"tool {tool.name!r}: parameter {name!r}: {e}",
                                 location=pointer) from None
  body = _ebnf.rename_rules(ebnf, f"{rule}_")
  rules = f"{body}\n{rule} ::= {rule}_root {_ebnf.lit(VALUE_DELIMITER)}"
  return ParamContract(name, Encoding.JSON, required, rules, rule)


def canonical_json(value: Any) -> str:
  """The JSON text the decoder publishes for a parsed value (template separators)."""
  return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
