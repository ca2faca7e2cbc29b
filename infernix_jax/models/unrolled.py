"""Per-layer weight layout for memory-bound decoding, with optional reduced-precision storage.

The stacked layout (`transformer.DecoderLayers`) keeps every parameter as one [L, ...] array
and runs the layers in a `lax.scan`: compile time does not grow with depth, and sharding
rules see one array per name. On the XLA CPU backend each scan step copies its slice of
the stacked weights before the product, so a decode step streams every weight three times;
static slices of a stacked array are copied too. Decoding a small batch is bound by weight
bandwidth, so this layout stores each layer's matrices as their own arrays, fuses the
projections that read the same input ("qkv" = [q | k | v] [D, (N + 2G)H], "gate_up" =
[gate | up] [D, 2F]) and runs the layers in a Python loop (the graph grows with depth:
compile time is L times one layer's).

Weight storage (`weights`): "float32" (default: the model dtype), "bfloat16" (half the bytes)
or "int8" (a quarter; symmetric per-output-column scales, f32). Matrices are converted to
the activation dtype inside the product and accumulate in it; norms, biases and the
embedding keep the model dtype.

Packed products (`packed`, default: `cpu_kernels.available()`): float32 matrices are stored
as panels (`packed_gemm.pack`) and multiplied by the CPU kernel for the few rows of a
decode or verify step, and the model carries a packed copy of its LM head
(`Transformer.packed_head`) for the logits. A matrix whose width has no panel width stays
unpacked.

Axis letters (docs/CONTRACTS.md): L layers, D width, N/G query/kv heads, H head dim, F MLP.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from infernix_jax.models import cpu_kernels, layers, packed_gemm
from infernix_jax.models import transformer as _transformer
from infernix_jax.models.config import ModelConfig

WEIGHT_DTYPES = ("float32", "bfloat16", "int8")
LAYOUTS = ("stacked", "unrolled")
_FUSED = {"qkv": ("q", "k", "v"), "qkv_bias": ("q_bias", "k_bias", "v_bias"),
          "gate_up": ("gate", "up")}
_MATRICES = ("qkv", "o", "gate_up", "down")  # stored in the `weights` dtype


def fused_parts(cfg: ModelConfig) -> dict[str, tuple[str, int]]:
  """Where each fused part of a layer lies: part name -> (fused name, first column)."""
  shapes = layers.layer_param_shapes(cfg)
  out = {}
  for fused, parts in _FUSED.items():
    if all(p in shapes for p in parts):
      column = 0
      for part in parts:
        out[part] = (fused, column)
        column += shapes[part][-1]
  return out


def fused_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
  """Shape of every parameter of one `FusedLayer` before storage conversion (fused names)."""
  shapes = dict(layers.layer_param_shapes(cfg))
  for part, (fused, _) in fused_parts(cfg).items():
    shape = shapes.pop(part)
    width = shapes[fused][-1] if fused in shapes else 0
    shapes[fused] = (*shape[:-1], width + shape[-1])
  return shapes


def quantize_int8(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Symmetric per-output-column int8: w [in, out] ~ q * scale -> (i8[in, out], f32[out])."""
  w = np.asarray(w, np.float32)
  scale = np.abs(w).max(axis=0) / 127.0
  scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
  return np.clip(np.rint(w / scale), -127, 127).astype(np.int8), scale


