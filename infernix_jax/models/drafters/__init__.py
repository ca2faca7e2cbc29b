"""Drafter networks behind one interface: propose(dstate, ctx, keys) -> (ids [B, K], q, dstate)."""

from infernix_jax.models.drafters.base import DraftContext, Drafter, TargetHead
from infernix_jax.models.drafters.dflash import DFlashDrafter, DFlashNet, propose_dflash
from infernix_jax.models.drafters.draft_model import DraftModelDrafter, propose_draft_model
from infernix_jax.models.drafters.mtp import MTPDrafter, MTPHead, propose_mtp

__all__ = ["DraftContext", "Drafter", "TargetHead", "DFlashDrafter", "DFlashNet",
           "DraftModelDrafter", "MTPDrafter", "MTPHead", "propose_dflash",
           "propose_draft_model", "propose_mtp"]
