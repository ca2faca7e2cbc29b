"""Hugging Face checkpoint directory -> our model, streamed one tensor and one layer at a time.

The tensors are read shard after shard (`safetensors_shards.iter_tensors`), each moved to
the default device in its stored dtype, then transposed to [in, out] and cast to the model
dtype there. The stacked layout writes each one into its [L, ...] array in place (a donated
update); the unrolled layout builds each `unrolled.FusedLayer` as soon as its layer is
complete. Host memory holds one tensor at a time (plus, in the unrolled layout, the layer
being assembled on a CPU device): never the whole checkpoint, never a float32 copy of it.
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


@functools.partial(jax.jit, static_argnames=("transpose", "dtype"))
def _convert_tensor(x: jax.Array, transpose: bool, dtype) -> jax.Array:
  return (x.T if transpose else x).astype(dtype)


@functools.partial(jax.jit, static_argnames=("transpose",), donate_argnums=0)
def _write_layer(stacked: jax.Array, x: jax.Array, layer, transpose: bool) -> jax.Array:
  """stacked [L, ...] with slice `layer` replaced by x (transposed), in place."""
  x = (x.T if transpose else x).astype(stacked.dtype)
  return jax.lax.dynamic_update_index_in_dim(stacked, x, layer, 0)


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

  def tensors(self) -> Iterator[tuple[int | None, str, bool, jax.Array]]:
    """(layer or None, our name, transpose, tensor on the device in its stored dtype), in
    file order; the top-level tensors are converted and kept in `found_top`, not yielded."""
    for key, host in safetensors_shards.iter_tensors(self.directory, self.wanted):
      layer, ours, transpose = self.route(key)
      value = jax.device_put(host)
      del host  # the host copy goes before the next tensor is read
      if layer is None:
        self.found_top[ours] = _convert_tensor(value, transpose, self.cfg.jnp_dtype)
      else:
        yield layer, ours, transpose, value

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
  for layer, name, transpose, value in stream.tensors():
    stacked[name] = _write_layer(stacked[name], value, np.int32(layer), transpose)
    present.setdefault(name, set()).add(layer)
  if any(len(present.get(name, ())) < cfg.num_layers for name in stream.shapes):
    raise stream.missing_error(present)
  for name in module.names:
    setattr(module, name, nnx.Param(stacked.pop(name)))


def _complete_layers(stream: _Stream) -> Iterator[dict[str, jax.Array]]:
  """Each layer's parameters (model dtype, [in, out]) in order, as soon as it is complete."""
  cfg = stream.cfg
  pending: dict[int, dict[str, jax.Array]] = {}
  next_layer = 0
  for layer, name, transpose, value in stream.tensors():
    pending.setdefault(layer, {})[name] = _convert_tensor(value, transpose, cfg.jnp_dtype)
    del value
    while len(pending.get(next_layer, ())) == len(stream.shapes):
      yield pending.pop(next_layer)
      next_layer += 1
  if next_layer < cfg.num_layers:
    present: dict[str, set[int]] = {}
    for index in range(next_layer):
      for name in stream.shapes:
        present.setdefault(name, set()).add(index)
    for index, params in pending.items():
      for name in params:
        present.setdefault(name, set()).add(index)
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
