"""Exact intersection (allOf, 2020-12 ``$ref`` siblings) and oneOf exclusivity over normalized schemas.

See ``values`` for the normalized form (NF). Every operation here is exact: when an
intersection cannot be written in the NF (two different patterns, a property forbidden while
others stay open), it raises UnsupportedSchemaError instead of relaxing.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from infernix_jax.constrain.errors import UnsupportedSchemaError
from infernix_jax.constrain.schema import strings as _schema_regex
from infernix_jax.constrain.schema import values as sv

MAX_MERGES = 16384  # intersection merges per schema (reference 000's composition limit)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def integer_bounds(leaf: dict) -> tuple[int | None, int | None]:
  """Inclusive int64 bounds of an integer/number leaf's numeric assertions."""
  lo = hi = None
  if "minimum" in leaf:
    lo = math.ceil(leaf["minimum"])
  if "exclusiveMinimum" in leaf:
    x = leaf["exclusiveMinimum"]
    lo = math.floor(x) + 1 if lo is None else max(lo, math.floor(x) + 1)
  if "maximum" in leaf:
    hi = math.floor(leaf["maximum"])
  if "exclusiveMaximum" in leaf:
    x = leaf["exclusiveMaximum"]
    hi = math.ceil(x) - 1 if hi is None else min(hi, math.ceil(x) - 1)
  # Bounded integers generate in signed 64-bit: clamping only narrows the language.
  if lo is not None:
    lo = max(lo, INT64_MIN)
    if lo > INT64_MAX:
      hi = INT64_MAX  # empty: no int64 value reaches the bound
  if hi is not None:
    hi = min(hi, INT64_MAX)
  return lo, hi


