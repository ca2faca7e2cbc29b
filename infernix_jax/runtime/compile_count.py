"""Counts XLA compilations inside a `with` block (JAX's backend-compile monitoring events).

Timed studies and benchmarks wrap their warm-up and their measured part each in `counting()`
and report both counts: a measured part that compiles is timing the compiler.

    with compile_count.counting() as warm:
      engine.warmup()
    with compile_count.counting() as timed:
      engine.generate(requests)
    record.update(timed.record(), **warm.record("warmup_"))  # xla_compiles, xla_compile_s ...
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from typing import Iterator

__all__ = ["BACKEND_COMPILE_EVENT", "CompileCount", "counting"]

# Recorded (with its duration) around every XLA backend compile, including executables
# loaded from the persistent compilation cache (jax._src.dispatch.BACKEND_COMPILE_EVENT).
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"  # inside a backend compile: a load


@dataclasses.dataclass(eq=False)  # blocks are told apart by identity
class CompileCount:
  """The backend compilations of one `counting()` block.

  Attributes:
    compiles: compilations (executables built or loaded from the persistent cache).
    seconds: their summed duration.
    loaded: how many of them the persistent compilation cache answered.
    names: the compiled functions' names, in order (what a warm-up left out).
  """

  compiles: int = 0
  seconds: float = 0.0
  loaded: int = 0
  names: list[str] = dataclasses.field(default_factory=list)

  def __add__(self, other: "CompileCount") -> "CompileCount":
    return CompileCount(self.compiles + other.compiles, self.seconds + other.seconds,
                        self.loaded + other.loaded, self.names + other.names)

  def record(self, prefix: str = "") -> dict:
    """{prefix + "xla_compiles": n, prefix + "xla_compile_s": seconds}, for a result record
    ("xla_": records already use compile_s for a grammar's compile time)."""
    return {f"{prefix}xla_compiles": self.compiles,
            f"{prefix}xla_compile_s": round(self.seconds, 4)}


_LOCK = threading.Lock()
_ACTIVE: list[CompileCount] = []  # the open blocks (nested or from several threads)


def _on_duration(event: str, duration: float, **kwargs) -> None:
  if event != BACKEND_COMPILE_EVENT:
    return
  name = str(kwargs.get("fun_name", "?"))
  with _LOCK:
    for count in _ACTIVE:
      count.compiles += 1
      count.seconds += duration
      count.names.append(name)


def _on_event(event: str, **kwargs) -> None:
  del kwargs
  if event != CACHE_HIT_EVENT:
    return
  with _LOCK:
    for count in _ACTIVE:
      count.loaded += 1


@contextlib.contextmanager
def counting() -> Iterator[CompileCount]:
  """Counts the process's backend compilations while the block runs (every thread's: a
  server's scheduler compiling meanwhile counts too).

  JAX's listeners are registered when the first block opens and unregistered when the last
  one closes, so nothing stays installed outside the blocks. Nested blocks each count.
  """
  import jax  # pylint: disable=import-outside-toplevel

  count = CompileCount()
  with _LOCK:
    if not _ACTIVE:
      jax.monitoring.register_event_duration_secs_listener(_on_duration)
      jax.monitoring.register_event_listener(_on_event)
    _ACTIVE.append(count)
  try:
    yield count
  finally:
    with _LOCK:
      _ACTIVE.remove(count)
      if not _ACTIVE:
        jax.monitoring.unregister_event_duration_listener(_on_duration)
        jax.monitoring.unregister_event_listener(_on_event)
