"""Where the engine's arrays live on a `jax.sharding.Mesh` ("data", "model"), or one device.

Axis letters (docs/CONTRACTS.md): B lanes, L layers, S cache capacity, G kv heads, H head dim.

The target's parameters are tensor parallel over "model" (`sharding.shard_state`), its KV
cache [L, B, S, G, H] has lanes on "data" and kv heads on "model" (`sharding.shard_cache`),
and every per-lane array the host hands the device ([B, ...]: tokens, lengths, masks, seeds,
sampling parameters) has its lanes on "data". An axis the mesh does not divide stays
replicated (`sharding.named_sharding`). A device drafter's parameters are replicated and its
KV caches placed like the target's. Jitted steps take their inputs as placed and GSPMD
propagates the rest: the round's only sharding code is the stages bridge placing host arrays
(`rows`). Inside the callback bridge's compiled loop, `io_callback` runs on the first device:
its small per-lane arrays are gathered there and spread again (XLA may warn about it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from infernix_jax.models import sharding
from infernix_jax.models.kv_cache import KVCache


@dataclasses.dataclass(frozen=True)
class Placement:
  """The engine's placement rules (hashable: part of the round's static facts).

  Attributes:
    mesh: a mesh with axes ("data", "model"), or None for one device.
    lanes: B, the engine's lane count (the leading axis of per-lane arrays).
  """

  mesh: Mesh | None
  lanes: int

  def __post_init__(self):
    if self.mesh is not None and set(self.mesh.axis_names) != {"data", "model"}:
      raise ValueError(f"mesh axes {self.mesh.axis_names} must be ('data', 'model'); build "
                       f"the mesh with sharding.parse_mesh or sharding.make_mesh")

  def target(self, state: Any, cfg: Any) -> Any:
    """The target's parameters, tensor parallel over "model" (stacked layout)."""
    if self.mesh is None:
      return state
    return sharding.shard_state(state, cfg, self.mesh)

  def cache(self, cache: Any) -> Any:
    """A KV cache [L, B, S, G, H]: lanes on "data", kv heads on "model"."""
    if self.mesh is None:
      return cache
    return sharding.shard_cache(cache, self.mesh)

  def drafter(self, params: Any, state: Any) -> tuple[Any, Any]:
    """A device drafter's (params, state): params replicated; KV caches in the state placed
    like the target's, its other arrays replicated."""
    if self.mesh is None:
      return params, state
    every = NamedSharding(self.mesh, PartitionSpec())
    params = jax.device_put(params, every) if params is not None else None
    state = jax.tree.map(
        lambda x: self.cache(x) if isinstance(x, KVCache) else jax.device_put(x, every),
        state, is_leaf=lambda x: isinstance(x, KVCache))
    return params, state

  def rows(self, tree: Any) -> Any:
    """Host arrays on the device as they are now (`host_copies`), per-lane ones ([B, ...])
    with lanes on "data".

    Without a mesh: `jax.device_put` of every numpy leaf (a transfer; `jnp.asarray` of a
    numpy array compiles a program per shape and dtype). With one: numpy leaves whose leading
    axis is B are split over "data" (replicated when the data size does not divide B), other
    numpy leaves (scalars, ...) are left to jit; device arrays are never moved.
    """
    def place(x):
      if not isinstance(x, (np.ndarray, np.generic)):
        return x
      if self.mesh is None:
        return jax.device_put(np.array(x))
      if x.ndim == 0 or x.shape[0] != self.lanes:
        return np.array(x)
      axes = ("batch",) + (None,) * (x.ndim - 1)
      return jax.device_put(np.array(x), sharding.named_sharding(axes, x.shape, self.mesh))

    return jax.tree.map(place, tree)


def host_copies(tree: Any) -> Any:
  """`tree` with each numpy array replaced by a copy, for handing to the device: arrays at
  the top, in tuples and lists, and in this package's dataclasses (`DraftInput`,
  `Proposal`, ...); other objects (parameter states, graph definitions) pass unwalked.

  On the CPU backend `jax.device_put` of a numpy array, and a jitted call given one, share
  its memory (`may_alias=False` too, jax 0.10), and the call runs later than it is
  dispatched: a host array written after the dispatch (the host's lengths at a commit, a
  mask buffer refilled the next round) would change what the device reads. Copies are
  never written again.
  """
  if isinstance(tree, np.ndarray):
    return np.array(tree)
  if type(tree) in (tuple, list):
    out = [host_copies(x) for x in tree]
    return tree if all(a is b for a, b in zip(out, tree)) else type(tree)(out)
  if dataclasses.is_dataclass(tree) and type(tree).__module__.startswith("infernix_jax."):
    changed = {}
    for field in dataclasses.fields(tree):
      if field.init:
        value = getattr(tree, field.name)
        copied = host_copies(value)
        if copied is not value:
          changed[field.name] = copied
    return dataclasses.replace(tree, **changed) if changed else tree
  return tree  # device arrays, parameter states, graph definitions, Python values


def upload(tree: Any, placement: Placement | None) -> Any:
  """Host arrays of `tree` on the device(s) as they are now: `placement.rows`, or without a
  placement `jax.device_put` of their copies (`host_copies`)."""
  if placement is not None:
    return placement.rows(tree)
  return jax.device_put(host_copies(tree))
