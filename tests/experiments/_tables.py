"""Reading the markdown tables of study summaries in tests: rows and 'x [lo, hi]' cells."""

from __future__ import annotations

import re

INTERVAL = re.compile(r"^(-?[\d.]+) \[(-?[\d.]+), (-?[\d.]+)\]$")


def bracketed(text: str) -> tuple[float, float, float]:
  """(point, low, high) of an 'x [lo, hi]' cell, checked to bracket its point."""
  m = INTERVAL.match(text.strip())
  assert m, f"{text!r} is not 'x [lo, hi]'"
  point, low, high = map(float, m.groups())
  assert low <= point <= high, text
  return point, low, high


def row(text: str, start: str) -> list[str]:
  """The cells of the first table row of `text` that starts with `start`."""
  line = next(l for l in text.splitlines() if l.startswith(start))
  return [x.strip() for x in line.strip("|").split("|")]
