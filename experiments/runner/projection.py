"""Speedups projected onto the hardware users run, from measured acceptance and a roofline
cost model of the round's steps.

Acceptance does not depend on the hardware; step costs do. A round with draft length K runs
the drafter's proposals and one target verify over K + 1 positions, and commits the measured
accepted length L (tokens per round, the correction or bonus token included); ordinary
decoding commits one token per target step at one position. So

  speedup = L * t_target(1) / (t_draft(K) + t_target(K + 1))

Each step costs its roofline plus a fixed launch overhead:

  t = max(bytes / HBM bandwidth, flops / dense bf16 rate) + overhead
  bytes = matmul weights (bf16, read once per step) + the lanes' KV cache read
          (lanes x context x layers x 2 x kv heads x head dim x 2 bytes)
  flops = 2 x matmul weights x lanes x positions
          + 4 x lanes x positions x context x layers x heads x head dim  (attention)

Drafters (their device work per round):
  host   none, ngram, jump (and suffix trees): no device step; their host work is assumed
         hidden behind the verify, as the stages bridge does;
  chain  mtp (and EAGLE-style heads): K sequential steps of one target-width decoder layer
         plus the LM head at one position;
  block  dflash, dflash2: one step of `layers` target-width decoder layers plus the LM head
         over K positions;
  spark  dspark: the block step's layers over K positions, then K sequential steps of its
         head (a gated MLP of 5 D^2 weights) plus the LM head at one position;
  model  draft: K sequential steps of a separate draft model (a `ModelConfig`).

What it leaves out: sampling and mask application (small next to a verify at these sizes),
host time not hidden by the bridge, prefill (the projection is of the decode phase), and
kernel efficiency below the roofline (the overhead term stands for all of it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from infernix_jax.models import config as model_config
from infernix_jax.models.config import ModelConfig


@dataclasses.dataclass(frozen=True)
class Hardware:
  """One accelerator: HBM bandwidth (bytes/s), dense matmul rate (flop/s), per-step overhead
  (s), and the bytes a stored weight takes (2: bf16)."""

  name: str
  hbm_bytes_per_s: float
  bf16_flops: float
  step_overhead_s: float
  weight_bytes: int = 2


def layer_weights(shape: ModelConfig) -> int:
  """Matmul weights of one decoder layer: q, k, v, o projections and the gated MLP."""
  attn = shape.dim * shape.head_dim * (2 * shape.num_heads + 2 * shape.num_kv_heads)
  return attn + 3 * shape.dim * shape.ffn_dim


def head_weights(shape: ModelConfig) -> int:
  return shape.dim * shape.vocab_size


# Spec-sheet figures; the overhead is a typical kernel-launch-bound step of a small model.
H200 = Hardware("H200", 4.8e12, 989e12, 20e-6)
TPU_V5E = Hardware("TPU v5e", 819e9, 197e12, 20e-6)
HARDWARE = (H200, TPU_V5E)

# The published shapes (models.config presets: each checkpoint's config.json).
TARGETS = (model_config.SMOLLM2_135M, model_config.QWEN3_0_6B, model_config.QWEN3_8B)

DRAFTER_KIND = {"none": "host", "ngram": "host", "jump": "host", "suffix": "host",
                "mtp": "chain", "eagle3": "chain", "dflash": "block", "dflash2": "block",
                "dspark": "spark", "draft": "model"}
BLOCK_LAYERS = 2  # the shipped block drafters' depth


def step_seconds(hw: Hardware, weights: int, *, lanes: int, positions: int, context: int,
                 attn_layers: int, shape: ModelConfig) -> float:
  """Roofline time of one step: `weights` matmul weights (bf16) applied at `positions` new
  positions of each of `lanes` lanes, attending over `context` cached positions in
  `attn_layers` layers of `shape`'s attention."""
  kv = lanes * context * attn_layers * 2 * shape.num_kv_heads * shape.head_dim * 2
  flops = (2 * weights * lanes * positions
           + 4 * lanes * positions * context * attn_layers * shape.num_heads * shape.head_dim)
  return max((hw.weight_bytes * weights + kv) / hw.hbm_bytes_per_s, flops / hw.bf16_flops) \
      + hw.step_overhead_s


def target_seconds(hw: Hardware, shape: ModelConfig, *, lanes: int, positions: int,
                   context: int) -> float:
  weights = shape.num_layers * layer_weights(shape) + head_weights(shape)
  return step_seconds(hw, weights, lanes=lanes, positions=positions, context=context,
                      attn_layers=shape.num_layers, shape=shape)


def draft_seconds(hw: Hardware, shape: ModelConfig, drafter: str, k: int, *, lanes: int,
                  context: int, draft_shape: ModelConfig | None = None) -> float:
  """Device time of one round's proposals of `drafter` (see the module docstring).

  Raises:
    ValueError: a drafter whose kind is unknown, or the "model" kind without `draft_shape`.
  """
  kind = DRAFTER_KIND.get(drafter)
  if kind is None:
    raise ValueError(f"drafter {drafter!r}: no cost model; known: {', '.join(DRAFTER_KIND)}")
  if kind == "host" or k == 0:
    return 0.0
  if kind == "chain":
    one = step_seconds(hw, layer_weights(shape) + head_weights(shape), lanes=lanes,
                       positions=1, context=context, attn_layers=1, shape=shape)
    return k * one
  if kind == "block":
    return step_seconds(hw, BLOCK_LAYERS * layer_weights(shape) + head_weights(shape),
                        lanes=lanes, positions=k, context=context, attn_layers=BLOCK_LAYERS,
                        shape=shape)
  if kind == "spark":
    backbone = step_seconds(hw, BLOCK_LAYERS * layer_weights(shape), lanes=lanes, positions=k,
                            context=context, attn_layers=BLOCK_LAYERS, shape=shape)
    head = step_seconds(hw, 5 * shape.dim ** 2 + head_weights(shape), lanes=lanes,
                        positions=1, context=0, attn_layers=0, shape=shape)
    return backbone + k * head
  if draft_shape is None:
    raise ValueError(f"drafter {drafter!r} runs a separate draft model: give its shape")
  return k * target_seconds(hw, draft_shape, lanes=lanes, positions=1, context=context)


def speedup(accepted_length: float, hw: Hardware, shape: ModelConfig, drafter: str, k: int, *,
            drafted_per_round: float, lanes: int, context: int,
            draft_shape: ModelConfig | None = None) -> float:
  """Projected decode speedup over ordinary decoding of rounds that commit `accepted_length`
  tokens and verify `drafted_per_round` drafts (the measured means): the verify runs at
  1 + drafted_per_round positions, a device drafter's proposals cost K tokens' work."""
  base = target_seconds(hw, shape, lanes=lanes, positions=1, context=context)
  round_s = (draft_seconds(hw, shape, drafter, k, lanes=lanes, context=context,
                           draft_shape=draft_shape)
             + target_seconds(hw, shape, lanes=lanes, positions=1 + drafted_per_round,
                              context=context))
  return accepted_length * base / round_s


def columns(hardware: Sequence[Hardware] = HARDWARE,
            targets: Sequence[ModelConfig] = TARGETS) -> list[tuple[Hardware, ModelConfig]]:
  """The (hardware, target) pairs of a projection table, hardware outermost."""
  return [(hw, shape) for hw in hardware for shape in targets]
