"""Tool definitions and the call policy (ToolChoice) of a request, parsed from request facts."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, Iterable, Mapping, Sequence

from infernix_jax.constrain.errors import ConstraintError, FeatureConflictError, SchemaError


class ToolMode(enum.Enum):
  """Which calls a turn may (or must) make."""
  AUTO = "auto"          # content, zero or more calls, or content then calls
  NONE = "none"          # content only: the <tool_call> token is forbidden
  REQUIRED = "required"  # at least one call, starting at the first content token


class ToolPolicy(enum.Enum):
  """How much of the tool language is enforced (reference 000, "Basic" / "Automatic")."""
  BASIC = "basic"          # structure always: names and framing, strict arguments per tool
  AUTOMATIC = "automatic"  # only what the request asks for (strict, names, required, none, parallel)


@dataclasses.dataclass(frozen=True)
class ToolDefinition:
  """One function the model may call.

  Attributes:
    name: the function name as the model writes it after ``<function=``.
    description: free text for the prompt (not part of the grammar).
    parameters: the JSON Schema of the argument object (a dict), as given by the request.
    strict: whether the argument objects are closed (OpenAI's strict mode: every object takes
      only the properties it declares). Whether the arguments follow ``parameters`` at all is
      the call policy's (`arguments_checked`): strict tools always do.
  """
  name: str
  description: str = ""
  parameters: Mapping[str, Any] = dataclasses.field(
      default_factory=lambda: {"type": "object", "properties": {}})
  strict: bool = False

  def __post_init__(self):
    if not isinstance(self.name, str) or not self.name:
      raise ConstraintError("a tool needs a non-empty string name")
    bad = [c for c in self.name if c in "<>\n\r" or c.isspace()]
    if bad:
      raise ConstraintError(f"tool name {self.name!r} holds {bad[0]!r}, which the "
                            "<function=NAME> framing cannot represent", location="/name")
    if not isinstance(self.parameters, Mapping):
      raise SchemaError(f"tool {self.name!r}: parameters must be a JSON object schema",
                        location="/parameters")

  def to_openai(self) -> dict[str, Any]:
    """The OpenAI-style ``{"type": "function", "function": {...}}`` form (chat templates)."""
    fn: dict[str, Any] = {"name": self.name, "description": self.description,
                          "parameters": dict(self.parameters)}
    if self.strict:
      fn["strict"] = True
    return {"type": "function", "function": fn}


@dataclasses.dataclass(frozen=True)
class ToolChoice:
  """The call policy of a turn.

  Attributes:
    mode: auto / none / required.
    allowed_names: restricts which tools may be called (None = all declared tools).
    parallel: whether several calls are allowed in one turn (False = at most one).
    policy: Basic (default: structural constraints for every request with tools) or
      Automatic (enforce only what the request asks for).
  """
  mode: ToolMode = ToolMode.AUTO
  allowed_names: tuple[str, ...] | None = None
  parallel: bool = True
  policy: ToolPolicy = ToolPolicy.BASIC

  @classmethod
  def auto(cls, **kw) -> "ToolChoice":
    return cls(mode=ToolMode.AUTO, **kw)

  @classmethod
  def none(cls, **kw) -> "ToolChoice":
    return cls(mode=ToolMode.NONE, **kw)

  @classmethod
  def required(cls, **kw) -> "ToolChoice":
    return cls(mode=ToolMode.REQUIRED, **kw)

  @classmethod
  def named(cls, name: str, **kw) -> "ToolChoice":
    """OpenAI's named choice: Required with one allowed name and no parallel calls."""
    kw.setdefault("parallel", False)
    return cls(mode=ToolMode.REQUIRED, allowed_names=(name,), **kw)

  @classmethod
  def parse(cls, value: str | Mapping[str, Any] | None, **kw) -> "ToolChoice":
    """Parses a CLI/OpenAI ``tool_choice``: "auto" | "none" | "required" | NAME | {...}.

    Args:
      value: a mode string, a function name, or an OpenAI object
        ``{"type": "function", "function": {"name": NAME}}``; None means auto.
      **kw: ``parallel`` / ``policy`` overrides.
    """
    if value is None:
      return cls.auto(**kw)
    if isinstance(value, Mapping):
      name = (value.get("function") or {}).get("name") or value.get("name")
      if not name:
        raise ConstraintError(f"tool_choice object without a function name: {dict(value)!r}")
      return cls.named(name, **kw)
    if value in ("auto", "none", "required"):
      return cls(mode=ToolMode(value), **kw)
    return cls.named(str(value), **kw)


