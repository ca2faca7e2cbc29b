"""The README's Python examples run exactly as written (from the repository root)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def test_readme_has_examples():
  assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, monkeypatch):
  code = BLOCKS[index]
  if "../shared/data" in code and not (ROOT / "../shared/data").is_dir():
    pytest.skip("shared data not present")
  monkeypatch.chdir(ROOT)
  import sys
  import types
  module = types.ModuleType(f"readme_block_{index}")  # a real module: dataclasses look it up
  monkeypatch.setitem(sys.modules, module.__name__, module)
  exec(compile(code, f"README.md python block {index}", "exec"), module.__dict__)
