"""Device steps outside a round: prefill of admitted prompts or forced closes, lane clearing.

Axis letters (docs/CONTRACTS.md): B lanes, T appended tokens (a padded bucket), D model width,
S cache capacity. The round's own steps live in `_round`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from infernix_jax.runtime import _deps

__all__ = ["append_rows", "append_tokens", "bucket", "clear_rows"]


@functools.partial(jax.jit, static_argnames=("graphdef", "span", "taps"),
                   donate_argnames=("cache",))
def append_tokens(graphdef, state, cache, tokens, counts, span=None, taps=None):
  """Appends right-padded tokens to the cache: lane b takes tokens[b, :counts[b]] at its
  current length (0 = untouched). One compiled program per [B, T] (its chunks inlined), so
  `Engine.warmup` compiles it ahead of time and nothing around it compiles eagerly.

  Args:
    cache: the lanes' cache with lengths set to where each lane's tokens go.
    tokens: i32[B, T] (T a padded bucket); counts: i32[B].
    span: static; attention reads the first `span` cache positions (every lane's length + T
      must fit); None: the whole capacity.
    taps: static; the target layers whose outputs form `hidden` (a drafter's
      `feature_taps`, [B, T, D * len(taps)]); None: the last layer.

  Returns:
    (hidden [B, T, D] -- hidden[b, j] is the state after tokens[b, j], which predicts the
    token after it -- and the cache with lengths advanced by counts).
  """
  _, hidden, cache = _deps.prefill(graphdef, state, cache, tokens, counts, span=span,
                                   taps=taps)
  return hidden, cache


@functools.partial(jax.jit, static_argnames=("graphdef", "lanes", "taps"),
                   donate_argnames=("cache",))
def append_rows(graphdef, state, cache, rows, tokens, counts, *, lanes: int, taps=None):
  """`append_tokens` for a few lanes only: rows i32[R] (R <= B lanes; a repeated row must
  repeat its tokens and count) take tokens [R, T] / counts i32[R], each at length 0. Only
  those rows are computed; their cache rows are gathered, filled and written back in place.
  The rows start empty, so attention reads only their first T positions, not the capacity.

  Returns:
    (hidden [B, T, D], zero outside `rows`, and the cache with those rows' lengths = counts;
    other lanes' entries and lengths are unchanged).
  """
  sub = type(cache)(k=cache.k[:, rows], v=cache.v[:, rows],
                    lengths=jnp.zeros(rows.shape, jnp.int32))
  hidden, sub = append_tokens(graphdef, state, sub, tokens, counts, span=tokens.shape[1],
                              taps=taps)
  full = jnp.zeros((lanes, *hidden.shape[1:]), hidden.dtype).at[rows].set(hidden)
  return full, type(cache)(k=cache.k.at[:, rows].set(sub.k), v=cache.v.at[:, rows].set(sub.v),
                           lengths=cache.lengths.at[rows].set(sub.lengths))


@functools.partial(jax.jit, donate_argnames=("cache",))
def clear_rows(cache, rows):
  """Zeros the keys/values of lanes `rows` (bool[B]) of a KVCache-like pytree."""
  keep = ~rows[None, :, None, None, None]
  return type(cache)(k=jnp.where(keep, cache.k, 0), v=jnp.where(keep, cache.v, 0),
                     lengths=cache.lengths)


def bucket(n: int, minimum: int = 16) -> int:
  """The padded length for n tokens: powers of two (few compiles)."""
  size = minimum
  while size < n:
    size *= 2
  return size