def parse_tools(spec: str | Sequence[Mapping[str, Any]], *, strict: bool | None = None
                ) -> tuple[ToolDefinition, ...]:
  """Parses OpenAI-style function definitions (a JSON text or a list) into ToolDefinitions.

  Accepts ``{"type": "function", "function": {...}}`` entries and bare ``{"name", ...}``
  function objects (BFCL's form).

  Args:
    spec: JSON text or a list of definitions.
    strict: overrides every tool's ``strict`` flag when not None.

  Raises:
    ConstraintError: malformed definitions or duplicate names (JSON Pointer location).
  """
  if isinstance(spec, (str, bytes)):
    try:
      spec = json.loads(spec)
    except json.JSONDecodeError as e:
      raise SchemaError(f"tools are not valid JSON: {e.msg}", location=f"{e.lineno}:{e.colno}")
  if isinstance(spec, Mapping) and "tools" in spec:
    spec = spec["tools"]
  if not isinstance(spec, list):
    raise SchemaError("tools must be a JSON array of function definitions", location="")
  out = []
  for i, entry in enumerate(spec):
    if not isinstance(entry, Mapping):
      raise SchemaError("a tool definition must be an object", location=f"/{i}")
    fn = entry.get("function", entry) if entry.get("type", "function") == "function" else None
    if fn is None:
      raise SchemaError(f"tool type {entry.get('type')!r} is not supported (function only)",
                        location=f"/{i}/type")
    params = fn.get("parameters", {"type": "object", "properties": {}})
    out.append(ToolDefinition(
        name=fn.get("name", ""), description=fn.get("description", "") or "",
        parameters=params, strict=bool(fn.get("strict", False)) if strict is None else strict))
  check_unique(out)
  return tuple(out)


def check_unique(tools: Iterable[ToolDefinition]) -> None:
  """Raises FeatureConflictError on duplicate tool names (rejected while preparing)."""
  seen: set[str] = set()
  for i, t in enumerate(tools):
    if t.name in seen:
      raise FeatureConflictError(f"duplicate tool name {t.name!r}", location=f"/{i}/name")
    seen.add(t.name)


def resolve_choice(tools: Sequence[ToolDefinition], choice: ToolChoice) -> tuple[ToolDefinition, ...]:
  """The tools a turn may call under ``choice`` (declarations are never edited for the prompt).

  Raises:
    ConstraintError: an allowed name that is not declared, or required with no tool.
  """
  check_unique(tools)
  if choice.allowed_names is None:
    callable_ = tuple(tools)
  else:
    by_name = {t.name: t for t in tools}
    missing = [n for n in choice.allowed_names if n not in by_name]
    if missing:
      raise ConstraintError(f"tool_choice names {missing[0]!r}, which is not a declared tool "
                            f"(declared: {sorted(by_name)})")
    callable_ = tuple(by_name[n] for n in dict.fromkeys(choice.allowed_names))
  if choice.mode is ToolMode.REQUIRED and not callable_:
    raise ConstraintError("tool_choice required needs at least one declared tool")
  return callable_ if choice.mode is not ToolMode.NONE else ()


def arguments_checked(tool: ToolDefinition, choice: ToolChoice) -> bool:
  """Whether a call's arguments must follow ``tool.parameters`` under ``choice``.

  Always for a strict tool; for the others, under every choice but the Automatic policy's
  auto (which enforces only what the request asks for: a required or named call asks for
  arguments its function can take). Every framing asks this one rule.
  """
  return tool.strict or not (choice.policy is ToolPolicy.AUTOMATIC
                             and choice.mode is ToolMode.AUTO)


_BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}
_BFCL_DROP = ("optional", "format")  # BFCL annotations outside JSON Schema / the subset


def _bfcl_schema(node: Any) -> tuple[Any, bool]:
  """One BFCL parameter schema in JSON Schema terms; flag = it used the untyped ``any``."""
  if isinstance(node, list):
    out = [_bfcl_schema(v) for v in node]
    return [o for o, _ in out], any(a for _, a in out)
  if not isinstance(node, Mapping):
    return node, False
  out: dict[str, Any] = {}
  used_any = False
  for k, v in node.items():
    if k in _BFCL_DROP:
      continue
    if k == "type" and isinstance(v, str):
      mapped = _BFCL_TYPES.get(v, v)
      if mapped is None:
        used_any = True
        continue
      out[k] = mapped
    elif k == "properties" and isinstance(v, Mapping):
      props = {}
      for name, sub in v.items():
        props[name], a = _bfcl_schema(sub)
        used_any |= a
      out[k] = props
    elif k in ("items", "additionalProperties", "anyOf", "oneOf", "allOf"):
      out[k], a = _bfcl_schema(v)
      used_any |= a
    else:
      out[k] = v
  return out, used_any


def tools_from_bfcl(functions: Sequence[Mapping[str, Any]], *, strict: bool = True
                    ) -> tuple[ToolDefinition, ...]:
  """BFCL function entries as ToolDefinitions (``dict`` -> object, ``float`` -> number,
  ``tuple`` -> array; the root closed with additionalProperties false for strict tools).

  A function with an untyped ``any`` parameter cannot be strict (its raw/JSON encoding is
  ambiguous) and is declared non-strict.
  """
  out = []
  for fn in functions:
    params, used_any = _bfcl_schema(fn.get("parameters", {}))
    params = dict(params)
    params.setdefault("type", "object")
    params.setdefault("properties", {})
    is_strict = strict and not used_any
    if is_strict:
      params["additionalProperties"] = False
    out.append(ToolDefinition(fn["name"], fn.get("description", ""), params, is_strict))
  check_unique(out)
  return tuple(out)
