"""Compiled programs: released when the process's memory maps crowd the kernel's limit."""

import jax
import jax.numpy as jnp

from infernix_jax.runtime import compile_cache


def test_compiled_programs_are_released_when_maps_crowd():
  """A process near vm.max_map_count drops its cached executables (they recompile)."""
  f = jax.jit(lambda x: x * 3 + 1)
  assert int(f(jnp.int32(2))) == 7
  assert 0 < compile_cache.map_pressure() < 1
  assert f._cache_size() == 1
  assert not compile_cache.release_if_crowded(threshold=1.0)
  assert f._cache_size() == 1
  assert compile_cache.release_if_crowded(threshold=0.0)
  assert f._cache_size() == 0
  assert int(f(jnp.int32(3))) == 10
