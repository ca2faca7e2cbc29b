"""Runs JSON-Schema-Test-Suite files through the checker and the real constrained matcher.

For every schema group: the checker either rejects it with a ConstraintError (counted by
class and keyword) or the compiled constraint must accept each valid instance (some
serialization, then EOS -> terminated) and reject each invalid one. Documented narrowings
of the generation language (valid values it cannot spell) and one documented xgrammar gap
are counted separately, never silently: see ``narrowing_reason`` and ``known_gap``.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from infernix_jax.constrain import _regex, _xgr
from infernix_jax.constrain.errors import ConstraintError
from infernix_jax.constrain.schema import check_json_schema
from infernix_jax.testing.schema_oracle import SearchBudgetExceeded, Walker

DRAFT7_URI = "http://json-schema.org/draft-07/schema#"
# Files whose "invalid" cases assert annotation-only keywords (content*), by the suite's design.
ANNOTATION_ONLY_FILES = frozenset({"content.json"})


@dataclasses.dataclass
class SuiteCounts:
  """Tallies over suite groups (schemas) and cases (instances)."""
  groups: int = 0
  supported: int = 0
  rejected: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  cases: int = 0
  passed: int = 0
  narrowed: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  known_gap: int = 0
  budget: int = 0
  failures: list = dataclasses.field(default_factory=list)

  def add(self, other: "SuiteCounts") -> None:
    for f in dataclasses.fields(self):
      a, b = getattr(self, f.name), getattr(other, f.name)
      setattr(self, f.name, a + b)


def _strings(v: Any):
  if isinstance(v, str):
    yield v
  elif isinstance(v, dict):
    for k, x in v.items():
      yield k
      yield from _strings(x)
  elif isinstance(v, list):
    for x in v:
      yield from _strings(x)


def _numbers(v: Any):
  if isinstance(v, (int, float, Decimal)) and not isinstance(v, bool):
    yield v
  elif isinstance(v, dict):
    for x in v.values():
      yield from _numbers(x)
  elif isinstance(v, list):
    for x in v:
      yield from _numbers(x)


def narrowing_reason(value: Any, schema_json: str) -> str | None:
  """Why a valid value may lie outside the generation language (None: no known reason)."""
  if '"pattern"' in schema_json or '"patternProperties"' in schema_json:
    safe = _regex.JSON_SAFE
    for s in _strings(value):
      for ch in s:
        if not any(lo <= ord(ch) <= hi for lo, hi in safe):
          return "pattern/length strings and additional keys spell no escapes"
  bounded = any(f'"{k}"' in schema_json for k in
                ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"))
  for n in _numbers(value):
    if abs(n) >= 2**63 or (not isinstance(n, int) and len(Decimal(str(n)).as_tuple().digits) > 17):
      return "numbers beyond int64 / 17 significant digits"
    if bounded and not isinstance(n, int) and -Decimal(str(n)).normalize().as_tuple().exponent > 6:
      return "bounded numbers spell at most 6 fraction digits (xgrammar)"
  return None


def known_gap(value: Any, schema_json: str) -> bool:
  """xgrammar 0.2.8: an additional key spelled with escapes can duplicate a declared key.

  Our schema output routes additional keys through an escape-free key pattern that excludes
  the declared names (``_regex.key_complement``), so this should never trigger any more; it
  stays as a separate tally so that a regression is visible.
  """
  def keys(v):
    if isinstance(v, dict):
      for k, x in v.items():
        yield k
        yield from keys(x)
    elif isinstance(v, list):
      for x in v:
        yield from keys(x)
  return any("\\" in json.dumps(k) for k in keys(value)) and '"properties"' in schema_json


def run_file(path: Path, vocab: Any, eos_id: int, *, draft7: bool = False,
             compiler: Any = None) -> SuiteCounts:
  """Checks every group of one suite file; ``compiler`` (optional) replays accepted texts."""
  counts = SuiteCounts()
  text = path.read_text(encoding="utf-8")
  groups, exact = json.loads(text), json.loads(text, parse_float=Decimal)
  walker = Walker(eos_id)
  for g, gx in zip(groups, exact):
    counts.groups += 1
    schema = g["schema"]
    if draft7 and isinstance(schema, dict) and "$schema" not in schema:
      schema = {"$schema": DRAFT7_URI, **schema}
    source = json.dumps(schema)
    try:
      check = check_json_schema(source)
    except ConstraintError as e:
      counts.rejected[type(e).__name__] += 1
      if e.location is None and "unsatisfiable" not in str(e):
        counts.failures.append((path.name, g["description"], "error without location", str(e)))
      continue
    compiled = _xgr.compile_json_schema(vocab, check.schema_json, max_whitespace=32)
    counts.supported += 1
    replay = compiler.compile(_constraint(source)) if compiler is not None else None
    for case in gx["tests"]:
      counts.cases += 1
      value = case["data"]
      try:
        ok = walker.accepts(_xgr.new_matcher(compiled), value)
      except SearchBudgetExceeded:
        counts.budget += 1
        continue
      if ok and replay is not None:
        data = list(walker.text.encode("utf-8")) + [eos_id]
        r = replay.new_session().preview(data)
        if not (r.accepted == len(data) and r.terminated):
          counts.failures.append((path.name, g["description"], case["description"],
                                  "session replay disagrees with matcher"))
          continue
      if ok == case["valid"]:
        counts.passed += 1
      elif case["valid"] and (reason := narrowing_reason(value, check.schema_json)):
        counts.narrowed[reason] += 1
      elif not case["valid"] and known_gap(value, check.schema_json):
        counts.known_gap += 1
      else:
        counts.failures.append((path.name, g["description"], case["description"],
                                "valid rejected" if case["valid"] else "invalid accepted"))
  return counts


def _constraint(source: str) -> Any:
  from infernix_jax.constrain.spec import OutputConstraint

  # The replay checks our xgrammar path's sessions against the xgrammar matcher it walked.
  return OutputConstraint.json_schema(source).with_backend("xgrammar")


def suite_files(root: Path, draft: str) -> list[Path]:
  """Top-level and optional/ files of one draft, minus annotation-only ones."""
  base = root / "tests" / draft
  files = sorted(base.glob("*.json")) + sorted((base / "optional").glob("*.json"))
  return [f for f in files if f.name not in ANNOTATION_ONLY_FILES]
