"""Numeric keywords (minimum, maximum, exclusiveMinimum, exclusiveMaximum) and exact literals."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from infernix_jax.constrain.errors import UnsupportedSchemaError
from infernix_jax.constrain.schema import values as sv

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def decimal_ok(d: Decimal) -> bool:
  """True if binary64 parsing keeps the literal's decimal value (after shortest re-print)."""
  f = float(d)
  return math.isfinite(f) and Decimal(repr(f)) == d


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


def finish_number(leaf: dict) -> dict | None:
  """Canonical integer/number leaf, or None when its bounds are contradictory."""
  if leaf["type"] == "integer":
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
  lo, hi = sv.lower_bound(leaf), sv.upper_bound(leaf)
  if lo is not None and hi is not None:
    if lo[0] > hi[0] or (lo[0] == hi[0] and (lo[1] or hi[1])):
      return None
  return leaf


def merge_bounds(a: dict, b: dict, out: dict) -> None:
  """Writes the tighter of ``a``'s and ``b``'s bounds into ``out`` (an intersection)."""
  lows = [x for x in (sv.lower_bound(a), sv.lower_bound(b)) if x is not None]
  highs = [x for x in (sv.upper_bound(a), sv.upper_bound(b)) if x is not None]
  if lows:
    v, excl = max(lows, key=lambda x: (x[0], x[1]))
    out["exclusiveMinimum" if excl else "minimum"] = v
  if highs:
    v, excl = min(highs, key=lambda x: (x[0], not x[1]))
    out["exclusiveMaximum" if excl else "maximum"] = v


def ranges_disjoint(a: dict, b: dict) -> bool:
  """True if no number lies within both leaves' bounds."""
  for lo_leaf, hi_leaf in ((a, b), (b, a)):
    lo, hi = sv.lower_bound(lo_leaf), sv.upper_bound(hi_leaf)
    if lo is not None and hi is not None:
      if lo[0] > hi[0] or (lo[0] == hi[0] and (lo[1] or hi[1])):
        return True
  return False


class NumberKeywords:
  """Numeric assertions for the normalizer (the host class provides ``draft7``, ``invalid``)."""

  def number_leaf(self, s: dict, ptr: str, out: dict) -> None:
    """Writes the tightest lower and upper bound of ``s`` into the leaf ``out``."""
    lows, highs = [], []
    for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
      if k in s and isinstance(s[k], bool) and self.draft7:
        continue  # draft-04 boolean form: folded into minimum/maximum below
      if k in s:
        v = self.number(s, k, ptr)
        exclusive = "exclusive" + k[0].upper() + k[1:]
        if k in ("minimum", "maximum") and self.draft7 and s.get(exclusive) is True:
          k = exclusive
        (lows if "inimum" in k else highs).append((v, k.startswith("exclusive")))
    if lows:
      v, ex = max(lows)
      out["exclusiveMinimum" if ex else "minimum"] = v
    if highs:
      v, ex = min(highs, key=lambda x: (x[0], not x[1]))
      out["exclusiveMaximum" if ex else "maximum"] = v

  def number(self, s: dict, k: str, ptr: str) -> Any:
    v = s[k]
    if not sv.is_number(v):
      self.invalid(f"{k} must be a number", f"{ptr}/{k}")
    if isinstance(v, Decimal) and not decimal_ok(v):
      raise UnsupportedSchemaError(f"{k} {v} would be rounded by binary64 JSON parsing",
                                   f"{ptr}/{k}")
    return v
