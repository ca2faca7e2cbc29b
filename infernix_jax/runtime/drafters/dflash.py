"""Block drafting (DFlash style): one network call drafts all K tokens from the target's
hidden states; greedy, q one-hot."""

from __future__ import annotations

import dataclasses

from infernix_jax.runtime.drafters._net import NetDrafter
from infernix_jax.runtime.drafters.mtp import _target


@dataclasses.dataclass(frozen=True, eq=False)
class Block(NetDrafter):
  """`models.drafters.DFlashDrafter(sparse=False)` on the device."""

  name = "dflash"


def build_net(opts, name: str, sparse: bool):
  """A one-layer block network on `opts.target` (random weights, seeded by opts.seed)."""
  from flax import nnx

  from infernix_jax.models import drafters as md
  cfg, model = _target(opts, name)
  head = md.TargetHead.from_model(model)
  net = md.DFlashNet(cfg.replace(num_layers=1), cfg.dim, rngs=nnx.Rngs(opts.seed))
  return md.DFlashDrafter.create(net, head, opts.k, sparse=sparse, temperature=opts.temperature)


def build(opts) -> Block:
  return Block(k=opts.k, net=build_net(opts, "dflash", sparse=False))
