"""The constraint demo CLI: compiles, walks, prints mask statistics and a valid sample."""

from __future__ import annotations

import json

import pytest

from infernix_jax.constrain import demo
from tests.constrain.conftest import QWEN3_DIR


def test_demo_json_schema_on_qwen3(tmp_path, capsys):
  if not (QWEN3_DIR / "tokenizer.json").exists():
    pytest.skip("shared data (Qwen3 tokenizer) not present")
  schema = tmp_path / "s.json"
  schema.write_text(json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}},
                                "required": ["ok"], "additionalProperties": False}))
  assert demo.main(["--vocab", "qwen3", "--json-schema", str(schema), "--samples", "2"]) == 0
  out = capsys.readouterr().out
  assert "compile built" in out and "then hit" in out and "W=4740 words" in out
  assert out.count("(valid JSON)") == 2


def test_demo_reports_constraint_errors(capsys):
  if not (QWEN3_DIR / "tokenizer.json").exists():
    pytest.skip("shared data (Qwen3 tokenizer) not present")
  assert demo.main(["--vocab", "qwen3", "--regex", "(?=a)"]) == 2
  assert "RegexError" in capsys.readouterr().err
