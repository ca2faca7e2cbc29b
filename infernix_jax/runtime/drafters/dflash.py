"""Block drafting (DFlash style): one network call drafts all K tokens from the target's
hidden states; greedy, q one-hot."""

from __future__ import annotations

import dataclasses

from infernix_jax.models.drafters.weights import head_for
from infernix_jax.runtime.drafters._net import NetDrafter, TreeOptions
from infernix_jax.runtime.drafters._trained import TrainedOptions, network, target_of

RANDOM_LAYERS = 1  # depth of an untrained block network (weights="random")


@dataclasses.dataclass(frozen=True)
class Options(TreeOptions, TrainedOptions):
  """The block drafter's options: k, weights, seed (greedy: no temperature) and the tree
  fields (`TreeOptions`: a tree over its K per-position distributions)."""

  def validate(self) -> None:
    super().validate()
    self.validate_tree(greedy=True)


@dataclasses.dataclass(frozen=True, eq=False)
class Block(NetDrafter):
  """`models.drafters.DFlashDrafter(sparse=False)` on the device."""

  name = "dflash"


def build_net(options, context, name: str, sparse: bool, temperature: float = 1.0):
  """A block network on the target with the weights `options.weights` names (default: the
  trained block drafter shipped for the embedded model, shared by dflash and dflash2)."""
  from flax import nnx

  from infernix_jax.models import drafters as md
  _, model = target_of(context, name)
  net = network(options, context, name, "block", lambda cfg: md.DFlashNet(
      cfg.replace(num_layers=RANDOM_LAYERS), cfg.dim, rngs=nnx.Rngs(options.seed)))
  return md.DFlashDrafter.create(net, head_for(model, net), options.k, sparse=sparse,
                                 temperature=temperature)


def build(options: Options, context) -> Block:
  return Block(k=options.k, net=build_net(options, context, "dflash", sparse=False),
               **options.tree_fields())
