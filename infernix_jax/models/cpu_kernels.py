"""The CPU kernels of the models: compiled from their C++ sources, registered with XLA.

Two XLA custom calls (`jax.ffi`) for the few rows of decode and verify steps, where XLA's
CPU code pays a copy of its operands before the work:
  `PACKED_GEMM`     x [..., K] @ a weight stored as column panels (`packed_gemm`);
  `SPAN_ATTENTION`  grouped-query attention of a few rows over a cache span (`layers.attention`).

Both sources are compiled on first use, into one library, with the system's C++ compiler
(`-O3 -march=native`) in the kernel directory (`INFERNIX_JAX_KERNEL_DIR`, default
`~/.cache/infernix_jax/kernels`), keyed by the sources, the flags, the compiler, jaxlib's
version and this CPU's feature flags. Whether they run is the dispatch table's choice for
this device kind (`pallas.dispatch`, op "cpu_kernels": measured faster on CPU), overridden
by `INFERNIX_JAX_CPU_KERNELS=0` and inside `disabled()`; without a compiler, or on a device
the table does not list, `available()` is False and the models use XLA's own ops.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

import jax

from infernix_jax.pallas import dispatch

ENV_OFF = "INFERNIX_JAX_CPU_KERNELS"
ENV_DIR = "INFERNIX_JAX_KERNEL_DIR"
PACKED_GEMM = "infernix_packed_gemm"
SPAN_ATTENTION = "infernix_span_attention"
_HANDLERS = {PACKED_GEMM: "InfernixPackedGemm", SPAN_ATTENTION: "InfernixSpanAttention"}
_SOURCES = tuple(Path(__file__).with_name(name)
                 for name in ("_packed_gemm.cc", "_span_attention.cc"))
_FLAGS = ("-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-w")


def kernel_dir() -> Path:
  """Where compiled kernels are kept (`INFERNIX_JAX_KERNEL_DIR`, else the user cache)."""
  return Path(os.environ.get(ENV_DIR) or Path.home() / ".cache/infernix_jax/kernels")


def _cpu_flags() -> str:
  try:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith(("flags", "Features")):
        return line
  except OSError:
    pass
  return platform.processor()


def _library_name(compiler: str) -> str:
  key = hashlib.sha256()
  for part in (*(source.read_bytes() for source in _SOURCES), " ".join(_FLAGS).encode(),
               compiler.encode(), jax.__version__.encode(), platform.machine().encode(),
               _cpu_flags().encode()):
    key.update(part)
  return f"cpu_kernels_{key.hexdigest()[:16]}.so"


def _build() -> Path:
  """Compiles the kernels unless this version is already there; returns the library path."""
  compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
  if compiler is None:
    raise RuntimeError("no C++ compiler (c++ or g++ on PATH, or CXX)")
  target = kernel_dir() / _library_name(compiler)
  if target.exists():
    return target
  target.parent.mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
    built = Path(tmp) / target.name
    cmd = [compiler, *_FLAGS, f"-I{jax.ffi.include_dir()}", *map(str, _SOURCES), "-o",
           str(built)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
      raise RuntimeError(f"compiling the CPU kernels failed ({' '.join(cmd)}):\n{run.stderr}")
    os.replace(built, target)  # atomic: concurrent builders leave one complete file
  return target


_disabled = 0  # depth of `disabled()` contexts


def available() -> bool:
  """Whether the models use the kernels: the dispatch table says so for this device kind
  (`dispatch.choose("cpu_kernels")`, after the overrides: `INFERNIX_JAX_CPU_KERNELS=0`, or
  inside `disabled()`), and they are compiled, loaded and registered with XLA's CPU backend
  (built once per process). Callers decide when they trace: a jitted function keeps its
  choice."""
  return dispatch.choose("cpu_kernels", impl=_override()) == "kernel" and _loaded()


def _override() -> str | None:
  """'reference' (XLA's own ops) inside `disabled()` or with INFERNIX_JAX_CPU_KERNELS=0;
  None: the dispatch table decides."""
  if _disabled or os.environ.get(ENV_OFF, "1") == "0":
    return "reference"
  return None


@contextlib.contextmanager
def disabled():
  """Functions traced inside use XLA's own ops (benchmarks time the kernels against them)."""
  global _disabled
  _disabled += 1
  try:
    yield
  finally:
    _disabled -= 1


@functools.cache
def _loaded() -> bool:
  if jax.default_backend() != "cpu":
    return False
  try:
    library = ctypes.cdll.LoadLibrary(str(_build()))
  except (OSError, RuntimeError) as err:
    warnings.warn(f"CPU kernels unavailable, using XLA's own ops: {err}", stacklevel=2)
    return False
  for target, symbol in _HANDLERS.items():
    jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(library, symbol)),
                                platform="cpu")
  return True
