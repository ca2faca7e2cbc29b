"""Multi-token prediction: a one-layer head on the target's hidden state drafts K tokens."""

from __future__ import annotations

import dataclasses

from infernix_jax.runtime.drafters._net import NetDrafter
from infernix_jax.runtime.drafters._trained import network, target_of


@dataclasses.dataclass(frozen=True, eq=False)
class MTP(NetDrafter):
  """`models.drafters.MTPDrafter` on the device: greedy, q one-hot; shares the target's
  embedding and LM head."""

  name = "mtp"


def build(opts) -> MTP:
  """An MTP head on `opts.target` = (cfg, model) with the weights `opts.weights` names
  (default: the trained head shipped for the embedded model)."""
  from flax import nnx

  from infernix_jax.models import drafters as md
  _, model = target_of(opts, "mtp")
  head = md.TargetHead.from_model(model)
  net = network(opts, "mtp", "mtp", lambda cfg: md.MTPHead(cfg, rngs=nnx.Rngs(opts.seed)))
  return MTP(k=opts.k, net=md.MTPDrafter.create(net, head, opts.k))
