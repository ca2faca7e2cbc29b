"""Options and networks of the trained drafters (MTP, block, DSpark): shipped, a file, or
random."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from infernix_jax.runtime.drafters.base import DrafterOptions, OptionError


@dataclasses.dataclass(frozen=True)
class TrainedOptions(DrafterOptions):
  """Options of a drafter network trained for the target."""

  # None = the weights shipped for the embedded model, "random" = untrained (mechanism
  # tests), a path = a `models.drafters.weights` file, or a built network module.
  weights: Any = None
  seed: int = 0  # initialisation seed of an untrained network (weights="random")

  def validate(self) -> None:
    super().validate()
    w = self.weights
    if isinstance(w, (str, Path)) and str(w) != "random" and not Path(w).is_file():
      raise OptionError("weights", f"weights={str(w)!r}: no such file (a drafter .safetensors "
                                   f"file, or 'random')")


def target_of(context, name: str):
  """(cfg, model) of the target a head-sharing drafter needs."""
  if context.target is None:
    raise OptionError("target", f"the {name!r} drafter needs the target model (it shares its "
                                f"head)")
  return context.target


def network(options: TrainedOptions, context, name: str, kind: str, random_net):
  """The drafter network for `options.weights`.

  Args:
    options: the drafter's `TrainedOptions`.
    context: the `BuildContext` (the target).
    name: the registered drafter name (for messages).
    kind: the weights kind (`models.drafters.weights.KINDS`).
    random_net: (cfg) -> an untrained network, used only for weights="random".

  Raises:
    DrafterWeightsError: the shipped or given weights are missing or belong to another
      target; the message names the file and the expected model.
  """
  from flax import nnx

  from infernix_jax.models.drafters import weights as dw
  cfg, model = target_of(context, name)
  w = options.weights
  if isinstance(w, nnx.Module):
    return w
  if isinstance(w, str) and w == "random":
    return random_net(cfg)
  path = Path(w) if w is not None else dw.shipped_path(kind)
  expected = ("the embedded SmolLM2-135M-Instruct (the only target with shipped weights; "
              "pass weights=PATH for another target, or weights='random' for an untrained "
              "network)") if w is None else "this target"
  return dw.load(path, kind, cfg, model.embed[...], expected=expected)
