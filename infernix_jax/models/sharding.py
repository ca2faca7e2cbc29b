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

from infernix_jax.models import _convert, layers
from infernix_jax.models.config import ModelConfig
from infernix_jax.models.kv_cache import KVCache

# Megatron-style tensor parallelism on "model", batch parallelism on "data".
DEFAULT_RULES: tuple[tuple[str, str | None], ...] = (
    ("batch", "data"), ("vocab", "model"), ("q_heads", "model"), ("kv_heads", "model"),
    ("mlp", "model"), ("embed", None), ("layers", None), ("seq", None), ("head_dim", None),
)
CACHE_AXES = ("layers", "batch", "seq", "kv_heads", "head_dim")  # k and v: [L, B, S, G, H]


MESH_KEYS = {"tp": "model", "dp": "data"}  # spec key -> mesh axis (tensor / data parallel)


def make_mesh(data: int = 1, model: int | None = None, devices: Sequence | None = None) -> Mesh:
  """A 2-D mesh with axes ("data", "model"); `model` defaults to the remaining devices."""
  devices = list(devices if devices is not None else jax.devices())
  model = model or len(devices) // data
  if data * model > len(devices):
    raise ValueError(f"mesh {data}x{model} needs {data * model} devices, have {len(devices)}")
  grid = np.array(devices[:data * model]).reshape(data, model)
  return Mesh(grid, ("data", "model"))


def parse_mesh(spec: str, devices: Sequence | None = None, *, name: str = "mesh") -> Mesh:
  """A ("data", "model") mesh from a spec such as "tp=2,dp=2".

  tp is the tensor-parallel size (mesh axis "model": heads, MLP and vocab are split), dp
  the data-parallel size (mesh axis "data": lanes are split); a missing key is 1. The mesh
  takes the first dp * tp devices, which must divide the device count.

  Args:
    spec: comma-separated key=size pairs, keys tp and dp.
    devices: the devices to lay out (default `jax.devices()`: every host's, after
      `jax.distributed.initialize`).
    name: how error messages call the spec (the CLI passes "--mesh").

  Returns:
    The mesh, shape (dp, tp).

  Raises:
    ValueError: an empty spec, a part that is not key=size, an unknown or repeated key, a
      size below 1, or sizes whose product does not divide the device count.
  """
  def bad(detail: str) -> ValueError:
    return ValueError(f"{name}={spec!r}: {detail}")

  sizes: dict[str, int] = {}
  parts = [p.strip() for p in spec.split(",")] if spec.strip() else []
  if not parts:
    raise bad("empty; write e.g. tp=2,dp=2 (tp: tensor parallel, dp: data parallel)")
  for part in parts:
    key, eq, value = (x.strip() for x in part.partition("="))
    if not eq or not key:
      raise bad(f"{part!r} must be key=size, e.g. tp=2")
    if key not in MESH_KEYS:
      raise bad(f"unknown key {key!r} in {part!r}; keys are tp (tensor parallel) and dp "
                f"(data parallel)")
    if key in sizes:
      raise bad(f"{key} is given twice")
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
      raise bad(f"{part!r}: the size must be an integer >= 1")
    sizes[key] = int(value)
  devices = list(devices if devices is not None else jax.devices())
  dp, tp = sizes.get("dp", 1), sizes.get("tp", 1)
  n = len(devices)
  if dp * tp > n:
    raise bad(f"needs dp * tp = {dp * tp} devices, only {n} are available")
  if n % (dp * tp):
    raise bad(f"dp * tp = {dp * tp} does not divide the {n} devices; pick sizes whose "
              f"product divides {n}")
  return make_mesh(data=dp, model=tp, devices=devices)


def param_axes(cfg: ModelConfig) -> dict:
  """Logical axis names of every parameter, shaped like `nnx.to_pure_dict(state)`."""
  axes = {"embed": ("vocab", "embed"), "final_norm": ("embed",),
          "layers": {name: ("layers", *layers.LAYER_PARAM_AXES[name])
                     for name in layers.layer_param_shapes(cfg)}}
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
  """Places model parameters on the mesh; returns the sharded state (input is unchanged).

  Raises:
    ValueError: the state is not in the stacked layout `param_axes` describes.
  """
  pure = nnx.to_pure_dict(state)
  axes = param_axes(cfg)
  if (jax.tree.structure(pure) !=
      jax.tree.structure(axes, is_leaf=lambda x: isinstance(x, tuple))):
    raise ValueError("shard_state works on the stacked parameter layout (one [L, ...] array "
                     "per layer parameter, as `Transformer(cfg, rngs=...)` and the loaders "
                     "build it); this state has a different structure")
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
