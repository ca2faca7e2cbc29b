"""JSONSchemaBench and MaskBench support shared by `benchmarks/schema_coverage.py` and the
`jsonschemabench` study: the byte vocabulary, the data layout, error keys, and the verdict of a
real matcher on one MaskBench instance (does some serialization of the value, then EOS,
terminate it).
"""

from __future__ import annotations

import json
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

from infernix_jax import constrain as ic
from infernix_jax.constrain import _xgr
from infernix_jax.testing import schema_suite
from infernix_jax.testing.llguidance_fork import LLGuidanceFork, value_chars
from infernix_jax.testing.schema_oracle import Walker

EOS = 256  # the byte vocabulary's EOS id
SUBSETS = ("Github_trivial", "Github_easy", "Github_medium", "Glaiveai2K")


def byte_vocab() -> ic.Vocabulary:
  """Bytes 0..255 and an EOS (id 256): masks and verdicts without a tokenizer's spellings."""
  return ic.Vocabulary.from_tokens([bytes([i]) for i in range(256)] + [b"<eos>"],
                                   eos_ids=[EOS], name="bytes")


def subset_files(data: Path, subset: str, limit: int | None = None) -> list[Path]:
  """The raw schemas of `subset` under the shared data folder `data`, sorted by name."""
  return sorted((data / "jsonschemabench" / "data" / subset).glob("*.json"))[:limit]


def sample_files(data: Path, subset: str, n: int, seed: int) -> list[Path]:
  """`n` schemas of `subset` drawn without replacement by a permutation seeded by (seed,
  subset), sorted by name (all of them when n is 0 or covers the subset)."""
  files = subset_files(data, subset)
  if n <= 0 or n >= len(files):
    return files
  return sorted(random.Random(f"{seed}/{subset}").sample(files, n))


def maskbench_cases(data: Path, subset: str, schema_file: Path) -> list[dict]:
  """The MaskBench instances of one schema ({"data": value, "valid": bool}; numbers as
  Decimal so that no spelling is lost); [] where the schema has none."""
  path = data / "jsonschemabench" / "maskbench" / "data" / f"{subset}---{schema_file.name}"
  if not path.exists():
    return []
  return json.loads(path.read_text(encoding="utf-8"), parse_float=Decimal).get("tests", [])


def walker_for(schema_text: str, budget: int = 5000) -> Walker:
  """The serialization search for one schema: draft 4 (and 3) say 1.0 is no integer, so the
  walker must not re-spell it as 1 there."""
  draft4 = "draft-04" in schema_text[:400] or "draft-03" in schema_text[:400]
  return Walker(EOS, budget=budget, integer_floats=not draft4)


def keyword_of(e: ic.ConstraintError) -> str:
  """The keyword our checker refused (last JSON Pointer segment), else the error class."""
  loc = e.location or ""
  if isinstance(e, ic.UnsupportedSchemaError) and loc:
    return loc.rsplit("/", 1)[-1] or "(root)"
  return type(e).__name__


def error_key(e: ic.ConstraintError) -> str:
  """What the llguidance backend refused: the construct of an UnsupportedConstraintError,
  else the error class."""
  if isinstance(e, ic.UnsupportedConstraintError):
    return e.construct
  return type(e).__name__


def xgrammar_accepts(grammar: Any, walker: Walker, value: Any) -> bool:
  """Walker verdict on a fresh matcher of an xgrammar compiled grammar (byte vocabulary)."""
  return walker.accepts(_xgr.new_matcher(grammar), value)


def llguidance_accepts(backend, compiled, walker: Walker, value: Any) -> bool:
  """Walker verdict on an llguidance matcher; an accepted text must also terminate a real
  session's preview (AssertionError where the two disagree)."""
  ok = walker.accepts(LLGuidanceFork(backend.new_session(compiled, b"")._m, EOS), value)
  if ok:
    data = list(walker.text.encode("utf-8")) + [EOS]
    r = backend.new_session(compiled, b"").preview(data)
    if not (r.accepted == len(data) and r.terminated):
      raise AssertionError(f"session replay disagrees with the matcher on {walker.text[:80]!r}")
  return ok


def llg_narrowing(value, schema_text: str, file: str = "", group: str = "",
                  draft7: bool = False) -> str | None:
  """Why a valid value may lie outside the llguidance backend's language (None: unknown)."""
  if any((ord(c) < 0x20 and c not in "\b\f\n\r\t") or c == "\x7f" for c in value_chars(value)):
    return "control characters / DEL need \\u escapes (disabled)"
  if file == "format.json" or '"format"' in schema_text:
    return "format is enforced (llguidance's format regexes)"
  if file == "float-overflow.json":
    return "1E+308 spelled as an integer overflows"
  if draft7 and file == "ref.json" and "sibling" in group:
    return "$ref siblings are intersected (draft-07 ignores them)"
  for n in schema_suite._numbers(value):
    if abs(n) >= 2**63 or (not isinstance(n, int) and len(Decimal(str(n)).as_tuple().digits) > 17):
      return "numbers beyond int64 / 17 significant digits"
  return None


def xgrammar_narrowing(value, schema_json: str) -> str | None:
  """Why a valid value may lie outside our xgrammar path's language (None: unknown)."""
  return schema_suite.narrowing_reason(value, schema_json)


def xgrammar_known_gap(value, schema_json: str) -> bool:
  """Whether an invalid value that our xgrammar path accepts falls in a documented gap."""
  return schema_suite.known_gap(value, schema_json)
