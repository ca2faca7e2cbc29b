"""Hugging Face checkpoint directory -> our model, streamed one tensor and one layer at a time.

The tensors are read shard after shard (`safetensors_shards.iter_tensors`) in pieces of
rows of at most `_CHUNK_BYTES`; each piece goes to the default device in its stored dtype and
is transposed to [in, out], cast to the model dtype and written into its destination there,
in place (a donated update): a slice of the stacked layout's [L, ...] array, or the layer's
own array in the unrolled layout, which builds each `unrolled.FusedLayer` as soon as its
layer is complete. Beyond the model, memory holds one piece of a tensor (plus, in the
unrolled layout, the layer being assembled): never a shard, never a float32 copy of the
model.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from infernix_jax.models import _convert, layers, safetensors_shards, unrolled
from infernix_jax.models.config import ModelConfig
from infernix_jax.models.transformer import Transformer

_LAYER_PREFIX = "model.layers."
# HF parameter name (inside model.layers.{i}.) -> (our name, transpose to [in, out]).
_LAYER_NAMES = {
    "input_layernorm.weight": ("attn_norm", False),
    "self_attn.q_proj.weight": ("q", True),
    "self_attn.k_proj.weight": ("k", True),
    "self_attn.v_proj.weight": ("v", True),
    "self_attn.o_proj.weight": ("o", True),
    "self_attn.q_proj.bias": ("q_bias", False),
    "self_attn.k_proj.bias": ("k_bias", False),
    "self_attn.v_proj.bias": ("v_bias", False),
    "self_attn.o_proj.bias": ("o_bias", False),
    "self_attn.q_norm.weight": ("q_norm", False),
    "self_attn.k_norm.weight": ("k_norm", False),
    "post_attention_layernorm.weight": ("mlp_norm", False),
    "mlp.gate_proj.weight": ("gate", True),
    "mlp.up_proj.weight": ("up", True),
    "mlp.down_proj.weight": ("down", True),
}
# Top-level HF name -> (our name, transpose).
_TOP_NAMES = {"model.embed_tokens.weight": ("embed", False),
              "model.norm.weight": ("final_norm", False),
              "lm_head.weight": ("lm_head", True)}


def read_config(directory: Path) -> dict:
  """The parsed config.json of a checkpoint directory."""
  path = directory / "config.json"
  if not path.exists():
    raise FileNotFoundError(f"{directory} has no config.json; is it a Hugging Face checkpoint?")
  return json.loads(path.read_text())


_CHUNK_BYTES = 32 << 20  # host memory per piece of a tensor on its way to the device


@functools.partial(jax.jit, static_argnames=("transpose",), donate_argnums=0)
def _write(dest: jax.Array, rows: jax.Array, starts, transpose: bool) -> jax.Array:
  """dest with the block at `starts` replaced by rows (cast, transposed), in place.

  The block moves as unsigned integers of the element's width: XLA's CPU backend copies
  and transposes bfloat16 elements several times slower than 16-bit integers.
  """
  bits = jnp.dtype(f"uint{8 * dest.dtype.itemsize}")
  x = jax.lax.bitcast_convert_type(rows.astype(dest.dtype), bits)
  x = x.T if transpose else x
  x = x.reshape((1,) * (dest.ndim - x.ndim) + x.shape)
  out = jax.lax.dynamic_update_slice(jax.lax.bitcast_convert_type(dest, bits), x, starts)
  return jax.lax.bitcast_convert_type(out, dest.dtype)


def _fill(dest: jax.Array, tensor: safetensors_shards.StoredTensor, layer: int | None,
          transpose: bool, column: int = 0) -> jax.Array:
  """Writes a stored tensor into dest (its slice `layer` when given; from `column` on its
  last axis), piece by piece."""
  axis = dest.ndim - 1 if transpose else dest.ndim - len(tensor.info.shape)
  for begin, rows in tensor.chunks(_CHUNK_BYTES):
    starts = [0] * dest.ndim
    if layer is not None:
      starts[0] = layer
    starts[-1] += column
    starts[axis] += begin
    dest = _write(dest, jax.device_put(rows), tuple(np.int32(s) for s in starts), transpose)
    del rows
    dest.block_until_ready()  # one piece in flight: the reads cannot run ahead of the writes
  return dest


class _Stream:
  """Routes the checkpoint's tensors to our names, checks shapes, converts on the device."""

  def __init__(self, cfg: ModelConfig, directory: Path):
    self.cfg = cfg
    self.directory = directory
    self.shapes = layers.layer_param_shapes(cfg)
    self.top = {"embed": (cfg.vocab_size, cfg.dim), "final_norm": (cfg.dim,)}
    if not cfg.tie_embeddings:
      self.top["lm_head"] = (cfg.dim, cfg.vocab_size)
    self.found_top: dict[str, jax.Array] = {}

  def route(self, key: str):
    """(layer index or None, our name, transpose) for a tensor we load, else None."""
    if key.startswith(_LAYER_PREFIX):
      layer, rest = key[len(_LAYER_PREFIX):].split(".", 1)
      if rest not in _LAYER_NAMES or _LAYER_NAMES[rest][0] not in self.shapes:
        return None
      if not layer.isdigit() or int(layer) >= self.cfg.num_layers:
        raise ValueError(f"checkpoint {self.directory} holds {key!r} but config.json says "
                         f"num_hidden_layers={self.cfg.num_layers}")
      return (int(layer), *_LAYER_NAMES[rest])
    if key in _TOP_NAMES and _TOP_NAMES[key][0] in self.top:
      return (None, *_TOP_NAMES[key])
    return None

  def wanted(self, key: str, info: safetensors_shards.TensorInfo) -> bool:
    """Whether to read `key`; a wanted tensor of the wrong shape raises (before reading)."""
    where = self.route(key)
    if where is None:
      return False
    layer, ours, transpose = where
    expected = self.shapes[ours] if layer is not None else self.top[ours]
    stored = tuple(reversed(expected)) if transpose else tuple(expected)
    if info.shape != stored:
      raise ValueError(f"checkpoint tensor {key!r} has shape {list(info.shape)}, expected "
                       f"{list(stored)} for config.json's sizes")
    return True

  def tensors(self) -> Iterator[tuple[int, str, bool, safetensors_shards.StoredTensor]]:
    """(layer, our name, transpose, stored tensor) for each layer tensor, in file order; the
    top-level tensors are written to the device and kept in `found_top`, not yielded."""
    for tensor in safetensors_shards.iter_tensors(self.directory, self.wanted):
      layer, ours, transpose = self.route(tensor.name)
      if layer is None:
        dest = jnp.zeros(self.top[ours], self.cfg.jnp_dtype)
        self.found_top[ours] = _fill(dest, tensor, None, transpose)
      else:
        yield layer, ours, transpose, tensor

  def check_top(self) -> None:
    for ours, _ in self.top.items():
      if ours not in self.found_top:
        key = next(k for k, (o, _) in _TOP_NAMES.items() if o == ours)
        raise ValueError(f"checkpoint lacks {key!r}" + (
            "; config.json says tie_word_embeddings=false" if ours == "lm_head" else ""))

  def missing_error(self, present: dict[str, set[int]]) -> ValueError:
    for name in sorted(self.shapes):
      missing = sorted(set(range(self.cfg.num_layers)) - present.get(name, set()))
      if missing:
        return ValueError(f"checkpoint lacks {name!r} for layers {missing[:5]}")
    raise AssertionError("no layer parameter is missing")


