"""The jitted stages of one decode round: Forward (draft + verify) and Finish (accept).

Axis letters (docs/CONTRACTS.md): B lanes, K drafts, P = K + 1 positions, Vm logits width,
W mask words, D model width, T prompt length, S cache capacity.

Both stages are module-level `jax.jit` functions over `(graphdef, state)` of the target with
the KV cache (and the device drafter's state) donated; everything that changes between
rounds is a traced argument, so each engine compiles each stage once.
"""

from __future__ import annotations

import functools
import jax
import jax.numpy as jnp

from infernix_jax.runtime import _deps

__all__ = ["clear_rows", "finish_core", "finish_stage", "forward_core", "forward_stage",
           "prefill_row", "propose_stage", "update_stage", "verify_stage"]


def forward_core(graphdef, state, cache, lengths, anchor, host_drafts, host_n, use_host,
                 seed, position, drafter, dparams, dstate):
  """Traced body of the Forward stage (shared by the `stages` and `callback` bridges).

  Args:
    graphdef: the target's static graph (from `nnx.split`).
    state: the target's parameters.
    cache: the target KVCache (donated by the jitted wrappers).
    lengths: committed KV length per lane, i32[B] (commit / rollback = these values).
    anchor: the last committed token per lane, not yet in the cache, i32[B].
    host_drafts: drafts proposed on the host (n-gram, jump-forward), i32[B, K].
    host_n: how many of host_drafts are real per lane, i32[B].
    use_host: lanes whose drafts come from the host even with a device drafter, bool[B].
    seed: u32[B] request seeds; position: i32[B] logical output position (sampling drafters
      draw from counter-based keys of both, so drafts are independent across requests).
    drafter: the static drafter (its `device_propose` is traced here when it has one).
    dparams: the device drafter's parameters (a pytree; None for host drafters).
    dstate: the device drafter's state (a pytree; donated).

  Returns:
    (drafts i32[B, K], n_drafts i32[B], q, logits f32[B, P, Vm], hidden [B, P, D], cache,
    dstate), q in the pallas q types (OneHotQ / SparseQ / DenseQ).
  """
  drafts, n_drafts, q, dstate = propose_core(anchor, lengths, host_drafts, host_n, use_host,
                                             seed, position, drafter, dparams, dstate)
  logits, hidden, cache = verify_core(graphdef, state, cache, lengths, anchor, drafts)
  return drafts, n_drafts, q, logits, hidden, cache, dstate


def propose_core(anchor, lengths, host_drafts, host_n, use_host, seed, position, drafter,
                 dparams, dstate):
  """The drafter half of Forward: (drafts i32[B, K], n_drafts i32[B], q, dstate)."""
  if not drafter.device:
    return host_drafts, host_n, _deps.onehot_q(), dstate
  drafts, n_drafts, q, dstate = drafter.device_propose(dparams, dstate, anchor, lengths,
                                                       host_drafts, use_host, seed, position)
  drafts = jnp.where(use_host[:, None], host_drafts, drafts)  # [B, K]
  n_drafts = jnp.where(use_host, host_n, n_drafts)
  q = drafter.host_rows_one_hot(q, host_drafts, use_host)
  return drafts, n_drafts, q, dstate


def verify_core(graphdef, state, cache, lengths, anchor, drafts):
  """The target half of Forward: verify over [anchor, drafts] -> (logits, hidden, cache)."""
  cache = cache.with_lengths(lengths)
  tokens = jnp.concatenate([anchor[:, None], drafts], axis=1)  # [B, P]
  return _deps.verify(graphdef, state, cache, tokens)


@functools.partial(jax.jit, static_argnames=("drafter",), donate_argnames=("dstate",))
def propose_stage(anchor, lengths, host_drafts, host_n, use_host, seed, position, *, drafter,
                  dparams, dstate):
  """Forward, part 1 (jitted): the device drafter's proposal."""
  return propose_core(anchor, lengths, host_drafts, host_n, use_host, seed, position, drafter,
                      dparams, dstate)


@functools.partial(jax.jit, static_argnames=("graphdef",), donate_argnames=("cache",))
def verify_stage(graphdef, state, cache, lengths, anchor, drafts):
  """Forward, part 2 (jitted): the target verify over [anchor, drafts]."""
  return verify_core(graphdef, state, cache, lengths, anchor, drafts)


