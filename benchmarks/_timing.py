"""Pieces the benchmarks share: medians of repeated calls, the GEMV bandwidth, the machine's
description."""

from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path

GEMV_SHAPE = (8192, 13824)  # f32: 453 MB, far above every cache


def median_ms(fn, repeats: int, warmup: int = 2) -> float:
  """Median wall milliseconds of fn() (which must block until its result is ready)."""
  for _ in range(warmup):
    fn()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return 1e3 * statistics.median(times)


def gemv_bandwidth(repeats: int) -> float:
  """Bytes/s of a jitted f32 matrix-vector product streaming GEMV_SHAPE (median of calls)."""
  import jax
  import jax.numpy as jnp
  a = jnp.full(GEMV_SHAPE, 0.5, jnp.float32)
  x = jnp.ones((GEMV_SHAPE[1],), jnp.float32)
  gemv = jax.jit(lambda a, x: a @ x)
  return a.nbytes / median_ms(lambda: gemv(a, x).block_until_ready(), repeats, warmup=1) * 1e3


def machine() -> str:
  """'<CPU model>, <n> logical cores' (the model from /proc/cpuinfo where there is one, else
  the platform's processor name)."""
  model = platform.processor() or platform.machine() or "unknown CPU"
  try:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith("model name"):
        model = line.split(":", 1)[1].strip()
        break
  except OSError:
    pass
  return f"{model}, {os.cpu_count()} logical cores"
