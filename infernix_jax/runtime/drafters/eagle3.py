"""EAGLE-3: a one-layer head on the target's fused low / middle / high features drafts K tokens
over its own reduced vocabulary (`models.drafters.eagle3`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from infernix_jax.runtime.drafters._net import NetDrafter, TreeOptions
from infernix_jax.runtime.drafters._trained import target_of
from infernix_jax.runtime.drafters.base import DrafterOptions, OptionError

SHIPPED = "smollm2-135m-instruct.eagle3"  # the head trained for the embedded model


@dataclasses.dataclass(frozen=True)
class Options(TreeOptions, DrafterOptions):
  """The EAGLE-3 head's options: k, weights, sampling and the tree fields (`TreeOptions`)."""

  # None = the head shipped for the embedded model; a folder in the public EAGLE-3 layout
  # (config.json + model.safetensors, e.g. a published head for a Qwen3 target); "random"
  # = untrained (mechanism tests); or a built `Eagle3Net`.
  weights: Any = None
  sampling: bool = False  # draw drafts from the head's distribution (q sparse) instead of argmax
  temperature: float = 1.0  # the temperature sampled drafts are drawn at
  seed: int = 0  # initialisation seed of an untrained head (weights="random")
  draft_vocab: int = 0  # draft vocabulary of an untrained head (0 = the whole target's)

  def validate(self) -> None:
    super().validate()
    w = self.weights
    if isinstance(w, (str, Path)) and str(w) != "random" and not Path(w).is_dir():
      raise OptionError("weights", f"weights={str(w)!r}: no such folder (an EAGLE-3 head: "
                                   f"config.json + model.safetensors; or 'random')")
    if not isinstance(self.sampling, bool):
      raise OptionError("sampling", f"sampling={self.sampling!r} must be true or false")
    if isinstance(self.temperature, bool) or not (
        isinstance(self.temperature, (int, float)) and self.temperature > 0):
      raise OptionError("temperature", f"temperature={self.temperature!r} must be > 0")
    if isinstance(self.draft_vocab, bool) or not isinstance(self.draft_vocab, int) or (
        self.draft_vocab < 0):
      raise OptionError("draft_vocab", f"draft_vocab={self.draft_vocab!r} must be an "
                                       f"integer >= 0")
    self.validate_tree(greedy=not self.sampling)


@dataclasses.dataclass(frozen=True, eq=False)
class Eagle3(NetDrafter):
  """`models.drafters.Eagle3Drafter` on the device: greedy (q one-hot) or sampled (q sparse
  over the top-16 of the head's distribution); reads the target features of its taps."""

  name = "eagle3"

  sampled_q = "sparse"

  @property
  def feature_taps(self):  # type: ignore[override]
    return self.net.taps


def shipped_dir() -> Path:
  from infernix_jax.models.drafters.weights import SHIPPED as TRAINED
  return TRAINED / SHIPPED


def head_network(options: Options, context):
  """The `Eagle3Net` options.weights names, checked against the target."""
  from flax import nnx

  from infernix_jax.models.drafters import eagle3 as me
  from infernix_jax.models.drafters import eagle3_checkpoint as ck
  cfg, model = target_of(context, "eagle3")
  w = options.weights
  if isinstance(w, nnx.Module):
    return w
  if isinstance(w, str) and w == "random":
    import jax.numpy as jnp
    vd = options.draft_vocab or cfg.vocab_size
    if vd > cfg.vocab_size:
      raise OptionError("draft_vocab", f"draft_vocab={vd} exceeds the target's vocabulary "
                                       f"({cfg.vocab_size})")
    net = me.Eagle3Net(cfg, me.default_taps(cfg.num_layers), vd,
                       rngs=nnx.Rngs(options.seed))
    net.d2t[...] = jnp.zeros((vd,), jnp.int32)  # the first vd target ids
    return net
  expected = ("the embedded SmolLM2-135M-Instruct (the only target with a shipped head; pass "
              "weights=DIR for another target, or weights='random' for an untrained head)"
              ) if w is None else "this target"
  return ck.load(Path(w) if w is not None else shipped_dir(), cfg, model.embed[...],
                 expected=expected)


def build(options: Options, context) -> Eagle3:
  """An EAGLE-3 head on the target (default: the head shipped for the embedded model)."""
  from infernix_jax.models.drafters.eagle3 import Eagle3Drafter
  _, model = target_of(context, "eagle3")
  net = head_network(options, context)
  temperature = float(options.temperature) if options.sampling else 0.0
  return Eagle3(k=options.k, net=Eagle3Drafter.create(net, model.embed[...], options.k,
                                                      temperature), **options.tree_fields())
