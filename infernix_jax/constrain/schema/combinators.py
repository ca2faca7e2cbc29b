"""Combinators: exact intersection (allOf, ``$ref`` siblings), anyOf unions, oneOf exclusivity."""

from __future__ import annotations

from typing import Any

from infernix_jax.constrain.errors import UnsupportedSchemaError
from infernix_jax.constrain.schema import arrays, numbers, strings
from infernix_jax.constrain.schema import values as sv

MAX_MERGES = 16384  # intersection merges per schema (reference 000's composition limit)


def finish_leaf(leaf: dict) -> dict | None:
  """Canonical leaf, or None when its own assertions are contradictory."""
  t = leaf["type"]
  if t in ("integer", "number"):
    return numbers.finish_number(leaf)
  if t == "string":
    return strings.finish_string(leaf)
  if t == "array":
    return arrays.finish_array(leaf)
  return leaf


class Merger:
  """allOf, anyOf and oneOf over NFs, for the normalizer.

  Every operation over normalized schemas (see ``values``) is exact: when an intersection
  cannot be written in the NF (two different patterns, a property forbidden while others stay
  open), it raises UnsupportedSchemaError instead of relaxing. The host class provides
  ``node``, ``resolve``, ``validator``, ``fail``, ``invalid`` and the per-type intersections
  ``merge_strings``, ``merge_arrays`` and ``merge_objects``.
  """

  merges = 0

  def resolve(self, ref: str) -> Any:  # pragma: no cover (provided by the normalizer)
    raise NotImplementedError

  def fail(self, message: str, ptr: str, keyword: str) -> None:  # pragma: no cover
    raise NotImplementedError

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
      return union(branches)  # lenient: relaxed to anyOf (recorded above)
    return out

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
      numbers.merge_bounds(a, b, out)
    elif t == "string":
      self.merge_strings(a, b, out, ptr)
    elif t == "array":
      self.merge_arrays(a, b, out, ptr)
    elif t == "object":
      return self.merge_objects(a, b, ptr)
    return finish_leaf(out)

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
      return numbers.ranges_disjoint(a, b)
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
