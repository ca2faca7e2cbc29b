"""Sparse block drafting (DFlash2 style): drafts sampled from the top-16, q sparse."""

from __future__ import annotations

import dataclasses

from infernix_jax.runtime.drafters._net import NetDrafter
from infernix_jax.runtime.drafters._trained import TrainedOptions
from infernix_jax.runtime.drafters.base import OptionError
from infernix_jax.runtime.drafters.dflash import build_net


@dataclasses.dataclass(frozen=True)
class Options(TrainedOptions):
  """The sparse block drafter's options."""

  temperature: float = 1.0  # the temperature its top-16 drafts are sampled at

  def validate(self) -> None:
    super().validate()
    if isinstance(self.temperature, bool) or not (
        isinstance(self.temperature, (int, float)) and self.temperature > 0):
      raise OptionError("temperature", f"temperature={self.temperature!r} must be > 0")


@dataclasses.dataclass(frozen=True, eq=False)
class SparseBlock(NetDrafter):
  """`models.drafters.DFlashDrafter(sparse=True)` on the device: q = SparseQ [B, K, 16]."""

  name = "dflash2"
  sampled_q = "sparse"  # its temperature is always > 0


def build(options: Options, context) -> SparseBlock:
  return SparseBlock(k=options.k, net=build_net(options, context, "dflash2", sparse=True,
                                                temperature=float(options.temperature)))
