"""The decode state: what the device carries across rounds, and the one rule that commits.

Axis letters (docs/CONTRACTS.md): B lanes, P = K + 1 positions.

`DecodeState` owns each lane's committed KV length (in its cache), its anchor (the last
committed token, not yet in the cache), its output position and the drafter's state. The
host never holds a copy the device reads: its commit returns per-lane counts, and
`commit_lanes` applies them on the device (the round's commit on both bridges, the device
loop's own commit, and a forced close's append all go through it). Rolling back rejected
drafts is not adding them: a verify writes scratch entries past each lane's length and
leaves the length alone; only the committed counts raise it. `reset_lanes` is the one path
that sets lanes outright (admission, freed lanes).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DecodeState:
  """The device's state across rounds.

  Attributes:
    cache: the target's KVCache; `cache.lengths` i32[B] is each lane's committed KV length.
    anchor: i32[B] each lane's last committed token (the next verify's first position).
    position: i32[B] each lane's output position: the logical index of the next token a
      round produces (sampling keys are counters of it and the request seed).
    draft: the drafter's state (a pytree of arrays for a device drafter, per-lane host
      objects for a host drafter).
  """

  cache: Any
  anchor: Any
  position: Any
  draft: Any

  @classmethod
  def empty(cls, cache, draft) -> "DecodeState":
    """B free lanes over `cache` (lengths as the cache has them, anchors and positions 0)."""
    b = cache.lengths.shape  # two buffers: a compiled loop donates the state leaf by leaf
    return cls(cache=cache, anchor=jnp.zeros(b, jnp.int32), position=jnp.zeros(b, jnp.int32),
               draft=draft)


def commit_lanes(lengths, anchor, position, tokens, counts):
  """Each lane commits the first counts[b] of tokens[b]: its length and position grow by
  counts[b], its anchor becomes the last committed token (unchanged when counts[b] is 0).

  Args:
    lengths, anchor, position: i32[B] before the commit.
    tokens: i32[B, P] committed tokens, the first counts[b] real; counts: i32[B].

  Returns:
    (lengths, anchor, position) i32[B] after it.
  """
  counts = jnp.asarray(counts, jnp.int32)
  last = jnp.take_along_axis(jnp.asarray(tokens, jnp.int32),
                             jnp.maximum(counts - 1, 0)[:, None], axis=1)[:, 0]  # [B]
  return (lengths + counts, jnp.where(counts > 0, last, anchor).astype(jnp.int32),
          position + counts)


def reset_lanes(lengths, anchor, position, rows, new_lengths, new_anchor):
  """Lanes `rows` (bool[B]) start over: length and anchor set, output position 0 (admission
  of a prompt, or a freed lane's zeros); other lanes unchanged."""
  return (jnp.where(rows, new_lengths, lengths).astype(jnp.int32),
          jnp.where(rows, new_anchor, anchor).astype(jnp.int32),
          jnp.where(rows, 0, position).astype(jnp.int32))


def _with_anchors(tokens, anchor, rows):
  """tokens i32[B, T] with column 0 of lanes `rows` (bool[B]) set to their anchors."""
  return tokens.at[:, 0].set(jnp.where(rows, anchor, tokens[:, 0]))


_COMMIT = jax.jit(commit_lanes)
_RESET = jax.jit(reset_lanes)
with_anchors = jax.jit(_with_anchors)


def commit(ds: DecodeState, tokens, counts, *, jit: bool = True, cache=None) -> DecodeState:
  """`commit_lanes` over a DecodeState (`jit`: one small dispatch; False: traced inline).
  `cache` (default `ds.cache`) is the cache the commit starts from and goes into: the
  round's verified one (a verify leaves lengths as they were and donates its input)."""
  cache = ds.cache if cache is None else cache
  fn = _COMMIT if jit else commit_lanes
  lengths, anchor, position = fn(cache.lengths, ds.anchor, ds.position, tokens, counts)
  return DecodeState(cache.with_lengths(lengths), anchor, position, ds.draft)


def reset(ds: DecodeState, rows, lengths, anchor, cache=None) -> DecodeState:
  """`reset_lanes` over a DecodeState (`cache`, default `ds.cache`: the cache it starts from
  and goes into, e.g. an admission's prefill, which donated the state's own)."""
  cache = ds.cache if cache is None else cache
  lengths, anchor, position = _RESET(cache.lengths, ds.anchor, ds.position, rows, lengths,
                                     anchor)
  return DecodeState(cache.with_lengths(lengths), anchor, position, ds.draft)
