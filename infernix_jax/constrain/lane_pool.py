"""One thread pool for the host's per-lane matcher work.

xgrammar releases the GIL while it fills a mask, so lanes filled in threads run on several
cores: on a 2-core machine two threads filling the slowest masks of two JSONSchemaBench
schemas (90-96 ms each) took 1.5-1.7x less time than one thread filling both. Cheap masks do
not pay the hand-off (about 50 us a task), so callers use the pool only for work that can be
slow.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

_lock = threading.Lock()
_pools: dict[int, concurrent.futures.ThreadPoolExecutor] = {}


def default_threads() -> int:
  """Threads for lane work: the cores this process may use."""
  try:
    return max(1, len(os.sched_getaffinity(0)))
  except AttributeError:  # not on Linux
    return max(1, os.cpu_count() or 1)


def run_each(fn: Callable[[Any], Any], items: Sequence[Any], threads: int) -> list:
  """[fn(item) or the exception it raised] per item, in order, on up to `threads` threads
  (the calling thread alone when `threads` <= 1 or there is one item)."""
  if threads <= 1 or len(items) < 2:
    return [_call(fn, x) for x in items]
  with _lock:
    pool = _pools.get(threads)
    if pool is None:
      pool = _pools[threads] = concurrent.futures.ThreadPoolExecutor(
          max_workers=threads, thread_name_prefix="infernix-lanes")
  return list(pool.map(lambda x: _call(fn, x), items))


def _call(fn, x):
  try:
    return fn(x)
  except Exception as e:  # noqa: BLE001 (returned to the caller, which fails that lane alone)
    return e
