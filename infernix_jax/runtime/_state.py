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

A commit may also wait in the state (`pending`: each lane's count and last committed token):
the stages bridge hands the host's counts to the next round's forward phase, which applies
them (`settle_lanes`, the same rule) before it verifies, so the commit costs no dispatch of its
own. Everything else that reads or sets lanes settles first (`settle`); `commit` and `reset`
refuse a state with a commit waiting.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


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
    pending: None, or a commit not yet applied to the fields above: (last i32[B, 1] each
      lane's last committed token, counts i32[B]); `settle` applies it.
  """

  cache: Any
  anchor: Any
  position: Any
  draft: Any
  pending: Any = None

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
                             jnp.maximum(counts - 1, 0)[:, None], axis=1)  # [B, 1]
  return settle_lanes(lengths, anchor, position, last, counts)


def settle_lanes(lengths, anchor, position, last, counts):
  """`commit_lanes` from each lane's last committed token: last i32[B, 1] (read where
  counts[b] > 0), counts i32[B]. -1 tokens read as 0 (a failed lane's; never committed)."""
  counts = jnp.asarray(counts, jnp.int32)
  last = jnp.maximum(jnp.asarray(last, jnp.int32)[:, 0], 0)
  return (lengths + counts, jnp.where(counts > 0, last, anchor).astype(jnp.int32),
          position + counts)


def last_committed(tokens, counts):
  """Host side: i32[B, 1] each lane's last committed token (0 where counts[b] is 0), from the
  host commit's tokens [B, P] and counts [B] (numpy): a pending commit's `last`."""
  tokens, counts = np.asarray(tokens, np.int32), np.asarray(counts, np.int32)
  last = np.take_along_axis(tokens, np.maximum(counts - 1, 0)[:, None], axis=1)
  return np.where(counts[:, None] > 0, last, 0).astype(np.int32)


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
_SETTLE = jax.jit(settle_lanes)
_RESET = jax.jit(reset_lanes)
with_anchors = jax.jit(_with_anchors)


def _settled(ds: DecodeState, what: str) -> None:
  if ds.pending is not None:
    raise ValueError(f"{what}: the DecodeState has a commit waiting; settle() it first")


def settle(ds: DecodeState, *, jit: bool = True) -> DecodeState:
  """The state with its waiting commit applied (`settle_lanes`; `jit`: one small dispatch,
  False: traced inline); unchanged when none waits."""
  if ds.pending is None:
    return ds
  fn = _SETTLE if jit else settle_lanes
  lengths, anchor, position = fn(ds.cache.lengths, ds.anchor, ds.position, *ds.pending)
  return DecodeState(ds.cache.with_lengths(lengths), anchor, position, ds.draft)


def defer(ds: DecodeState, last, counts) -> DecodeState:
  """The state with the commit (last i32[B, 1], counts i32[B]) left for the next forward
  phase (or `settle`) to apply."""
  _settled(ds, "defer")
  return dataclasses.replace(ds, pending=(last, counts))


def commit(ds: DecodeState, tokens, counts, *, jit: bool = True, cache=None) -> DecodeState:
  """`commit_lanes` over a DecodeState (`jit`: one small dispatch; False: traced inline).
  `cache` (default `ds.cache`) is the cache the commit starts from and goes into: the
  round's verified one (a verify leaves lengths as they were and donates its input)."""
  _settled(ds, "commit")
  cache = ds.cache if cache is None else cache
  fn = _COMMIT if jit else commit_lanes
  lengths, anchor, position = fn(cache.lengths, ds.anchor, ds.position, tokens, counts)
  return DecodeState(cache.with_lengths(lengths), anchor, position, ds.draft)


def reset(ds: DecodeState, rows, lengths, anchor, cache=None) -> DecodeState:
  """`reset_lanes` over a DecodeState (`cache`, default `ds.cache`: the cache it starts from
  and goes into, e.g. an admission's prefill, which donated the state's own)."""
  _settled(ds, "reset")
  cache = ds.cache if cache is None else cache
  lengths, anchor, position = _RESET(cache.lengths, ds.anchor, ds.position, rows, lengths,
                                     anchor)
  return DecodeState(cache.with_lengths(lengths), anchor, position, ds.draft)
