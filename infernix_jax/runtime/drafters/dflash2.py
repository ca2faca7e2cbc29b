"""Sparse block drafting (DFlash2 style): drafts sampled from the top-16, q sparse."""

from __future__ import annotations

import dataclasses

from infernix_jax.runtime.drafters._net import NetDrafter
from infernix_jax.runtime.drafters.dflash import build_net


@dataclasses.dataclass(frozen=True, eq=False)
class SparseBlock(NetDrafter):
  """`models.drafters.DFlashDrafter(sparse=True)` on the device: q = SparseQ [B, K, 16]."""

  name = "dflash2"
  q_kind = "sparse"
  sampling = True


def build(opts) -> SparseBlock:
  return SparseBlock(k=opts.k, net=build_net(opts, "dflash2", sparse=True))