def _stacked_layers(stream: _Stream, module):
  """The abstract `DecoderLayers` `module`, filled in place one tensor at a time."""
  cfg = stream.cfg
  stacked = {name: jnp.zeros((cfg.num_layers, *shape), cfg.jnp_dtype)
             for name, shape in stream.shapes.items()}
  present: dict[str, set[int]] = {}
  for layer, name, transpose, tensor in stream.tensors():
    stacked[name] = _fill(stacked[name], tensor, layer, transpose)
    present.setdefault(name, set()).add(layer)
  if any(len(present.get(name, ())) < cfg.num_layers for name in stream.shapes):
    raise stream.missing_error(present)
  for name in module.names:
    setattr(module, name, nnx.Param(stacked.pop(name)))


def _complete_layers(stream: _Stream) -> Iterator[dict[str, jax.Array]]:
  """Each layer's parameters (model dtype, [in, out], q/k/v and gate/up written straight into
  their fused arrays, `unrolled.fused_shapes`) in order, as soon as the layer is complete."""
  cfg = stream.cfg
  fused = unrolled.fused_parts(cfg)
  shapes = unrolled.fused_shapes(cfg)
  pending: dict[int, dict[str, jax.Array]] = {}
  present: dict[str, set[int]] = {}
  next_layer = 0
  for layer, name, transpose, tensor in stream.tensors():
    target, column = fused.get(name, (name, 0))
    params = pending.setdefault(layer, {})
    if target not in params:
      params[target] = jnp.zeros(shapes[target], cfg.jnp_dtype)
    params[target] = _fill(params[target], tensor, None, transpose, column)
    present.setdefault(name, set()).add(layer)
    while all(next_layer in present.get(n, ()) for n in stream.shapes):
      yield pending.pop(next_layer)
      next_layer += 1
  if next_layer < cfg.num_layers:
    raise stream.missing_error(present)


def load(directory: Path, cfg: ModelConfig, layout: str = "stacked",
         weights: str | None = None) -> Transformer:
  """The model stored in an HF checkpoint directory, in `layout` (see `loaders.load_hf_dir`).

  Raises:
    ValueError: a bad layout / weights choice (before any tensor is read), a tensor of the
      wrong shape, or a missing parameter (the message names it).
  """
  weights = unrolled.check_layout(cfg, layout, weights)
  stream = _Stream(cfg, directory)
  model = _convert.abstract_model(cfg)
  if layout == "stacked":
    _stacked_layers(stream, model.layers)
  else:
    packed = unrolled.packs_by_default(cfg, weights)
    model.layers = unrolled.UnrolledLayers(cfg, _complete_layers(stream), weights, packed)
  stream.check_top()
  for name, value in stream.found_top.items():
    setattr(model, name, nnx.Param(value))
  if layout != "stacked":
    model.pack_head(model.layers.packed)
  return model
