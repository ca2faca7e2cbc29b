"""Multi-token prediction: a one-layer head on the target's hidden state drafts K tokens."""

from __future__ import annotations

import dataclasses

from infernix_jax.runtime.drafters._net import NetDrafter


@dataclasses.dataclass(frozen=True, eq=False)
class MTP(NetDrafter):
  """`models.drafters.MTPDrafter` on the device: greedy, q one-hot; shares the target's
  embedding and LM head."""

  name = "mtp"


def build(opts) -> MTP:
  """An MTP head on `opts.target` = (cfg, model) (random weights, seeded by opts.seed)."""
  from flax import nnx

  from infernix_jax.models import drafters as md
  cfg, model = _target(opts, "mtp")
  head = md.TargetHead.from_model(model)
  net = md.MTPDrafter.create(md.MTPHead(cfg, rngs=nnx.Rngs(opts.seed)), head, opts.k)
  return MTP(k=opts.k, net=net)


def _target(opts, name: str):
  if opts.target is None:
    raise ValueError(f"the {name!r} drafter needs the target model (it shares its head)")
  return opts.target