class FusedLayer(nnx.Module):
  """One decoder layer's parameters in the unrolled layout (see the module docstring)."""

  def __init__(self, cfg: ModelConfig, params: Mapping[str, jax.Array], weights: str,
               packed: bool = False):
    """`params`: the layer's arrays by `layers.layer_param_shapes` name or already fused
    (`fused_shapes`), [in, out], on the device (or host arrays). Fusing and casting run on
    the device; only int8 quantization and panel packing (a CPU layout) take a host copy,
    of this layer's matrices alone."""
    dtype = cfg.jnp_dtype
    fused = dict(params)
    for name, parts in _FUSED.items():
      if all(p in fused for p in parts):
        fused[name] = jnp.concatenate([jnp.asarray(fused.pop(p)) for p in parts], axis=-1)
    self.names = tuple(sorted(fused))
    for name in self.names:
      value = fused[name]
      if name in _MATRICES and weights == "int8":
        value, scale = quantize_int8(np.asarray(value, np.float32))
        setattr(self, name + "_scale", nnx.Param(jnp.asarray(scale)))
        setattr(self, name, nnx.Param(jnp.asarray(value)))
      elif name in _MATRICES and weights == "bfloat16":
        setattr(self, name, nnx.Param(jnp.asarray(value, jnp.bfloat16)))
      elif name in _MATRICES and packed and packed_gemm.panel_width(value.shape[1]):
        host = np.asarray(value, np.float32)
        setattr(self, name, nnx.Param(jnp.asarray(packed_gemm.pack(host), dtype)))
      else:
        setattr(self, name, nnx.Param(jnp.asarray(value, dtype)))
    if weights == "int8":
      self.names += tuple(n + "_scale" for n in _MATRICES)

  def params(self) -> dict[str, jax.Array]:
    """This layer's arrays by name (fused names, plus "<matrix>_scale" for int8)."""
    return {name: getattr(self, name)[...] for name in self.names}


@jax.jit
def _layer_slice(stacked: jax.Array, layer) -> jax.Array:
  """stacked[layer] on the device (one compiled program per shape, not per layer)."""
  return jax.lax.dynamic_index_in_dim(stacked, layer, 0, keepdims=False)


def layers_of(stacked: Mapping[str, jax.Array | np.ndarray]) -> Iterator[dict[str, jax.Array]]:
  """Each layer's parameters, sliced from stacked [L, ...] arrays where they are (device
  arrays on the device, host arrays on the host)."""
  num_layers = next(iter(stacked.values())).shape[0]
  for index in range(num_layers):
    yield {name: value[index] if isinstance(value, np.ndarray)
           else _layer_slice(value, np.int32(index)) for name, value in stacked.items()}


class UnrolledLayers(nnx.Module):
  """L `FusedLayer`s run one after the other (same interface as `DecoderLayers`)."""

  def __init__(self, cfg: ModelConfig, layer_params: Iterable[Mapping[str, jax.Array]],
               weights: str = "float32", packed: bool = False):
    """Builds the layers one at a time from `layer_params`: each layer's arrays as
    `FusedLayer` takes them (`layers_of` slices them from stacked arrays; the safetensors
    loader passes them as they arrive). `packed`: float32 matrices as panels (only with
    weights="float32" and a float32 model)."""
    if weights not in WEIGHT_DTYPES:
      raise ValueError(f"weights={weights!r} must be one of {WEIGHT_DTYPES}")
    if packed and (weights != "float32" or cfg.dtype != "float32"):
      raise ValueError(f"packed products need float32 weights in a float32 model, not "
                       f"weights={weights!r} in a {cfg.dtype} model")
    self.weights = weights
    self.packed = packed
    built = [FusedLayer(cfg, params, weights, packed) for params in layer_params]
    if len(built) != cfg.num_layers:
      raise ValueError(f"{len(built)} layers given for a {cfg.num_layers}-layer model")
    self.layers = nnx.List(built)

  def run(self, cfg: ModelConfig, x, cache_k, cache_v, starts, collect: bool = False,
          span: int | None = None, tree=None):
    """`transformer.cached_layers` semantics; per-layer outputs come as a tuple of [B, T, D]."""
    cos, sin, mask = _transformer.layer_inputs(cfg, x, cache_k.shape[2], starts, span, tree)
    outputs = []
    for index, layer in enumerate(self.layers):
      x, cache_k, cache_v = _transformer.cached_layer(cfg, layer.params(), x, cache_k, cache_v,
                                                      index, starts, cos, sin, mask)
      outputs.append(x)
    return (x, cache_k, cache_v, tuple(outputs)) if collect else (x, cache_k, cache_v)

  def stacked_params(self, cfg: ModelConfig) -> dict[str, np.ndarray]:
    """The stacked layout's arrays ([L, ...] per `layers.layer_param_shapes` name), f32 host
    copies (int8 and bf16 weights come back dequantized)."""
    per_layer = []
    for layer in self.layers:
      p = {n: np.asarray(v, np.float32) for n, v in layer.params().items()}
      p = {n: packed_gemm.unpack(v) if n in _MATRICES and v.ndim == 3 else v
           for n, v in p.items()}
      for name in _MATRICES:
        if name + "_scale" in p:
          p[name] = p[name] * p.pop(name + "_scale")
      widths = {"qkv": (cfg.num_heads, cfg.num_kv_heads, cfg.num_kv_heads),
                "qkv_bias": (cfg.num_heads, cfg.num_kv_heads, cfg.num_kv_heads)}
      for name, parts in _FUSED.items():
        if name not in p:
          continue
        value = p.pop(name)
        if name == "gate_up":
          sizes = (cfg.ffn_dim, cfg.ffn_dim)
        else:
          sizes = tuple(h * cfg.head_dim for h in widths[name])
        bounds = np.cumsum(sizes)[:-1]
        for part, piece in zip(parts, np.split(value, bounds, axis=-1)):
          p[part] = piece
      per_layer.append(p)
    return {name: np.stack([p[name] for p in per_layer]) for name in per_layer[0]}


