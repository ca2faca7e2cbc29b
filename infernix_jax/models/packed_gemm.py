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

The kernel is built and registered by `cpu_kernels`; without it (`cpu_kernels.available()`
False) models keep their weights unpacked.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from infernix_jax.models import cpu_kernels

PANEL_WIDTHS = (64, 32, 16)  # preferred first
KERNEL_MAX_ROWS = 48  # more rows: XLA's dot (the product is then compute-bound)


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
  at most `KERNEL_MAX_ROWS` rows when `cpu_kernels.available()`, else `matmul_reference`."""
  p, k, c = wp.shape
  if x.shape[-1] != k:
    raise ValueError(f"{x.shape=} must end in K={k} (packed weights {wp.shape})")
  rows = int(np.prod(x.shape[:-1]))
  if rows > KERNEL_MAX_ROWS or x.dtype != jnp.float32 or wp.dtype != jnp.float32 \
      or not cpu_kernels.available():
    return matmul_reference(x, wp)
  out = jax.ShapeDtypeStruct((*x.shape[:-1], p * c), jnp.float32)
  return jax.ffi.ffi_call(cpu_kernels.PACKED_GEMM, out, vmap_method="sequential")(x, wp)
