"""Suite-wide settings.

- The CLI's persistent compilation cache stays off inside tests (each test process compiles
  for itself; nothing is written under the user's home).
- Compiled programs are released between test modules once the process holds many memory
  maps (`compile_cache.release_if_crowded`): the whole suite in one process otherwise passes
  the kernel's vm.max_map_count, and the compile that fails there crashes the process.
"""

import os

import pytest

os.environ.setdefault("INFERNIX_JAX_COMPILE_CACHE", "")


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
  yield
  from infernix_jax.runtime import compile_cache

  compile_cache.release_if_crowded()
