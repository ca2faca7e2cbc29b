"""Logical axes of parameters and caches, mapped onto a (data, model) `jax.sharding.Mesh`.

Every parameter dimension carries a logical name (vocab, embed, q_heads, kv_heads, mlp,
layers); `rules` map names to mesh axes. A dimension that the mesh axis does not divide
stays replicated, so any mesh shape works with any model (it is then just less sharded).
"""

from __future__ import annotations

from typing import Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from infernix_jax.models import _convert, _layers
from infernix_jax.models.config import ModelConfig
from infernix_jax.models.kv_cache import KVCache

# Megatron-style tensor parallelism on "model", batch parallelism on "data".
DEFAULT_RULES: tuple[tuple[str, str | None], ...] = (
    ("batch", "data"), ("vocab", "model"), ("q_heads", "model"), ("kv_heads", "model"),
    ("mlp", "model"), ("embed", None), ("layers", None), ("seq", None), ("head_dim", None),
)
CACHE_AXES = ("layers", "batch", "seq", "kv_heads", "head_dim")  # k and v: [L, B, S, G, H]


def make_mesh(data: int = 1, model: int | None = None, devices: Sequence | None = None) -> Mesh:
  """A 2-D mesh with axes ("data", "model"); `model` defaults to the remaining devices."""
  devices = list(devices if devices is not None else jax.devices())
  model = model or len(devices) // data
  if data * model > len(devices):
    raise ValueError(f"mesh {data}x{model} needs {data * model} devices, have {len(devices)}")
  grid = np.array(devices[:data * model]).reshape(data, model)
  return Mesh(grid, ("data", "model"))


def param_axes(cfg: ModelConfig) -> dict:
  """Logical axis names of every parameter, shaped like `nnx.to_pure_dict(state)`."""
  axes = {"embed": ("vocab", "embed"), "final_norm": ("embed",),
          "layers": {name: ("layers", *_layers.LAYER_PARAM_AXES[name])
                     for name in _layers.layer_param_shapes(cfg)}}
  if not cfg.tie_embeddings:
    axes["lm_head"] = ("embed", "vocab")
  return axes


def named_sharding(axes: Sequence[str | None], shape: Sequence[int], mesh: Mesh,
                   rules=DEFAULT_RULES) -> NamedSharding:
  """Sharding of one array from its logical axes (non-dividing mesh axes are dropped)."""
  table = dict(rules)
  spec = []
  used = set()
  for name, size in zip(axes, shape):
    mesh_axis = table.get(name) if name else None
    if mesh_axis is None or mesh_axis in used or size % mesh.shape[mesh_axis]:
      spec.append(None)
    else:
      spec.append(mesh_axis)
      used.add(mesh_axis)
  return NamedSharding(mesh, PartitionSpec(*spec))


def shard_state(state: nnx.State, cfg: ModelConfig, mesh: Mesh, rules=DEFAULT_RULES):
  """Places model parameters on the mesh; returns the sharded state (input is unchanged)."""
  pure = nnx.to_pure_dict(state)
  axes = param_axes(cfg)
  placed = jax.tree.map(
      lambda x, a: jax.device_put(x, named_sharding(a, x.shape, mesh, rules)), pure, axes)
  _, out = nnx.split(_convert.abstract_model(cfg))  # fresh container, same structure
  nnx.replace_by_pure_dict(out, placed)
  return out


def shard_cache(cache: KVCache, mesh: Mesh, rules=DEFAULT_RULES) -> KVCache:
  """Places a KV cache on the mesh: rows on "data", kv heads on "model" when they divide."""
  kv = named_sharding(CACHE_AXES, cache.k.shape, mesh, rules)
  rows = named_sharding(("batch",), cache.lengths.shape, mesh, rules)
  return KVCache(k=jax.device_put(cache.k, kv), v=jax.device_put(cache.v, kv),
                 lengths=jax.device_put(cache.lengths, rows))
