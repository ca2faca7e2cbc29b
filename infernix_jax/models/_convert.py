"""Builds a `Transformer` from named numpy arrays without a random-init pass."""

from __future__ import annotations

from typing import Mapping

import jax.numpy as jnp
import numpy as np
from flax import nnx

from infernix_jax.models import layers
from infernix_jax.models.config import ModelConfig
from infernix_jax.models.transformer import Transformer


def abstract_model(cfg: ModelConfig) -> Transformer:
  """A `Transformer` whose parameters are shape/dtype placeholders (no memory, no RNG)."""
  return nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))


def model_from_arrays(cfg: ModelConfig, arrays: Mapping[str, np.ndarray]) -> Transformer:
  """Assembles a model from arrays in our layout.

  Args:
    cfg: the architecture.
    arrays: "embed" [Vm, D], "final_norm" [D], optional "lm_head" [D, Vm], and
      "layers.<name>" [L, ...] for every name of `layers.layer_param_shapes`.

  Returns:
    The model, parameters cast to cfg.dtype.

  Raises:
    ValueError: a parameter is missing or has the wrong shape.
  """
  graphdef, abstract = nnx.split(abstract_model(cfg))
  pure = nnx.to_pure_dict(abstract)
  filled = {}

  def take(key, spec):
    if key not in arrays:
      raise ValueError(f"checkpoint has no parameter {key!r} (needed by {cfg.name or 'model'})")
    value = arrays[key]
    if tuple(value.shape) != tuple(spec.shape):
      raise ValueError(f"parameter {key!r} has shape {value.shape}, expected {spec.shape}")
    return jnp.asarray(value, dtype=cfg.jnp_dtype)

  for key, spec in pure.items():
    if key == "layers":
      filled[key] = {n: take(f"layers.{n}", s) for n, s in spec.items()}
    else:
      filled[key] = take(key, spec)
  assert set(pure["layers"]) == set(layers.layer_param_shapes(cfg))
  nnx.replace_by_pure_dict(abstract, filled)
  return nnx.merge(graphdef, abstract)
