"""JAX's persistent compilation cache, on by default for the CLI and the benchmarks.

The unrolled layer layout compiles each model step in seconds on CPU; with the cache a
second run of the same shapes loads the executables instead (measured on SmolLM2: 6.0 s ->
0.7 s for the first decode call).
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "INFERNIX_JAX_COMPILE_CACHE"  # overrides the default directory; "" disables the cache


def default_directory() -> str:
  """$INFERNIX_JAX_COMPILE_CACHE, else ~/.cache/infernix_jax/xla ("" when disabled)."""
  if ENV in os.environ:
    return os.environ[ENV]
  return str(Path.home() / ".cache" / "infernix_jax" / "xla")


def enable(directory: str | None = None) -> str | None:
  """Points JAX's persistent compilation cache at `directory` (default: `default_directory()`).

  Only compilations slower than half a second are stored. Returns the directory in use, or
  None when disabled (an empty string).
  """
  import jax  # pylint: disable=import-outside-toplevel

  directory = default_directory() if directory is None else directory
  if not directory:
    return None
  Path(directory).mkdir(parents=True, exist_ok=True)
  jax.config.update("jax_compilation_cache_dir", directory)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  return directory


_MAPS = Path("/proc/self/maps")
_MAX_MAPS = Path("/proc/sys/vm/max_map_count")


def map_pressure() -> float:
  """This process's memory maps / the kernel's vm.max_map_count (0 where /proc does not say).

  XLA:CPU maps memory for every live executable. A long process that compiles many programs
  (a test suite, a study sweep over engines) can reach the limit; the next compile then
  fails, and the C++ exception that reports it crashes in the unwinder (a hang or an abort).
  """
  try:
    with _MAPS.open() as f:
      held = sum(1 for _ in f)
    return held / int(_MAX_MAPS.read_text())
  except (OSError, ValueError):
    return 0.0


_releases = 0  # how many times `release_if_crowded` dropped the compiled programs


def releases() -> int:
  """How many times this process dropped its compiled programs (`release_if_crowded`): what
  was warmed up before a change of this count compiles again."""
  return _releases


def release_if_crowded(threshold: float = 0.4) -> bool:
  """Drops every cached compiled program (`jax.clear_caches`) when `map_pressure()` is above
  `threshold`; returns whether it did. Later calls recompile (or load from the persistent
  cache)."""
  global _releases
  if map_pressure() <= threshold:
    return False
  import gc

  import jax  # pylint: disable=import-outside-toplevel

  jax.clear_caches()
  gc.collect()
  _releases += 1
  return True
