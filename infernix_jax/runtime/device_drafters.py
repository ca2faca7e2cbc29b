"""Device drafters: proposals computed inside the Forward stage (draft model, MTP, DFlash).

Axis letters: B lanes, K drafts, Vm logits width, D width, S cache capacity, J candidates.

Each device drafter is a frozen object (static jit argument) with pure, traced hooks:
  device_propose(dparams, dstate, anchor, lengths, host_drafts, use_host, seed, position)
      -> (drafts i32[B, K], n_drafts i32[B], q, dstate)
  device_update(dparams, dstate, hidden [B, P, D], accepted i32[B], tokens i32[B, P])
      -> dstate
and host hooks: init_device(engine) -> (dparams, dstate), prefill_rows(engine, prompts,
hidden) -> dstate (prompts: lane -> ids; hidden: the target prefill's [B, T, D]),
and q conversions for masked q (`q_to_host`, `q_from_host`, ...).
Rows whose drafts come from the host (jump-forward) feed those drafts through the drafter's
own state so it stays consistent with what the target verifies.
"""

from __future__ import annotations

import dataclasses
import jax
import jax.numpy as jnp
import numpy as np

from infernix_jax.runtime import _deps
from infernix_jax.runtime.drafters import Drafter

__all__ = ["make"]


@dataclasses.dataclass(frozen=True, eq=False)
class _DeviceDrafter(Drafter):
  """Shared plumbing of device drafters."""

  device = True

  def host_rows_one_hot(self, q, host_drafts, use_host):
    """q with the host-drafted rows replaced by one-hot q of their drafts."""
    if self.q_kind == "onehot":
      return q
    if self.q_kind == "dense":
      vm = q.probs.shape[-1]
      oh = jax.nn.one_hot(host_drafts, vm, dtype=q.probs.dtype)  # [B, K, Vm]
      return _deps.dense_q(jnp.where(use_host[:, None, None], oh, q.probs))
    ids = jnp.where(use_host[:, None, None], jnp.full_like(q.ids, -1), q.ids)
    ids = ids.at[:, :, 0].set(jnp.where(use_host[:, None], host_drafts, ids[:, :, 0]))
    probs = jnp.where(use_host[:, None, None], jnp.zeros_like(q.probs), q.probs)
    probs = probs.at[:, :, 0].set(jnp.where(use_host[:, None], 1.0, probs[:, :, 0]))
    return _deps.sparse_q(ids, probs)

  def device_update(self, dparams, dstate, hidden, accepted, tokens):
    return dstate

  def clear_rows(self, dstate, rows):
    """Zeros lanes `rows` (bool[B]) of the drafter's cache after a non-finite failure."""
    from infernix_jax.runtime import stages
    return stages.clear_rows(dstate, rows)

  # Masked-q transfers (sampling drafters only).
  def q_to_host(self, q):
    leaves = jax.device_get(jax.tree.leaves(q))
    return self.q_leaves_to_host(leaves)

  def q_leaves_to_host(self, leaves):
    arrays = [np.array(x, copy=True) for x in leaves]
    if self.q_kind == "dense":
      return ("dense", arrays[0])
    ids, probs = (arrays if arrays[0].dtype.kind == "i" else arrays[::-1])
    return ("sparse", ids, probs)

  def q_host_to_leaves(self, q_host):
    if q_host[0] == "dense":
      return (q_host[1],)
    leaves = jax.tree.leaves(_deps.sparse_q(q_host[1], q_host[2]))
    return tuple(np.asarray(x) for x in leaves)

  def q_from_host(self, q_host):
    if q_host[0] == "dense":
      return _deps.dense_q(jnp.asarray(q_host[1]))
    return _deps.sparse_q(jnp.asarray(q_host[1]), jnp.asarray(q_host[2]))


def make(name: str, *, k: int, target=None, draft_model=None, sampling: bool = False,
         seed: int = 0, vocab_size: int = 0) -> Drafter:
  """A device drafter by name ("draft", "mtp", "dflash", "dflash2").

  Every one is a `models/drafters` network behind `runtime/_net_drafters.NetDrafter`. The
  draft model ("draft", `models.drafters.DraftModelDrafter`) drafts over its whole logits
  width (`vocab_size` is accepted for compatibility and unused: a draft id >= V is rejected
  by the target's verification, which keeps the output exact); sampling draws at
  temperature 1 with dense q.
  """
  from infernix_jax.runtime import _net_drafters
  del vocab_size
  if name == "draft":
    if draft_model is None:
      raise ValueError("the draft-model drafter needs a draft model (cfg, model)")
    cfg = draft_model[0]
    if target is not None and target[0].vocab_size != cfg.vocab_size:
      raise ValueError(f"the draft model's vocabulary ({cfg.vocab_size} logits) differs from "
                       f"the target's ({target[0].vocab_size}); a draft model must share it")
    return _net_drafters.make_draft_model(k=k, draft_model=draft_model, target=target,
                                          sampling=sampling)
  return _net_drafters.make(name, k=k, target=target, seed=seed)