def finish_leaf(leaf: dict) -> dict | None:
  """Canonical leaf, or None when its own assertions are contradictory."""
  t = leaf["type"]
  if t == "integer":
    lo, hi = integer_bounds(leaf)
    out = {k: v for k, v in leaf.items()
           if k not in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")}
    if lo is not None:
      out["minimum"] = lo
    if hi is not None:
      out["maximum"] = hi
    if lo is not None and hi is not None and lo > hi:
      return None
    return out
  if t == "number":
    lo, hi = sv.lower_bound(leaf), sv.upper_bound(leaf)
    if lo is not None and hi is not None:
      if lo[0] > hi[0] or (lo[0] == hi[0] and (lo[1] or hi[1])):
        return None
    return leaf
  if t == "string":
    if "maxLength" in leaf and leaf.get("minLength", 0) > leaf["maxLength"]:
      return None
    if "pattern" in leaf:
      try:
        if _schema_regex.schema_pattern(leaf["pattern"], leaf.get("minLength", 0),
                                 leaf.get("maxLength")) is None:
          return None  # no JSON string the grammar can spell matches: nothing to generate
      except _schema_regex.LengthUnsupported:
        pass  # reported (or dropped if lenient) when the leaf is emitted
    return leaf
  if t == "array":
    prefix = list(leaf.get("prefixItems", []))
    tail = leaf.get("items", {})
    max_items = leaf.get("maxItems")
    for i, p in enumerate(prefix):
      if p is None:  # position i can never hold a value: the array ends before it
        max_items = i if max_items is None else min(max_items, i)
        break
    if tail is None:
      tail = False
    if tail is False:
      max_items = len(prefix) if max_items is None else min(max_items, len(prefix))
    if max_items is not None:
      prefix = prefix[:max_items]
    min_items = leaf.get("minItems", 0)
    if max_items is not None and min_items > max_items:
      return None
    out = {"type": "array"}
    if "_at" in leaf:
      out["_at"] = leaf["_at"]
    if prefix:
      out["prefixItems"] = prefix
    out["items"] = tail
    if min_items:
      out["minItems"] = min_items
    if max_items is not None:
      out["maxItems"] = max_items
    return out
  return leaf


class Merger:
  """Intersection of NFs; the host class provides ``resolve``, ``validator`` and ``fail``."""

  merges = 0

  def resolve(self, ref: str) -> Any:  # pragma: no cover (provided by the normalizer)
    raise NotImplementedError

  def fail(self, message: str, ptr: str, keyword: str) -> None:  # pragma: no cover
    raise NotImplementedError

  def merge(self, a: dict | None, b: dict | None, ptr: str) -> dict | None:
    """The NF of ``allOf: [a, b]`` (exact), located at ``ptr`` for errors."""
    if a is None or b is None:
      return None
    if not a:
      return b
    if not b:
      return a
    self.merges += 1
    if self.merges > MAX_MERGES:
      raise UnsupportedSchemaError(
          f"the schema needs more than {MAX_MERGES} intersection merges; simplify its "
          "allOf/anyOf nesting", ptr)
    if "$ref" in a or "$ref" in b:
      if a == b:
        return a
      if "$ref" in a:
        return self.merge(self.resolve(a["$ref"]), b, ptr)
      return self.merge(a, self.resolve(b["$ref"]), ptr)
    if "enum" in a or "enum" in b:
      values, other = (a["enum"], b) if "enum" in a else (b["enum"], a)
      kept = [v for v in values if self.validator.accepts(v, other)]
      return {"enum": kept} if kept else None
    if "anyOf" in a or "anyOf" in b:
      branches, other = (a["anyOf"], b) if "anyOf" in a else (b["anyOf"], a)
      out = [m for m in (self.merge(x, other, ptr) for x in branches) if m is not None]
      return union(out)
    return self.merge_leaves(a, b, ptr)

  def merge_leaves(self, a: dict, b: dict, ptr: str) -> dict | None:
    ta, tb = a["type"], b["type"]
    if ta != tb and {ta, tb} != {"integer", "number"}:
      return None
    t = "integer" if "integer" in (ta, tb) else ta
    out: dict = {"type": t}
    if "_at" in a or "_at" in b:
      out["_at"] = a.get("_at", b.get("_at"))
    if t in ("integer", "number"):
      lows = [x for x in (sv.lower_bound(a), sv.lower_bound(b)) if x is not None]
      highs = [x for x in (sv.upper_bound(a), sv.upper_bound(b)) if x is not None]
      if lows:
        v, excl = max(lows, key=lambda x: (x[0], x[1]))
        out["exclusiveMinimum" if excl else "minimum"] = v
      if highs:
        v, excl = min(highs, key=lambda x: (x[0], not x[1]))
        out["exclusiveMaximum" if excl else "maximum"] = v
    elif t == "string":
      if a.get("minLength", 0) or b.get("minLength", 0):
        out["minLength"] = max(a.get("minLength", 0), b.get("minLength", 0))
      maxes = [x["maxLength"] for x in (a, b) if "maxLength" in x]
      if maxes:
        out["maxLength"] = min(maxes)
      pats = [x["pattern"] for x in (a, b) if "pattern" in x]
      if len(set(pats)) > 1:
        self.fail("intersecting two different string patterns is not supported; combine them "
                  "into one pattern", ptr, "pattern")
      if pats:
        out["pattern"] = pats[0]
    elif t == "array":
      pa, pb = a.get("prefixItems", []), b.get("prefixItems", [])
      ta_, tb_ = _tail(a), _tail(b)
      prefix = []
      for i in range(max(len(pa), len(pb))):
        xa = pa[i] if i < len(pa) else ta_
        xb = pb[i] if i < len(pb) else tb_
        prefix.append(self.merge(xa, xb, ptr))
      if prefix:
        out["prefixItems"] = prefix
      out["items"] = self.merge(ta_, tb_, ptr)
      mins = max(a.get("minItems", 0), b.get("minItems", 0))
      if mins:
        out["minItems"] = mins
      maxes = [x["maxItems"] for x in (a, b) if "maxItems" in x]
      if maxes:
        out["maxItems"] = min(maxes)
    elif t == "object":
      return self.merge_objects(a, b, ptr)
    return finish_leaf(out)

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

  def split_types(self, nf: dict | None, depth: int = 0) -> dict[str, dict]:
    """The parts of an NF per JSON type domain ("integer" counts as "number")."""
    if nf is None:
      return {}
    if depth > 64:
      raise UnsupportedSchemaError("reference chain too deep for a oneOf proof", None)
    if not nf:
      return dict(ANY_OF_DOMAIN)
    if "$ref" in nf:
      return self.split_types(self.resolve(nf["$ref"]), depth + 1)
    if "enum" in nf:
      out: dict[str, dict] = {}
      for v in nf["enum"]:
        dom = _domain(sv.json_type(v))
        out.setdefault(dom, {"enum": []})["enum"].append(v)
      return out
    if "anyOf" in nf:
      groups: dict[str, list] = {}
      for b in nf["anyOf"]:
        for dom, part in self.split_types(b, depth + 1).items():
          groups.setdefault(dom, []).append(part)
      return {dom: union(parts) for dom, parts in groups.items()}
    return {_domain(nf["type"]): nf}

  def exclusive_union(self, branches: list) -> dict | None | bool:
    """Exact oneOf of NFs per type domain, or False when exclusivity cannot be decided.

    Within one JSON type, either the branches' parts are pairwise disjoint (each value
    matches at most one: keep their union), or all parts are the same schema (every value of
    that type matches two or more branches: the type drops out), or we cannot decide.
    """
    parts = [self.split_types(b) for b in branches]
    out: list = []
    for dom in DOMAINS:
      comps = [p[dom] for p in parts if dom in p]
      if len(comps) > 1:
        if all(_clean(c) == _clean(comps[0]) for c in comps[1:]):
          continue
        for i in range(len(comps)):
          for j in range(i + 1, len(comps)):
            if not self.disjoint(comps[i], comps[j]):
              return False
      out.extend(comps)
    return union(out)

  def disjoint(self, a: dict | None, b: dict | None, depth: int = 0) -> bool:
    """True only if no JSON value satisfies both NFs (a sound, incomplete proof)."""
    if a is None or b is None:
      return True
    if depth > 32:
      return False
    if "$ref" in a:
      return self.disjoint(self.resolve(a["$ref"]), b, depth + 1)
    if "$ref" in b:
      return self.disjoint(a, self.resolve(b["$ref"]), depth + 1)
    resolve = self.resolve
    if not (sv.type_domain(a, resolve) & sv.type_domain(b, resolve)):
      return True
    if "anyOf" in a:
      return all(self.disjoint(x, b, depth + 1) for x in a["anyOf"])
    if "anyOf" in b:
      return all(self.disjoint(a, x, depth + 1) for x in b["anyOf"])
    if "enum" in a:
      return not any(self.validator.accepts(v, b) for v in a["enum"])
    if "enum" in b:
      return not any(self.validator.accepts(v, a) for v in b["enum"])
    if not a or not b:
      return False
    if a["type"] == b["type"] == "object":
      ra, rb = set(a.get("required", [])), set(b.get("required", []))
      pa, pb = a.get("properties", {}), b.get("properties", {})
      # One side requires a name the other (closed) side forbids.
      closed_a = a.get("additionalProperties") is False and "_pp" not in a
      closed_b = b.get("additionalProperties") is False and "_pp" not in b
      if (closed_b and any(k not in pb for k in ra)) or (
          closed_a and any(k not in pa for k in rb)):
        return True
      return any(self.disjoint(pa.get(k, {}), pb.get(k, {}), depth + 1) for k in ra & rb)
    if a["type"] in ("integer", "number") and b["type"] in ("integer", "number"):
      return _ranges_disjoint(a, b)
    return False


DOMAINS = ("null", "boolean", "object", "array", "string", "number")
ANY_OF_DOMAIN = {"null": {"type": "null"}, "boolean": {"type": "boolean"},
                 "object": {"type": "object", "additionalProperties": {}},
                 "array": {"type": "array", "items": {}}, "string": {"type": "string"},
                 "number": {"type": "number"}}


def _domain(t: str) -> str:
  return "number" if t == "integer" else t


def _clean(v: Any) -> Any:
  """An NF without private bookkeeping keys (for equality)."""
  if isinstance(v, dict):
    return {k: _clean(x) for k, x in v.items() if k != "_at"}
  if isinstance(v, list):
    return [_clean(x) for x in v]
  return v


def _ranges_disjoint(a: dict, b: dict) -> bool:
  for lo_leaf, hi_leaf in ((a, b), (b, a)):
    lo, hi = sv.lower_bound(lo_leaf), sv.upper_bound(hi_leaf)
    if lo is not None and hi is not None:
      if lo[0] > hi[0] or (lo[0] == hi[0] and (lo[1] or hi[1])):
        return True
  return False


def _tail(leaf: dict) -> Any:
  t = leaf.get("items", {})
  return None if t is False else t


def _addl(leaf: dict) -> Any:
  t = leaf.get("additionalProperties", {})
  return None if t is False else t


def union(branches: list) -> dict | None:
  """NF of anyOf over NFs (flattened; None if empty; {} absorbs everything)."""
  flat: list = []
  for b in branches:
    if b is None:
      continue
    if not b:
      return {}
    for x in (b["anyOf"] if "anyOf" in b else [b]):
      if x not in flat:
        flat.append(x)
  if not flat:
    return None
  return flat[0] if len(flat) == 1 else {"anyOf": flat}


def decimal_ok(d: Decimal) -> bool:
  """True if binary64 parsing keeps the literal's decimal value (after shortest re-print)."""
  f = float(d)
  return math.isfinite(f) and Decimal(repr(f)) == d
