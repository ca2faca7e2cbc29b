"""Exact log-probabilities of produced tokens under the target distribution they came from.

Axis letters: B rows, P = K + 1 positions, Vm logits width, V vocabulary, W = ceil(V / 32)
mask words, N alternatives kept per position.

Position i of a row is the target p of DESIGN.md section 5 after the row's history and
tokens[:i] (penalties included, as in ``spec_accept``): at T > 0 the masked, penalised,
tempered and truncated p that ``masked_sample`` / ``spec_accept`` draw from; at T = 0 (greedy)
the masked, penalised distribution at T = 1 with no truncation (its argmax is the greedy
token). A plain jnp computation: it runs only for rows that asked for log-probabilities.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from infernix_jax.pallas import _sampling
from infernix_jax.pallas._types import SamplingParams
from infernix_jax.pallas.masked_sample import _prepare_logits
from infernix_jax.pallas.spec_accept import _penalty_prefix, _repeat_params


class TokenLogprobs(NamedTuple):
  """Per row and position: the produced token's log p and the N most probable tokens."""
  logprob: jax.Array      # f32[B, P]: log p(tokens[:, i]) (-inf outside the support / -1)
  top_ids: jax.Array      # i32[B, P, N] by decreasing p
  top_logprobs: jax.Array  # f32[B, P, N] (-inf past the support)


@functools.partial(jax.jit, static_argnames=["vocab_size", "top"])
def token_logprobs_reference(logits, mask, mask_enabled, tokens, params: SamplingParams, *,
                             vocab_size: int, top: int) -> TokenLogprobs:
  """Log-probabilities of ``tokens`` and the top-N of each position's target distribution.

  Args:
    logits: [B, P, Vm] target logits, position i conditioned on tokens[:, :i].
    mask: i32[B, P, W] packed legal sets, or None (no row constrained).
    mask_enabled: bool[B] (None with mask None).
    tokens: i32[B, P] the produced tokens (accepted drafts, then the correction or bonus;
      -1 after): the hypothetical history of position i is tokens[:, :i].
    params: SamplingParams with leading axis B.
    vocab_size: V. top: N (static; 0 keeps no alternatives).

  Returns:
    TokenLogprobs.
  """
  b, p, vm = logits.shape
  k = p - 1
  rp = _repeat_params(params, p)
  z = _prepare_logits(logits.reshape(b * p, vm), rp,
                      _penalty_prefix(tokens[:, :k], p).reshape(b * p, k) if k else None)
  z = z.astype(jnp.float32)
  if mask is None:
    mask, mask_enabled = jnp.zeros((b, p, 1), jnp.int32), jnp.zeros((b,), bool)
  legal = _sampling.unpack_legal(mask.reshape(b * p, -1).astype(jnp.int32),
                                 jnp.repeat(mask_enabled, p), vocab_size, vm)   # [R, Vm]
  th = _sampling.thresholds(z, legal, rp.temperature, rp.top_k, rp.top_p, rp.min_p,
                            greedy_all=False)
  s = _sampling.dense_support(z, legal, th)
  sampled = jnp.where(s.cand, s.zt - th.m[:, None]
                      - jnp.log(jnp.maximum(s.total, 1e-38))[:, None], -jnp.inf)
  fin = legal & jnp.isfinite(z)
  zf = jnp.where(fin, z, -jnp.inf)
  greedy = zf - jax.nn.logsumexp(zf, axis=-1, keepdims=True)
  logp = jnp.where((rp.temperature > 0)[:, None], sampled, greedy)
  logp = jnp.where((th.flags == 0)[:, None], logp, -jnp.inf)                  # [R, Vm]
  flat = tokens.reshape(b * p)
  inside = (flat >= 0) & (flat < vm)
  got = jnp.take_along_axis(logp, jnp.clip(flat, 0, vm - 1)[:, None], -1)[:, 0]
  got = jnp.where(inside, got, -jnp.inf).reshape(b, p)
  if top:
    top_lp, top_ids = jax.lax.top_k(logp, min(top, vm))
  else:
    top_lp, top_ids = jnp.zeros((b * p, 0), jnp.float32), jnp.zeros((b * p, 0), jnp.int32)
  return TokenLogprobs(got, top_ids.astype(jnp.int32).reshape(b, p, -1),
                       top_lp.reshape(b, p, -1))
