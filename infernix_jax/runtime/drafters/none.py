"""Ordinary decoding: no drafts, one token per round (K = 0)."""

from __future__ import annotations

import dataclasses

from infernix_jax.runtime.drafters.base import Drafter


@dataclasses.dataclass(frozen=True, eq=False)
class NoDrafter(Drafter):
  """K = 0: the round verifies the anchor alone and samples one token."""

  k: int = 0

  def __post_init__(self):
    if self.k != 0:
      raise ValueError(f"the 'none' drafter has k=0, got k={self.k}")


def build(options, context) -> NoDrafter:
  """Ordinary decoding (the `NoOptions` of the registry: nothing to set)."""
  return NoDrafter()
