"""const and enum: the finite candidates that satisfy every sibling assertion."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from infernix_jax.constrain.errors import UnsupportedSchemaError
from infernix_jax.constrain.schema import values as sv
from infernix_jax.constrain.schema.combinators import union
from infernix_jax.constrain.schema.numbers import INT64_MAX, INT64_MIN, decimal_ok
from infernix_jax.constrain.schema.refs import esc


class EnumKeywords:
  """const/enum for the normalizer (the host provides ``validator`` and ``invalid``)."""

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
    return union(branches)

  def check_value(self, v: Any, ptr: str, depth: int = 0) -> None:
    if depth > 256:
      raise UnsupportedSchemaError("const/enum value nests deeper than 256", ptr)
    if isinstance(v, Decimal) and not decimal_ok(v):
      raise UnsupportedSchemaError(f"number {v} would be rounded by binary64 JSON parsing; "
                                   "write a value with at most 17 significant digits", ptr)
    if isinstance(v, int) and not isinstance(v, bool) and not INT64_MIN <= v <= INT64_MAX:
      raise UnsupportedSchemaError(f"integer {v} is outside signed 64-bit", ptr)
    if isinstance(v, str):
      sv.utf8(v, ptr)
    elif isinstance(v, dict):
      for k, x in v.items():
        sv.utf8(k, ptr)
        self.check_value(x, f"{ptr}/{esc(k)}", depth + 1)
    elif isinstance(v, list):
      for i, x in enumerate(v):
        self.check_value(x, f"{ptr}/{i}", depth + 1)
