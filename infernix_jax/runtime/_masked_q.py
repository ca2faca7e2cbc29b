"""Masked q on the device: a sampling drafter's q restricted to the grammar's legal set.

Axis letters (docs/CONTRACTS.md): B lanes, K drafts, P = K + 1 positions, W mask words,
Vm logits width, J sparse candidates.

At every constrained Ready position with legal mass, q' = norm(q * 1[A]); the first illegal
draft of a row is redrawn from q'. Drawing from q and redrawing illegal draws from q' yields
exactly q' at that position, so acceptance with (p, q') stays exact (DESIGN.md section 5)
and accepts more. The redrawn draft ends the row's drafts: the target verified the old one
at that position, so the position after it becomes Unreachable and no bonus follows. Runs
inside Finish: q never leaves the device.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from infernix_jax import mask_layout
from infernix_jax.pallas import DenseQ, OneHotQ, SparseQ
from infernix_jax.pallas import rng

MASKED_Q_PURPOSE = 0x6D71  # "mq": the redraw stream (distinct from the target's draws)


def _bit(mask, ids):
  """Whether ids [B, K, ...] are set in mask words [B, K, W] (ids outside [0, 32 W) -> False)."""
  w = mask.shape[-1]
  safe = jnp.clip(ids, 0, w * 32 - 1)
  words = jnp.take_along_axis(mask, (safe >> 5).reshape(mask.shape[:2] + (-1,)), axis=-1)
  words = words.reshape(ids.shape)
  return ((jax.lax.shift_right_logical(words, safe & 31) & 1) == 1) & (ids >= 0) & (
      ids < w * 32)


def apply(q, mask, enabled, states, drafts, n_drafts, seed, position, vocab_size: int):
  """Masks q by the grammar and redraws each row's first illegal draft from q'.

  Args:
    q: OneHotQ | SparseQ (ids/probs [B, K, J]) | DenseQ (probs [B, K, Vm]).
    mask: i32[B, P, W]; enabled: bool[B]; states: int8[B, P] from the host lookahead.
    drafts: i32[B, K]; n_drafts: i32[B].
    seed: u32[B]; position: i32[B] logical position of each row's first produced token.
    vocab_size: V (ids >= V are never legal).

  Returns:
    (q', drafts, n_drafts, states) for Finish.
  """
  if isinstance(q, OneHotQ):
    return q, drafts, n_drafts, states
  b, k = drafts.shape
  step = jnp.arange(k, dtype=jnp.int32)
  words = mask[:, :k]  # [B, K, W]
  ready = (enabled[:, None] & (states[:, :k] == mask_layout.READY)
           & (step[None, :] < n_drafts[:, None]))  # [B, K]
  if isinstance(q, DenseQ):
    vm = q.probs.shape[-1]
    ids = jnp.broadcast_to(jnp.arange(vm, dtype=jnp.int32), (b, k, vm))
    legal = _bit(words, ids) & (ids < vocab_size)  # [B, K, Vm]
    probs = q.probs
  else:
    legal = _bit(words, q.ids) & (q.ids < vocab_size)  # [B, K, J]
    probs = q.probs
  masked = jnp.where(legal, probs, 0.0)
  z = masked.sum(-1)  # [B, K]
  use = ready & (z > 0)
  new_probs = jnp.where(use[..., None], masked / jnp.where(use, z, 1.0)[..., None], probs)
  legal_draft = _bit(words, drafts) & (drafts < vocab_size)  # [B, K]
  illegal = ready & ~legal_draft
  first = jnp.argmax(illegal, axis=1).astype(jnp.int32)  # [B]
  redraw = illegal.any(axis=1) & jnp.take_along_axis(use, first[:, None], axis=1)[:, 0]
  row = jnp.take_along_axis(new_probs, first[:, None, None], axis=1)[:, 0]  # [B, Vm | J]
  cdf = jnp.cumsum(row.astype(jnp.float32), axis=-1)
  u = rng.uniform(seed, position + first, MASKED_Q_PURPOSE)  # [B]
  pick = jax.vmap(lambda c, x: jnp.searchsorted(c, x, side="right"))(cdf, u * cdf[:, -1])
  pick = jnp.minimum(pick, row.shape[-1] - 1).astype(jnp.int32)
  if isinstance(q, SparseQ):
    cand = jnp.take_along_axis(q.ids, first[:, None, None], axis=1)[:, 0]  # [B, J]
    new = jnp.take_along_axis(cand, pick[:, None], axis=1)[:, 0]
    q_out = SparseQ(ids=q.ids, probs=new_probs.astype(q.probs.dtype))
  else:
    new = pick
    q_out = DenseQ(new_probs.astype(q.probs.dtype))
  at = redraw[:, None] & (step[None, :] == first[:, None])  # [B, K]
  drafts = jnp.where(at, new[:, None], drafts)
  n_drafts = jnp.where(redraw, first + 1, n_drafts)
  pos = jnp.arange(states.shape[1], dtype=jnp.int32)
  states = jnp.where(redraw[:, None] & (pos[None, :] > first[:, None]),
                     jnp.asarray(mask_layout.UNREACHABLE, states.dtype), states)
  return q_out, drafts, n_drafts, states


def drop_illegal(mask, enabled, states, drafts, n_drafts, vocab_size: int):
  """The WRONG rule the exactness study demonstrates (DESIGN.md section 5's counter-example):
  each row's drafts are cut before its first illegal one, so an illegal draft is dropped and
  a bonus token is drawn from p at its position instead of being rejected with its real q.

  Args:
    mask: i32[B, P, W]; enabled: bool[B]; states: int8[B, P]; drafts: i32[B, K];
    n_drafts: i32[B].

  Returns:
    n_drafts i32[B] (no greater than before).
  """
  b, k = drafts.shape
  if k == 0:  # a round narrowed to no drafts
    return n_drafts
  step = jnp.arange(k, dtype=jnp.int32)
  ready = (enabled[:, None] & (states[:, :k] == mask_layout.READY)
           & (step[None, :] < n_drafts[:, None]))
  illegal = ready & ~(_bit(mask[:, :k], drafts) & (drafts < vocab_size))
  first = jnp.argmax(illegal, axis=1).astype(jnp.int32)
  return jnp.where(illegal.any(axis=1), jnp.minimum(n_drafts, first), n_drafts)
