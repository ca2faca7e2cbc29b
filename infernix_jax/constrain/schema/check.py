"""JSON Schema subset checker: validates a schema and rewrites it into what xgrammar enforces exactly.

xgrammar 0.2.8's ``compile_json_schema`` silently ignores or weakens several keywords
(``allOf``, siblings of ``anyOf``/``$ref``, ``minLength`` next to ``pattern``, ``required``
names missing from ``properties``, typeless assertions, ``type`` next to ``enum``; pattern
and length strings admit raw control characters; a pattern is a whole-string match). We
therefore normalize the schema ourselves (see ``values`` for the normal form), reject
what cannot be expressed exactly (with the keyword's JSON Pointer), and hand xgrammar a schema
that only uses forms it enforces exactly. Annotations are stripped; property order is kept.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from decimal import Decimal
from typing import Any
from urllib.parse import unquote

from infernix_jax.constrain import _regex
from infernix_jax.constrain.errors import RegexError, SchemaError, UnsupportedSchemaError
from infernix_jax.constrain.schema import combinators as sm
from infernix_jax.constrain.schema import strings as _schema_regex
from infernix_jax.constrain.schema import values as sv

JSON_OBJECT_SCHEMA = '{"type":"object","additionalProperties":true}'

_ANNOTATIONS = frozenset((
    "title", "description", "default", "examples", "$comment", "$schema", "deprecated",
    "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "$vocabulary"))
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
MAX_DEPENDENCIES = 6
MAX_KEY_CHARS = 256  # the additional-key pattern nests once per character of each name
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


def _esc(key: str) -> str:
  return key.replace("~", "~0").replace("/", "~1")


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


class _Normalizer(sm.Merger):
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
    self.validator = sv.Validator(self.resolve, _python_pattern)
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

  # References -------------------------------------------------------------------------------
  def resolve(self, ref: str) -> Any:
    name = ref.rsplit("/", 1)[1]
    if name not in self.bodies:
      target = next((p for p, n in self.defs.items() if n == name), "")
      raise UnsupportedSchemaError(
          "an intersection (allOf, $ref siblings, anyOf/oneOf with sibling assertions) needs "
          "the body of this recursive definition while it is being defined; move the "
          "recursion under properties/items or drop the sibling assertions", target)
    return self.bodies[name]

  def ref(self, ref: Any, ptr: str) -> dict | None:
    if not isinstance(ref, str):
      self.invalid("$ref must be a string", ptr)
    if not ref.startswith("#"):
      raise UnsupportedSchemaError(
          f"$ref {ref!r} points outside this document; only local references ('#/...') are "
          "supported (external documents are never fetched)", ptr)
    target_ptr = unquote(ref[1:])
    target: Any = self.doc
    if target_ptr:
      if not target_ptr.startswith("/"):
        raise UnsupportedSchemaError(f"$ref {ref!r} uses an anchor; use a JSON Pointer "
                                     "('#/$defs/name')", ptr)
      for part in target_ptr[1:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(target, dict) and part in target:
          target = target[part]
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
          target = target[int(part)]
        else:
          self.invalid(f"$ref {ref!r} does not resolve inside the document", ptr)
    if target_ptr not in self.defs:
      name = _def_name(target_ptr, set(self.defs.values()))
      self.defs[target_ptr] = name
      body = self.node(target, target_ptr)
      if body is not None and "$ref" in body and body["$ref"].rsplit("/", 1)[1] not in self.bodies:
        raise UnsupportedSchemaError(f"$ref {ref!r} is a reference cycle that never reaches a "
                                     "schema", ptr)
      self.bodies[name] = body
    name = self.defs[target_ptr]
    if name in self.bodies and self.bodies[name] is None:
      return None
    return {"$ref": "#/$defs/" + name}

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
      at = f"{ptr}/{_esc(k)}"
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
      parts.append(sm.union(self.branches(s, "anyOf", ptr)))
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

  def dependencies(self, s: dict, ptr: str) -> list:
    """NFs of dependentRequired / dependentSchemas / draft-07 dependencies.

    "if name is present then D" is exactly anyOf[name absent (a forbidden property), name
    present and D]; non-objects pass both branches. Each dependency doubles the branches of
    the object, so more than MAX_DEPENDENCIES per object are rejected.
    """
    deps: list[tuple[str, str, Any]] = []  # (pointer, name, list of names | schema)
    for key in ("dependentRequired", "dependentSchemas", "dependencies"):
      if key not in s:
        continue
      if not isinstance(s[key], dict):
        self.invalid(f"{key} must be an object", f"{ptr}/{key}")
      for name, dep in s[key].items():
        at = f"{ptr}/{key}/{_esc(name)}"
        is_names = isinstance(dep, list)
        if (key == "dependentRequired" and not is_names) or (
            key == "dependentSchemas" and is_names):
          what = "arrays of names" if key == "dependentRequired" else "schemas"
          self.invalid(f"{key} values must be {what}", at)
        if is_names and not all(isinstance(x, str) for x in dep):
          self.invalid("dependency names must be strings", at)
        deps.append((at, name, dep))
    if len(deps) > MAX_DEPENDENCIES:
      self.fail(f"more than {MAX_DEPENDENCIES} property dependencies on one object are not "
                "supported (each doubles the grammar)", deps[0][0].rsplit("/", 1)[0],
                deps[0][0].rsplit("/", 2)[1])
      return []
    out = []
    for at, name, dep in deps:
      absent = self.node({"properties": {name: False}}, at)
      if isinstance(dep, list):
        present = self.node({"required": list(dict.fromkeys([name] + dep))}, at)
      else:
        present = self.merge(self.node({"required": [name]}, at), self.node(dep, at), at)
      out.append(sm.union([absent, present]))
    return out

  def branches(self, s: dict, key: str, ptr: str) -> list:
    items = s[key]
    if not isinstance(items, list) or not items:
      self.invalid(f"{key} must be a non-empty array of schemas", f"{ptr}/{key}")
    return [self.node(b, f"{ptr}/{key}/{i}") for i, b in enumerate(items)]

  def one_of(self, s: dict, base: dict | None, ptr: str) -> dict | None:
    """oneOf after merging the common assertions into each branch; exclusivity is proved."""
    merged = (self.merge(base, b, ptr) for b in self.branches(s, "oneOf", ptr))
    branches = [b for b in merged if b is not None]
    out = self.exclusive_union(branches)
    if out is False:
      self.fail("oneOf branches may both match the same value, and oneOf exclusivity cannot "
                "be enforced; make the branches exclusive (distinct types, or distinct "
                "const/enum values of a required discriminator property) or use anyOf",
                f"{ptr}/oneOf", "oneOf")
      return sm.union(branches)  # lenient: relaxed to anyOf (recorded above)
    return out

  def values(self, s: dict, key: str, ptr: str, rest: dict | None) -> dict | None:
    """The finite candidates of const/enum that satisfy every sibling assertion (``rest``)."""
    vals = [s[key]] if key == "const" else s[key]
    if key == "enum" and not isinstance(vals, list):
      self.invalid("enum must be an array of values", ptr)
    for i, v in enumerate(vals):
      self.check_value(v, ptr if key == "const" else f"{ptr}/{i}")
    scalars, structured = [], []
    for v in vals:
      if not self.validator.accepts(v, rest):
        continue
      if isinstance(v, (dict, list)):
        if not any(sv.json_equal(v, w) for w in structured):
          structured.append(v)
      elif not any(sv.json_equal(v, w) for w in scalars):
        scalars.append(v)
    branches = ([{"enum": scalars}] if scalars else []) + [sv.const_schema(v) for v in structured]
    return sm.union(branches)

  def check_value(self, v: Any, ptr: str, depth: int = 0) -> None:
    if depth > 256:
      raise UnsupportedSchemaError("const/enum value nests deeper than 256", ptr)
    if isinstance(v, Decimal) and not sm.decimal_ok(v):
      raise UnsupportedSchemaError(f"number {v} would be rounded by binary64 JSON parsing; "
                                   "write a value with at most 17 significant digits", ptr)
    if isinstance(v, int) and not isinstance(v, bool) and not sm.INT64_MIN <= v <= sm.INT64_MAX:
      raise UnsupportedSchemaError(f"integer {v} is outside signed 64-bit", ptr)
    if isinstance(v, str):
      _utf8(v, ptr)
    elif isinstance(v, dict):
      for k, x in v.items():
        _utf8(k, ptr)
        self.check_value(x, f"{ptr}/{_esc(k)}", depth + 1)
    elif isinstance(v, list):
      for i, x in enumerate(v):
        self.check_value(x, f"{ptr}/{i}", depth + 1)

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
    return sm.union(leaves)

  def leaf(self, t: str, s: dict, ptr: str) -> dict | None:
    out: dict[str, Any] = {"type": t}
    if t in ("number", "integer"):
      lows, highs = [], []
      for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        if k in s and isinstance(s[k], bool) and self.draft7:
          continue  # draft-04 boolean form: folded into minimum/maximum below
        if k in s:
          v = self.number(s, k, ptr)
          if k in ("minimum", "maximum") and self.draft7 and s.get("exclusive" + k[0].upper() + k[1:]) is True:
            k = "exclusive" + k[0].upper() + k[1:]
          (lows if "inimum" in k else highs).append((v, k.startswith("exclusive")))
      if lows:
        v, ex = max(lows)
        out["exclusiveMinimum" if ex else "minimum"] = v
      if highs:
        v, ex = min(highs, key=lambda x: (x[0], not x[1]))
        out["exclusiveMaximum" if ex else "maximum"] = v
    elif t == "string":
      out["_at"] = ptr
      for k in ("minLength", "maxLength"):
        if k in s:
          out[k] = self.count(s, k, ptr)
      if "pattern" in s:
        pat = s["pattern"]
        if not isinstance(pat, str):
          self.invalid("pattern must be a string", f"{ptr}/pattern")
        try:
          _python_pattern(pat)
        except RegexError as e:
          raise RegexError(f"pattern: {e.message} (pattern position {e.location})",
                           f"{ptr}/pattern") from None
        out["pattern"] = pat
    elif t == "array":
      return self.array(s, ptr)
    elif t == "object":
      return self.obj(s, ptr)
    return sm.finish_leaf(out)

  def number(self, s: dict, k: str, ptr: str) -> Any:
    v = s[k]
    if not sv.is_number(v):
      self.invalid(f"{k} must be a number", f"{ptr}/{k}")
    if isinstance(v, Decimal) and not sm.decimal_ok(v):
      raise UnsupportedSchemaError(f"{k} {v} would be rounded by binary64 JSON parsing",
                                   f"{ptr}/{k}")
    return v

  def count(self, s: dict, k: str, ptr: str) -> int:
    v = s[k]
    if isinstance(v, Decimal) and v == v.to_integral_value():
      v = int(v)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
      self.invalid(f"{k} must be a non-negative integer", f"{ptr}/{k}")
    return v

  def array(self, s: dict, ptr: str) -> dict | None:
    out: dict[str, Any] = {"type": "array"}
    prefix_key = "prefixItems"
    items = s.get("items", True)
    if isinstance(items, list):  # draft-07 positional items
      prefix_src, prefix_key = items, "items"
      tail_src, tail_key = s.get("additionalItems", True), "additionalItems"
    else:
      prefix_src = s.get("prefixItems", [])
      tail_src, tail_key = items, "items"
    if not isinstance(prefix_src, list):
      self.invalid(f"{prefix_key} must be an array of schemas", f"{ptr}/{prefix_key}")
    prefix = [self.node(x, f"{ptr}/{prefix_key}/{i}") for i, x in enumerate(prefix_src)]
    if prefix:
      out["prefixItems"] = prefix
    out["items"] = self.node(tail_src, f"{ptr}/{tail_key}")
    for k in ("minItems", "maxItems"):
      if k in s:
        out[k] = self.count(s, k, ptr)
    return sm.finish_leaf(out)

  def obj(self, s: dict, ptr: str) -> dict | None:
    props_src = s.get("properties", {})
    if not isinstance(props_src, dict):
      self.invalid("properties must be an object of schemas", f"{ptr}/properties")
    props = {}
    for k, x in props_src.items():
      _utf8(k, f"{ptr}/properties")
      if k == "$ref":
        # xgrammar resolves any "$ref" key as a reference, even a property name.
        self.fail("a property named '$ref' is not supported by the generation grammar",
                  f"{ptr}/properties/$ref", "properties")
        continue
      props[k] = self.node(x, f"{ptr}/properties/{_esc(k)}")
    required = s.get("required", [])
    if (not isinstance(required, list) or not all(isinstance(r, str) for r in required)
        or len(set(required)) != len(required)):
      self.invalid("required must be an array of distinct strings", f"{ptr}/required")
    addl = self.node(s.get("additionalProperties", True), f"{ptr}/additionalProperties")
    pattern_props = self.pattern_properties(s, props, addl, ptr)
    out = self.finish_object(props, list(required), addl, ptr)
    if out is not None and pattern_props is not None:
      out["_pp"] = pattern_props
    return out

  def pattern_properties(self, s: dict, props: dict, addl: Any, ptr: str) -> tuple | None:
    """(pattern, NF) of a supported patternProperties, or None.

    Exact only for one pattern on a closed object whose declared names the pattern does not
    match: xgrammar would otherwise let a key take the pattern path alone (skipping the
    declared schema or the additionalProperties exclusion).
    """
    if "patternProperties" not in s:
      return None
    at = f"{ptr}/patternProperties"
    pp = s["patternProperties"]
    if not isinstance(pp, dict):
      self.invalid("patternProperties must be an object of schemas", at)
    if not pp:
      return None
    why = None
    if len(pp) > 1:
      why = "several patterns"
    elif addl is not None:
      why = "an object that is not closed (set additionalProperties: false)"
    pat, sub = next(iter(pp.items()))
    try:
      rx = _python_pattern(pat)
    except RegexError as e:
      raise RegexError(f"patternProperties pattern: {e.message} (pattern position "
                       f"{e.location})", f"{at}/{_esc(pat)}") from None
    if why is None and any(rx.fullmatch(k) for k in props):
      why = "a pattern that also matches a declared property name"
    if why is not None:
      self.fail(f"patternProperties is supported only with one pattern on a closed object "
                f"whose declared names it does not match; this schema has {why}", at,
                "patternProperties")
      return None
    sub_nf = self.node(sub, f"{at}/{_esc(pat)}")
    return None if sub_nf is None else (pat, sub_nf)

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
    if nf.get("type") == "object" and nf.get("properties"):
      nf = dict(nf)
      names = list(nf["properties"])
      # A None (false) property is forbidden: it must not appear, even as an additional key.
      nf["properties"] = {k: v for k, v in nf["properties"].items() if v is not None}
      if not nf["properties"]:
        del nf["properties"]
      long_names = [k for k in names if len(k) > MAX_KEY_CHARS]
      if long_names and nf.get("additionalProperties", {}) is not False:
        raise UnsupportedSchemaError(
            f"property names longer than {MAX_KEY_CHARS} characters on an object that allows "
            "additional properties are not supported", f"{nf.get('_at', '')}/properties/"
            f"{_esc(long_names[0])}")
      if nf.get("additionalProperties", {}) is not False:
        # Route additional keys through an exact, escape-free key pattern excluding every
        # declared or forbidden name (xgrammar lets re-spelled declared names through).
        nf["patternProperties"] = {_schema_regex.key_complement(names):
                                   nf.pop("additionalProperties")}
        nf["additionalProperties"] = False
    if "_pp" in nf:
      conv = _schema_regex.schema_pattern(nf["_pp"][0])
      if conv is not None:  # keys are spelled without escapes, like pattern strings
        out["patternProperties"] = {"^" + conv[0] + "$": self.emit(nf["_pp"][1])}
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

  def emit_string(self, nf: dict) -> Any:
    ptr = nf.get("_at", "")
    lo, hi = nf.get("minLength", 0), nf.get("maxLength")
    if "pattern" in nf:
      try:
        conv = _schema_regex.schema_pattern(nf["pattern"], lo, hi)
      except _schema_regex.LengthUnsupported:
        conv = False
      if conv is False:
        key = "minLength" if lo else "maxLength"
        self.fail("minLength/maxLength together with this pattern cannot be enforced exactly "
                  "(it has several variable-length parts); fold the length into the pattern "
                  "(e.g. '^[a-z]{2,8}$')", f"{ptr}/{key}", key)
        conv = _schema_regex.schema_pattern(nf["pattern"])
      if conv is None:  # only reachable when lenient dropped nothing: caught in finish_leaf
        raise SchemaError("no string satisfies both the pattern and the length bounds", ptr)
      return {"type": "string", "pattern": conv[0]}
    if lo or hi is not None:
      if lo > _regex.MAX_REPEAT:
        self.fail(f"minLength above {_regex.MAX_REPEAT} is not supported", f"{ptr}/minLength",
                  "minLength")
        return {"type": "string"}
      if hi is not None:
        hi = min(hi, _regex.MAX_REPEAT)  # longer strings are never generated: a narrowing
      node = _regex.Rep(_regex.Cls(_regex.JSON_SAFE), lo, hi)
      return {"type": "string", "pattern": _schema_regex.json_string_regex(node)}
    return {"type": "string"}


@functools.lru_cache(maxsize=512)
def _python_pattern(pattern: str) -> re.Pattern:
  return re.compile(_schema_regex.search_regex(pattern), re.S)


def _utf8(s: str, ptr: str) -> None:
  try:
    s.encode("utf-8")
  except UnicodeEncodeError:
    raise UnsupportedSchemaError("string holds a lone surrogate (not valid Unicode text)",
                                 ptr) from None


def _def_name(ptr: str, taken: set[str]) -> str:
  m = re.fullmatch(r"/(?:\$defs|definitions)/([A-Za-z0-9_.-]{1,64})", ptr)
  name = m.group(1) if m else ("root" if ptr == "" else "ref")
  base, i = name, 1
  while name in taken:
    name = f"{base}_{i}"
    i += 1
  return name


def _reachable(root: Any, defs: dict) -> dict:
  """The definitions the emitted schema references (transitively), in definition order."""
  seen: set[str] = set()
  stack = [root]
  while stack:
    v = stack.pop()
    if isinstance(v, dict):
      ref = v.get("$ref")
      if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref[len("#/$defs/"):]
        if name not in seen:
          seen.add(name)
          stack.append(defs[name])
      stack.extend(x for k, x in v.items() if k not in ("enum", "$ref"))
    elif isinstance(v, list):
      stack.extend(v)
  return {k: v for k, v in defs.items() if k in seen}


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
  defs = _reachable(out, defs)
  if defs:
    out = dict(out)
    out["$defs"] = defs
  return SchemaCheck(dumps(out), tuple(n.dropped))
