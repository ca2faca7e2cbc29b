"""Counter-based randomness: a hash of (seed, position, purpose, counter), no row index.

Every draw is a pure function of the request's seed, the logical position of the token, the
purpose of the stream and a counter (the token id for Gumbel noise, ``ACCEPT_COUNTER`` for the
acceptance uniform). A row moving between lanes never changes its stream, and masks,
rollback and compilation consume nothing. Only 32-bit integer ops, so the same code runs in
jnp and inside Pallas kernels.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

ACCEPT_COUNTER = 0xFFFFFFFF  # counter of the acceptance uniform (never a token id)
_GOLDEN = np.uint32(0x9E3779B9)


def _mix32(x):
  """lowbias32 (C. Wellons): a bijective uint32 avalanche mix."""
  x = x ^ jax.lax.shift_right_logical(x, np.uint32(16))
  x = x * np.uint32(0x7FEB352D)
  x = x ^ jax.lax.shift_right_logical(x, np.uint32(15))
  x = x * np.uint32(0x846CA68B)
  return x ^ jax.lax.shift_right_logical(x, np.uint32(16))


def stream_key(seed, position, purpose):
  """uint32 key of the stream (seed u32, position i32, purpose int); broadcasts."""
  seed = jnp.asarray(seed).astype(jnp.uint32)
  pos = jax.lax.bitcast_convert_type(jnp.asarray(position, jnp.int32), jnp.uint32)
  h = _mix32(seed ^ np.uint32(0x243F6A88))
  h = _mix32(h ^ pos)
  return _mix32(h + np.uint32((int(purpose) * 0x85EBCA6B + 1) & 0xFFFFFFFF))


def random_bits(key, counter):
  """uint32 bits for ``counter`` (uint32 or non-negative int32) in stream ``key``."""
  c = counter.astype(jnp.uint32) if counter.dtype != jnp.uint32 else counter
  # For a fixed key, distinct counters give distinct inputs to a bijection: no collisions.
  return _mix32(_mix32(key + c * _GOLDEN) ^ key)


def small_uniform(bits):
  """f32 in (0, 1) from uint32 bits, with full relative precision near 0.

  Built from two exact 16-bit halves so no unsigned-to-float conversion is needed; values
  near 1 are clamped below 1.
  """
  hi = jax.lax.shift_right_logical(bits, np.uint32(16)).astype(jnp.int32).astype(jnp.float32)
  lo = (bits & np.uint32(0xFFFF)).astype(jnp.int32).astype(jnp.float32)
  s = (hi * 65536.0 + (lo + 0.5)) * (2.0 ** -32)
  return jnp.minimum(s, 1.0 - 2.0 ** -24)


def gumbel(bits):
  """Standard Gumbel noise from uint32 bits: -log(E) with E = -log1p(-s) ~ Exp(1).

  The winners of a Gumbel-max draw have small E, i.e. small s, where ``small_uniform`` keeps
  full precision.
  """
  return -jnp.log(-jnp.log1p(-small_uniform(bits)))


def uniform(seed, position, purpose, counter=ACCEPT_COUNTER):
  """A uniform (0, 1) f32 draw for (seed, position, purpose, counter); broadcasts."""
  key = stream_key(seed, position, purpose)
  return small_uniform(random_bits(key, jnp.asarray(counter, jnp.uint32)))
