"""min_tokens on the device: EOS taken out of the legal set until a lane's output is long enough.

Axis letters (docs/CONTRACTS.md): B lanes, P positions of the round, W mask words.

A lane whose output has `n` tokens and asks for `min_tokens = m > n` may not produce EOS at
the round's positions i < m - n (`eos_block`). The ban is one more mask on top of the
grammar's, applied to the round's masks before Finish, so masked sampling, acceptance (p(EOS)
= 0: an EOS draft is rejected and the residual sampled) and masked q (q' = norm(q * 1[A]):
an EOS draft of a sampling drafter is redrawn) all see the same legal set A. Unconstrained
lanes get a mask of every id < V for the rounds they need one (no mask is built otherwise).
Where the grammar allows EOS alone, the ban is not applied: the constraint forces the end,
and the request ends there with fewer than min_tokens tokens (the result's
`min_tokens_unmet`), never a dead end or a hang.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from infernix_jax import mask_layout


@functools.lru_cache(maxsize=None)
def _words(vocab_size: int, eos_ids: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
  """(every id < V, the EOS ids) as packed words i32[W] each."""
  every = mask_layout.pack(np.ones(vocab_size, bool))
  eos = np.zeros(vocab_size, bool)
  eos[[t for t in eos_ids if 0 <= t < vocab_size]] = True
  return every, mask_layout.pack(eos)


def apply(mask, states, enabled, eos_block, depth=None, *, positions: int, vocab_size: int,
          eos_ids: tuple[int, ...]):
  """Masks with EOS banned at each lane's positions i < eos_block.

  Args:
    mask: i32[B, P, W] packed legal sets, or None (no lane constrained this round).
    states: int8[B, P] (None with mask None); enabled: bool[B] (None with mask None).
    eos_block: i32[B] positions from the round's first at which EOS is banned (0: none).
    depth: i32[B, P] each position's offset from the round's first output (a draft tree's
      node depths); None: a chain's 0 .. P - 1.
    positions: P; vocab_size: V; eos_ids: the vocabulary's EOS ids (static).

  Returns:
    (mask i32[B, P, W], states int8[B, P], enabled bool[B]): lanes with eos_block > 0 are
    enabled (unconstrained ones Ready everywhere with every id < V legal), EOS bits cleared
    at banned positions that keep another legal id; other lanes unchanged.
  """
  every, eos = _words(vocab_size, eos_ids)
  b = eos_block.shape[0]
  if mask is None:
    mask = jnp.zeros((b, positions, every.shape[0]), jnp.int32)
    states = jnp.full((b, positions), mask_layout.UNREACHABLE, jnp.int8)
    enabled = jnp.zeros((b,), bool)
  need = eos_block > 0                                                          # [B]
  base = jnp.where(enabled[:, None, None], mask, jnp.asarray(every)[None, None])  # [B, P, W]
  cleared = base & ~jnp.asarray(eos)[None, None]
  offset = jnp.arange(positions)[None, :] if depth is None else depth          # [B, P]
  banned = offset < eos_block[:, None]                                          # [B, P]
  ban = banned & jnp.any(cleared != 0, axis=-1)
  mask = jnp.where(need[:, None, None], jnp.where(ban[..., None], cleared, base), mask)
  states = jnp.where((need & ~enabled)[:, None], jnp.asarray(mask_layout.READY, states.dtype),
                     states)
  return mask, states, enabled | need