def layout_of(model) -> str:
  """"stacked" or "unrolled": how `model`'s decoder layers are stored."""
  return "unrolled" if isinstance(model.layers, UnrolledLayers) else "stacked"


def weights_of(model) -> str:
  """Storage dtype of the layer matrices: the model dtype, or "bfloat16"/"int8"."""
  return model.layers.weights if isinstance(model.layers, UnrolledLayers) else model.cfg.dtype


def packs_by_default(cfg: ModelConfig, weights: str) -> bool:
  """Whether `unroll` packs by default: float32 weights of a float32 model, and the packed
  kernel available here (`cpu_kernels.available`)."""
  return weights == "float32" and cfg.dtype == "float32" and cpu_kernels.available()


def unroll(model, weights: str | None = None, packed: bool | None = None):
  """Switches `model` to the unrolled layout in place and returns it.

  Args:
    model: a `Transformer` (either layout).
    weights: storage dtype of the layer matrices ("float32", "bfloat16", "int8"); None keeps
      the current one (the model dtype for a stacked model).
    packed: panel-packed float32 matrices and LM head (see the module docstring); None:
      `packs_by_default`.

  The stacked arrays are dropped from the model (callers holding an earlier `nnx.split`
  state keep theirs alive).
  """
  weights = weights or weights_of(model)
  packed = packs_by_default(model.cfg, weights) if packed is None else packed
  if layout_of(model) == "unrolled":
    if (weights, packed) == (model.layers.weights, model.layers.packed):
      return model
    stacked = model.layers.stacked_params(model.cfg)
  else:
    stacked = model.layers.params()
  model.layers = UnrolledLayers(model.cfg, layers_of(stacked), weights, packed)
  model.pack_head(packed)
  return model


def stack(model):
  """Switches `model` back to the stacked layout in place (training, sharding, checkpoints)."""
  if layout_of(model) == "stacked":
    return model
  stacked = model.layers.stacked_params(model.cfg)
  decoder = nnx.eval_shape(lambda: _transformer.DecoderLayers(model.cfg, model.cfg.num_layers,
                                                              rngs=nnx.Rngs(0)))
  for name in decoder.names:
    setattr(decoder, name, nnx.Param(jnp.asarray(stacked[name], model.cfg.jnp_dtype)))
  model.layers = decoder
  model.pack_head(False)
  return model


def check_layout(cfg: ModelConfig, layout: str, weights: str | None) -> str:
  """Checks a layout / weights choice for a `cfg` model; returns the weights dtype it means.

  Raises:
    ValueError: an unknown layout or weights dtype, or reduced weights in the stacked layout.
  """
  if layout not in LAYOUTS:
    raise ValueError(f"layout={layout!r} must be one of {LAYOUTS}")
  if layout == "stacked":
    if weights not in (None, cfg.dtype):
      raise ValueError(f"weights={weights!r} needs layout='unrolled' (the stacked layout "
                       f"stores the model dtype {cfg.dtype})")
    return cfg.dtype
  if weights is not None and weights not in WEIGHT_DTYPES:
    raise ValueError(f"weights={weights!r} must be one of {WEIGHT_DTYPES}")
  return weights or cfg.dtype


def relayout(model, layout: str = "unrolled", weights: str | None = None):
  """`unroll(model, weights)` or `stack(model)` by name, with argument checks."""
  check_layout(model.cfg, layout, weights)
  if layout == "stacked":
    return stack(model)
  return unroll(model, weights)
