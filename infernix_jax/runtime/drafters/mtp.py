"""Multi-token prediction: a one-layer head on the target's hidden state drafts K tokens."""

from __future__ import annotations

import dataclasses

from infernix_jax.models.drafters.weights import head_for
from infernix_jax.runtime.drafters._net import NetDrafter, TreeOptions
from infernix_jax.runtime.drafters._trained import TrainedOptions, network, target_of


@dataclasses.dataclass(frozen=True)
class Options(TreeOptions, TrainedOptions):
  """The MTP head's options: k, weights, seed and the tree fields (`TreeOptions`: a tree
  whose every node runs the head on its parent's state)."""

  def validate(self) -> None:
    super().validate()
    self.validate_tree(greedy=True)


@dataclasses.dataclass(frozen=True, eq=False)
class MTP(NetDrafter):
  """`models.drafters.MTPDrafter` on the device: greedy, q one-hot; shares the target's
  embedding and LM head."""

  name = "mtp"


def build(options: Options, context) -> MTP:
  """An MTP head on the target with the weights `options.weights` names (default: the
  trained head shipped for the embedded model), scoring the draft vocabulary they were
  trained on."""
  from flax import nnx

  from infernix_jax.models import drafters as md
  _, model = target_of(context, "mtp")
  net = network(options, context, "mtp", "mtp",
                lambda cfg: md.MTPHead(cfg, rngs=nnx.Rngs(options.seed)))
  return MTP(k=options.k, net=md.MTPDrafter.create(net, head_for(model, net), options.k),
             **options.tree_fields())
