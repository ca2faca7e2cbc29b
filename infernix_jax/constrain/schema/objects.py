"""Object keywords (properties, required, additionalProperties, patternProperties, dependencies)."""

from __future__ import annotations

from typing import Any

from infernix_jax.constrain.errors import RegexError, UnsupportedSchemaError
from infernix_jax.constrain.schema import strings
from infernix_jax.constrain.schema.combinators import union
from infernix_jax.constrain.schema.refs import esc
from infernix_jax.constrain.schema.values import utf8

MAX_DEPENDENCIES = 6
MAX_KEY_CHARS = 256  # the additional-key pattern nests once per character of each name


def _addl(leaf: dict) -> Any:
  t = leaf.get("additionalProperties", {})
  return None if t is False else t


class ObjectKeywords:
  """Object assertions for the normalizer (the host provides node, merge, fail, invalid, emit)."""

  def obj(self, s: dict, ptr: str) -> dict | None:
    props_src = s.get("properties", {})
    if not isinstance(props_src, dict):
      self.invalid("properties must be an object of schemas", f"{ptr}/properties")
    props = {}
    for k, x in props_src.items():
      utf8(k, f"{ptr}/properties")
      if k == "$ref":
        # xgrammar resolves any "$ref" key as a reference, even a property name.
        self.fail("a property named '$ref' is not supported by the generation grammar",
                  f"{ptr}/properties/$ref", "properties")
        continue
      props[k] = self.node(x, f"{ptr}/properties/{esc(k)}")
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
      rx = strings.python_pattern(pat)
    except RegexError as e:
      raise RegexError(f"patternProperties pattern: {e.message} (pattern position "
                       f"{e.location})", f"{at}/{esc(pat)}") from None
    if why is None and any(rx.fullmatch(k) for k in props):
      why = "a pattern that also matches a declared property name"
    if why is not None:
      self.fail(f"patternProperties is supported only with one pattern on a closed object "
                f"whose declared names it does not match; this schema has {why}", at,
                "patternProperties")
      return None
    sub_nf = self.node(sub, f"{at}/{esc(pat)}")
    return None if sub_nf is None else (pat, sub_nf)

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
        at = f"{ptr}/{key}/{esc(name)}"
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
      out.append(union([absent, present]))
    return out

  def merge_objects(self, a: dict, b: dict, ptr: str) -> dict | None:
    if "_pp" in a or "_pp" in b:
      self.fail("intersecting an object that has patternProperties is not supported", ptr,
                "patternProperties")
      a, b = ({k: v for k, v in x.items() if k != "_pp"} for x in (a, b))  # lenient: dropped
    pa, pb = a.get("properties", {}), b.get("properties", {})
    aa, ab = _addl(a), _addl(b)
    props: dict[str, Any] = {}
    for k in list(pa) + [k for k in pb if k not in pa]:
      xa = pa[k] if k in pa else aa
      xb = pb[k] if k in pb else ab
      props[k] = self.merge(xa, xb, ptr)
    required = list(dict.fromkeys(a.get("required", []) + b.get("required", [])))
    addl = self.merge(aa, ab, ptr)
    return self.finish_object(props, required, addl, ptr)

  def finish_object(self, props: dict, required: list, addl: Any, ptr: str) -> dict | None:
    """Object leaf with every required name declared and forbidden names removed."""
    props = dict(props)
    for k in required:
      if k not in props:
        props[k] = addl  # an undeclared required name takes the additionalProperties schema
    for k in list(props):
      if props[k] is None:  # forbidden name; kept (as None) so merges and emission see it
        if k in required:
          return None
        if addl is None:
          del props[k]  # a closed object forbids it anyway
    out: dict = {"type": "object", "_at": ptr}
    if props:
      out["properties"] = props
    if required:
      out["required"] = required
    out["additionalProperties"] = False if addl is None else addl
    return out

  def emit_object(self, nf: dict) -> tuple[dict, dict]:
    """An object NF prepared for emission, and the output's patternProperties (if any).

    Additional keys go through an exact, escape-free key pattern that excludes every
    declared or forbidden name (xgrammar lets re-spelled declared names through).
    """
    out = {}
    if nf.get("properties"):
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
            f"{esc(long_names[0])}")
      if nf.get("additionalProperties", {}) is not False:
        nf["patternProperties"] = {strings.key_complement(names):
                                   nf.pop("additionalProperties")}
        nf["additionalProperties"] = False
    if "_pp" in nf:
      conv = strings.schema_pattern(nf["_pp"][0])
      if conv is not None:  # keys are spelled without escapes, like pattern strings
        out["patternProperties"] = {"^" + conv[0] + "$": self.emit(nf["_pp"][1])}
    return nf, out