def forward_stage(graphdef, state, cache, lengths, anchor, host_drafts, host_n, use_host, seed,
                  position, *, drafter, dparams, dstate):
  """Forward stage of the `stages` bridge: proposal, then the target verify.

  Two jitted dispatches rather than one program, so the draft ids are ready (and read back
  by the host for lookahead) while the target's verify is still running: JAX's async
  dispatch gives the overlap of DESIGN.md section 1. Host drafters skip the proposal.
  """
  if drafter.device:
    drafts, n_drafts, q, dstate = propose_stage(anchor, lengths, host_drafts, host_n, use_host,
                                                seed, position, drafter=drafter,
                                                dparams=dparams, dstate=dstate)
  else:
    drafts, n_drafts, q = host_drafts, host_n, _deps.onehot_q()
  logits, hidden, cache = verify_stage(graphdef, state, cache, lengths, anchor, drafts)
  return drafts, n_drafts, q, logits, hidden, cache, dstate


def finish_core(logits, mask, mask_enabled, states, drafts, n_drafts, q, params, seed,
                position, vocab_size: int):
  """Traced body of the Finish stage: masked sampling transforms + acceptance with real q.

  Args:
    logits: f32[B, P, Vm] from Forward.
    mask: packed legal sets i32[B, P, W] (ignored for disabled rows).
    mask_enabled: bool[B], False for unconstrained rows (no all-ones mask exists).
    states: int8[B, P] READY / DEAD_END / UNREACHABLE per position.
    drafts: i32[B, K]; n_drafts: i32[B] real extent per row.
    q: the distribution that really produced the drafts (pallas OneHotQ/SparseQ/DenseQ).
    params: pallas SamplingParams, per row.
    seed: u32[B]; position: i32[B] logical position of the row's first produced token.
    vocab_size: V, the tokenizer size (ids >= V are never produced).

  Returns:
    (accepted i32[B], tokens i32[B, P], flags i32[B]) as pallas `spec_accept`.
  """
  out = _deps.spec_accept(logits, mask, mask_enabled, states, drafts, n_drafts, q, params,
                          seed, position, vocab_size=vocab_size)
  return out.accepted, out.tokens, out.flags


@functools.partial(jax.jit, static_argnames=("vocab_size",))
def finish_stage(logits, mask, mask_enabled, states, drafts, n_drafts, q, params, seed,
                 position, *, vocab_size: int):
  """Finish stage (jitted): see `finish_core`."""
  return finish_core(logits, mask, mask_enabled, states, drafts, n_drafts, q, params, seed,
                     position, vocab_size)


@functools.partial(jax.jit, static_argnames=("drafter",), donate_argnames=("dstate",))
def update_stage(dparams, dstate, hidden, accepted, tokens, *, drafter):
  """Device drafter state after a commit (MTP/DFlash take the round's tokens and hidden)."""
  return drafter.device_update(dparams, dstate, hidden, accepted, tokens)


def prefill_row(graphdef, state, cache, tokens, counts):
  """Prefills right-padded prompts: row b appends tokens[b, :counts[b]] (0 = untouched).

  Args:
    cache: the batch cache with lengths set to each row's start (0 for new prompts).
    tokens: i32[B, T] (T a padded bucket); counts: i32[B].

  Returns:
    (hidden [B, T, D], cache with lengths advanced by counts).
  """
  _, hidden, cache = _deps.prefill(graphdef, state, cache, tokens, counts)
  return hidden, cache


@functools.partial(jax.jit, donate_argnames=("cache",))
def clear_rows(cache, rows):
  """Zeros the keys/values of lanes `rows` (bool[B]).

  After a row fails with non-finite values, its lane's scratch may hold NaN; attention
  multiplies masked positions by 0, and 0 * NaN would poison the lane's next request.
  """
  keep = ~rows[None, :, None, None, None]
  return type(cache)(k=jnp.where(keep, cache.k, 0), v=jnp.where(keep, cache.v, 0),
                     lengths=cache.lengths)


def bucket(n: int, minimum: int = 16) -> int:
  """The padded length for n prompt tokens: powers of two (few compiles)."""
  size = minimum
  while size < n:
    size *= 2
  return size

