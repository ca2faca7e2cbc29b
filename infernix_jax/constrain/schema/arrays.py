"""Array keywords (items, prefixItems, additionalItems, minItems, maxItems)."""

from __future__ import annotations

from typing import Any


def finish_array(leaf: dict) -> dict | None:
  """Canonical array leaf (impossible positions cut the length), or None if contradictory."""
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


def _tail(leaf: dict) -> Any:
  t = leaf.get("items", {})
  return None if t is False else t


class ArrayKeywords:
  """Array assertions for the normalizer (the host provides node, merge, count, invalid)."""

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
    return finish_array(out)

  def merge_arrays(self, a: dict, b: dict, out: dict, ptr: str) -> None:
    """Writes the intersection of two array leaves' assertions into ``out``."""
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
