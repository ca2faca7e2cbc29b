"""JSONSchemaBench sample: compile or a located ConstraintError; MaskBench instances agree."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from infernix_jax import constrain as ic
from infernix_jax.constrain import _xgr
from infernix_jax.constrain.schema import check_json_schema
from infernix_jax.testing import schema_suite
from infernix_jax.testing.schema_oracle import SearchBudgetExceeded, Walker

BENCH = Path(__file__).resolve().parents[2] / "../shared/data/jsonschemabench"
SUBSETS = ("Github_trivial", "Github_easy", "Github_medium", "Glaiveai2K")
PER_SUBSET = 12
EOS = 256


@pytest.fixture(scope="module")
def byte_vocab():
  return ic.Vocabulary.from_tokens([bytes([i]) for i in range(256)] + [b"<eos>"],
                                   eos_ids=[EOS], name="bytes")


def sample(subset: str) -> list[Path]:
  files = sorted((BENCH / "data" / subset).glob("*.json"))
  step = max(1, len(files) // PER_SUBSET)
  return files[::step][:PER_SUBSET]


@pytest.mark.parametrize("subset", SUBSETS)
def test_bench_sample(subset, byte_vocab):
  if not (BENCH / "data" / subset).exists():
    pytest.skip("shared data (jsonschemabench) not present")
  supported = agree = instances = 0
  for path in sample(subset):
    text = path.read_text(encoding="utf-8")
    try:
      check = check_json_schema(text)
    except ic.ConstraintError as e:
      assert e.location is not None or "unsatisfiable" in str(e), (path.name, str(e))
      continue
    compiled = _xgr.compile_json_schema(byte_vocab, check.schema_json, max_whitespace=32)
    supported += 1
    mask = BENCH / "maskbench" / "data" / f"{subset}---{path.name}"
    if not mask.exists():
      continue
    walker = Walker(EOS, budget=5000, integer_floats="draft-04" not in text[:400])
    for case in json.loads(mask.read_text(encoding="utf-8"), parse_float=Decimal)["tests"]:
      try:
        ok = walker.accepts(_xgr.new_matcher(compiled), case["data"])
      except SearchBudgetExceeded:
        continue
      instances += 1
      if ok == case["valid"]:
        agree += 1
        continue
      if case["valid"]:
        assert schema_suite.narrowing_reason(case["data"], check.schema_json), (path.name, case)
      else:
        assert schema_suite.known_gap(case["data"], check.schema_json), (path.name, case)
  assert supported >= PER_SUBSET // 3
  assert agree >= 0.9 * instances
