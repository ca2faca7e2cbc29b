"""Products with panel-packed weights: a CPU kernel for the few rows of decoding and verifying.

Axis letters (docs/CONTRACTS.md), plus C = columns per panel (16, 32 or 64).

A weight W [K, N] is stored as panels Wp [N / C, K, C] (`pack`): the C columns of a panel
are contiguous for every k, so one panel streams from memory in one pass. `matmul(x, Wp)`
runs `_packed_gemm.cc` (an XLA custom call through `jax.ffi`) for up to `KERNEL_MAX_ROWS`
rows and XLA's own dot over the packed array above that (prefill). At the row counts of a
decode (1) or a verify (K + 1, lanes x (K + 1)) XLA's CPU dot repacks the weight of every
product with more than one row, a second pass over every byte; the kernel reads each weight
once for up to six rows (measured by `benchmarks/roofline.py`).

Every row of the kernel's product is the same chain of fused multiply-adds whatever the row
count: a verify's rows equal the decodes of the same inputs bit for bit.

The kernel is compiled from its C++ source on first use with the system's C++ compiler
(`-O3 -march=native`) into the kernel directory (`INFERNIX_JAX_KERNEL_DIR`, default
`~/.cache/infernix_jax/kernels`), keyed by the source, the compiler flags, jaxlib's version
and this CPU's feature flags. Without a compiler, off CPU, or with
`INFERNIX_JAX_PACKED_GEMM=0`, `available()` is False and models keep their weights unpacked.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

PANEL_WIDTHS = (64, 32, 16)  # preferred first
KERNEL_MAX_ROWS = 48  # more rows: XLA's dot (the product is then compute-bound)
ENV_OFF = "INFERNIX_JAX_PACKED_GEMM"
ENV_DIR = "INFERNIX_JAX_KERNEL_DIR"
TARGET = "infernix_packed_gemm"
_SOURCE = Path(__file__).with_name("_packed_gemm.cc")
_FLAGS = ("-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-w")


def panel_width(n: int) -> int | None:
  """The panel width C for N output columns (the widest that divides N), or None."""
  return next((c for c in PANEL_WIDTHS if n % c == 0), None)


def pack(w: np.ndarray) -> np.ndarray:
  """W [K, N] -> panels [N / C, K, C] (C = `panel_width(N)`; N must have one)."""
  k, n = w.shape
  c = panel_width(n)
  if c is None:
    raise ValueError(f"{w.shape=}: N={n} must be a multiple of one of {PANEL_WIDTHS}")
  return np.ascontiguousarray(np.asarray(w).reshape(k, n // c, c).transpose(1, 0, 2))


def unpack(wp: np.ndarray) -> np.ndarray:
  """Panels [N / C, K, C] -> W [K, N]."""
  p, k, c = wp.shape
  return np.ascontiguousarray(np.asarray(wp).transpose(1, 0, 2).reshape(k, p * c))


def matmul_reference(x: jax.Array, wp: jax.Array) -> jax.Array:
  """x [..., K] @ the weight packed in wp [N / C, K, C] -> [..., N], with XLA's dot."""
  p, _, c = wp.shape
  y = jnp.einsum("...K,PKC->...PC", x, wp)  # [..., N / C, C]
  return y.reshape(*x.shape[:-1], p * c)


def matmul(x: jax.Array, wp: jax.Array) -> jax.Array:
  """x f32[..., K] @ the weight packed in wp f32[N / C, K, C] -> f32[..., N]: the kernel for
  at most `KERNEL_MAX_ROWS` rows when `available()`, else `matmul_reference`."""
  p, k, c = wp.shape
  if x.shape[-1] != k:
    raise ValueError(f"{x.shape=} must end in K={k} (packed weights {wp.shape})")
  rows = int(np.prod(x.shape[:-1]))
  if rows > KERNEL_MAX_ROWS or x.dtype != jnp.float32 or wp.dtype != jnp.float32 \
      or not available():
    return matmul_reference(x, wp)
  out = jax.ShapeDtypeStruct((*x.shape[:-1], p * c), jnp.float32)
  return jax.ffi.ffi_call(TARGET, out, vmap_method="sequential")(x, wp)


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
  for part in (_SOURCE.read_bytes(), " ".join(_FLAGS).encode(), compiler.encode(),
               jax.__version__.encode(), platform.machine().encode(), _cpu_flags().encode()):
    key.update(part)
  return f"packed_gemm_{key.hexdigest()[:16]}.so"


def _build() -> Path:
  """Compiles the kernel unless this version is already there; returns the library path."""
  compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
  if compiler is None:
    raise RuntimeError("no C++ compiler (c++ or g++ on PATH, or CXX)")
  target = kernel_dir() / _library_name(compiler)
  if target.exists():
    return target
  target.parent.mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
    built = Path(tmp) / target.name
    cmd = [compiler, *_FLAGS, f"-I{jax.ffi.include_dir()}", str(_SOURCE), "-o", str(built)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
      raise RuntimeError(f"compiling {_SOURCE.name} failed ({' '.join(cmd)}):\n{run.stderr}")
    os.replace(built, target)  # atomic: concurrent builders leave one complete file
  return target


@functools.cache
def available() -> bool:
  """Whether the kernel is compiled, loaded and registered with XLA's CPU backend (once per
  process; False when switched off, off CPU or when it cannot be built)."""
  if os.environ.get(ENV_OFF, "1") == "0" or jax.default_backend() != "cpu":
    return False
  try:
    library = ctypes.cdll.LoadLibrary(str(_build()))
  except (OSError, RuntimeError) as err:
    import warnings
    warnings.warn(f"packed-weight kernel unavailable, using XLA's dot: {err}", stacklevel=2)
    return False
  jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(library.InfernixPackedGemm),
                              platform="cpu")
  return True
