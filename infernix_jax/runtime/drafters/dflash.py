"""Block drafting (DFlash style): one network call drafts all K tokens from the target's
hidden states; greedy, q one-hot."""

from __future__ import annotations

import dataclasses

from infernix_jax.runtime.drafters._net import NetDrafter
from infernix_jax.runtime.drafters._trained import network, target_of

RANDOM_LAYERS = 1  # depth of an untrained block network (weights="random")


@dataclasses.dataclass(frozen=True, eq=False)
class Block(NetDrafter):
  """`models.drafters.DFlashDrafter(sparse=False)` on the device."""

  name = "dflash"


def build_net(opts, name: str, sparse: bool):
  """A block network on `opts.target` with the weights `opts.weights` names (default: the
  trained block drafter shipped for the embedded model, shared by dflash and dflash2)."""
  from flax import nnx

  from infernix_jax.models import drafters as md
  _, model = target_of(opts, name)
  head = md.TargetHead.from_model(model)
  net = network(opts, name, "block", lambda cfg: md.DFlashNet(
      cfg.replace(num_layers=RANDOM_LAYERS), cfg.dim, rngs=nnx.Rngs(opts.seed)))
  return md.DFlashDrafter.create(net, head, opts.k, sparse=sparse, temperature=opts.temperature)


def build(opts) -> Block:
  return Block(k=opts.k, net=build_net(opts, "dflash", sparse=False))
