"""DSpark drafting: a block backbone drafts all K positions' states in one call, a small
sequential head turns them into tokens one after another, each conditioned on the previous
draft (greedy, q one-hot; or sampled, q sparse; chains or trees)."""

from __future__ import annotations

import dataclasses

from infernix_jax.models.drafters.weights import head_for
from infernix_jax.runtime.drafters._net import NetDrafter, TreeOptions
from infernix_jax.runtime.drafters._trained import TrainedOptions, network, target_of
from infernix_jax.runtime.drafters.base import OptionError

RANDOM_LAYERS = 1  # backbone depth of an untrained network (weights="random")


@dataclasses.dataclass(frozen=True)
class Options(TreeOptions, TrainedOptions):
  """The DSpark drafter's options: k, weights, seed, sampling and the tree fields
  (`TreeOptions`: every tree node's children come from the head on that node's token)."""

  sampling: bool = False  # draw drafts from the head's top-16 (q sparse) instead of argmax
  temperature: float = 1.0  # the temperature sampled drafts are drawn at

  def validate(self) -> None:
    super().validate()
    if not isinstance(self.sampling, bool):
      raise OptionError("sampling", f"sampling={self.sampling!r} must be true or false")
    if isinstance(self.temperature, bool) or not (
        isinstance(self.temperature, (int, float)) and self.temperature > 0):
      raise OptionError("temperature", f"temperature={self.temperature!r} must be > 0")
    self.validate_tree(greedy=not self.sampling)


@dataclasses.dataclass(frozen=True, eq=False)
class DSpark(NetDrafter):
  """`models.drafters.dspark.DSparkDrafter` on the device; behind jump-forward its head
  conditions on the forced tokens."""

  name = "dspark"

  sampled_q = "sparse"


def build(options: Options, context) -> DSpark:
  """A DSpark network on the target with the weights `options.weights` names (default: the
  network shipped for the embedded model, once trained)."""
  from flax import nnx

  from infernix_jax.models.drafters.dspark import DSparkDrafter, DSparkNet
  _, model = target_of(context, "dspark")
  net = network(options, context, "dspark", "dspark", lambda cfg: DSparkNet(
      cfg.replace(num_layers=RANDOM_LAYERS), cfg.dim, rngs=nnx.Rngs(options.seed)))
  temperature = float(options.temperature) if options.sampling else 0.0
  return DSpark(k=options.k, net=DSparkDrafter.create(net, head_for(model, net), options.k,
                                                      temperature), **options.tree_fields())
