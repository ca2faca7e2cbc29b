"""Speculative acceptance under packed grammar masks (rejection sampling of arXiv 2211.17192).

Axis letters: B rows, K drafts, P = K + 1 positions, Vm logits width, V vocabulary,
W = ceil(V / 32) mask words, J = 16 sparse candidates. A token tree (several candidates per
position) is ``tree_accept``; this chain is its special case, token for token.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from infernix_jax.mask_layout import DEAD_END, UNREACHABLE
from infernix_jax.pallas import _sampling, _stream, rng
from infernix_jax.pallas._types import (FLAG_DEAD_END, DenseQ, OneHotQ, PURPOSE_SAMPLE,
                                        SamplingParams, SparseQ)
from infernix_jax.pallas.masked_sample import (BlockSizes, _gpu_params, _prepare_logits,
                                               block_words_for, pack_row_params, pad_mask,
                                               pad_vocab)


class SpecResult(NamedTuple):
  """Result of one verification round per row."""
  accepted: jax.Array  # i32[B]: drafts accepted (0..n_drafts)
  tokens: jax.Array    # i32[B, P]: accepted drafts, then the correction or bonus; -1 after
  flags: jax.Array     # i32[B]: FLAG_DEAD_END | FLAG_NONFINITE | FLAG_EMPTY


def _check(logits, mask, mask_enabled, states, drafts, n_drafts, q, vocab_size):
  if logits.ndim != 3:
    raise ValueError(f"{logits.shape=} must be [B, P, Vm]")
  b, p, vm = logits.shape
  if drafts.shape != (b, p - 1):
    raise ValueError(f"{drafts.shape=} must be [B={b}, K={p - 1}] (logits have P = K + 1)")
  if not 0 < vocab_size <= vm:
    raise ValueError(f"{vocab_size=} must be in (0, Vm={vm}]")
  w = -(-vocab_size // 32)
  if mask is not None and mask.shape != (b, p, w):
    raise ValueError(f"{mask.shape=} must be [B={b}, P={p}, W={w}]")
  if mask is not None and states.shape != (b, p):
    raise ValueError(f"{states.shape=} must be [B={b}, P={p}]")
  if n_drafts.shape != (b,) or (mask_enabled is not None and mask_enabled.shape != (b,)):
    raise ValueError(f"{n_drafts.shape=} and mask_enabled must be [B={b}]")
  if isinstance(q, SparseQ) and (q.ids.shape != q.probs.shape or q.ids.shape[:2] != (b, p - 1)):
    raise ValueError(f"{q.ids.shape=}, {q.probs.shape=} must both be [B={b}, K={p - 1}, J]")
  if isinstance(q, DenseQ) and q.probs.shape != (b, p - 1, vm):
    raise ValueError(f"{q.probs.shape=} must be [B={b}, K={p - 1}, Vm={vm}]")
  if not isinstance(q, (OneHotQ, SparseQ, DenseQ)):
    raise ValueError(f"q must be OneHotQ, SparseQ or DenseQ, got {type(q).__name__}")
  return b, p, vm


def _penalty_prefix(drafts, p):
  """i32[B, P, K]: drafts[:i] at position i (-1 elsewhere): the hypothetical history."""
  k = drafts.shape[1]
  before = jnp.arange(k)[None, :] < jnp.arange(p)[:, None]                     # [P, K]
  return jnp.where(before[None], drafts[:, None, :], -1)


def _repeat_params(params: SamplingParams, p: int) -> SamplingParams:
  return jax.tree.map(lambda x: jnp.repeat(x, p, axis=0), params)


def _dense_q(q, drafts, vm):
  """f32[B, K, Vm] proposal distribution."""
  if isinstance(q, DenseQ):
    return q.probs.astype(jnp.float32)
  if isinstance(q, OneHotQ):
    return (jnp.arange(vm)[None, None, :] == drafts[..., None]).astype(jnp.float32)
  b, k, j = q.ids.shape
  safe = jnp.where((q.ids >= 0) & (q.ids < vm), q.ids, vm)
  bi = jnp.broadcast_to(jnp.arange(b)[:, None, None], safe.shape)
  ki = jnp.broadcast_to(jnp.arange(k)[None, :, None], safe.shape)
  return jnp.zeros((b, k, vm), jnp.float32).at[bi, ki, safe].add(
      q.probs.astype(jnp.float32), mode="drop")


def _q_of_draft(q, drafts, vm):
  """f32[B, K]: q(d), the probability the drafter gave its own draft."""
  if isinstance(q, OneHotQ):
    return jnp.ones(drafts.shape, jnp.float32)
  if isinstance(q, SparseQ):
    return jnp.sum(jnp.where(q.ids == drafts[..., None], q.probs.astype(jnp.float32), 0.0), -1)
  inside = (drafts >= 0) & (drafts < vm)
  got = jnp.take_along_axis(q.probs, jnp.clip(drafts, 0, vm - 1)[..., None], -1)[..., 0]
  return jnp.where(inside, got.astype(jnp.float32), 0.0)


@functools.partial(jax.jit, static_argnames=["vocab_size", "purpose"])
def spec_accept_reference(logits, mask, mask_enabled, states, drafts, n_drafts, q, params,
                          seed, position, *, vocab_size: int,
                          purpose: int = PURPOSE_SAMPLE) -> SpecResult:
  """Speculative acceptance in plain jnp (the production path off GPU).

  Rejection sampling of Leviathan et al., "Fast Inference from Transformers via Speculative
  Decoding" (arXiv 2211.17192), with the target p of DESIGN.md section 5 (grammar mask, then
  penalties over the hypothetical history, temperature, top-k over legal ids, min-p, top-p).
  At position i < n_drafts the draft d is accepted with probability min(1, p(d) / q(d)); the
  first rejection samples norm(max(p - q, 0)) (for one-hot q: p without d). An illegal draft
  has p(d) = 0 and is rejected with its real q, never dropped. When all n_drafts are
  accepted the bonus is sampled from p at position n_drafts. At temperature 0: accept iff
  d == argmax over legal, correction = that argmax. Reaching a DeadEnd position sets
  FLAG_DEAD_END and produces no token there; reaching an Unreachable position (after an
  accepted EOS) ends the row with no token; later columns never affect the result.

  Args:
    logits: [B, P, Vm] target logits (f32 or bf16), position i conditioned on drafts[:i].
    mask: i32[B, P, W] packed legal sets, or None when no row is constrained.
    mask_enabled: bool[B]; False rows are unconstrained (mask and states ignored).
    states: int8[B, P] mask_layout states (READY, DEAD_END, UNREACHABLE).
    drafts: i32[B, K]; n_drafts: i32[B] real extent of each row (<= K).
    q: OneHotQ(), SparseQ(ids [B, K, J], probs [B, K, J]) or DenseQ(probs [B, K, Vm]).
    params: SamplingParams with leading axis B.
    seed: u32[B]; position: i32[B] logical position of the first produced token.
    vocab_size: V. purpose: stream of the token draws (acceptance uses ACCEPT_COUNTER).

  Returns:
    SpecResult(accepted i32[B], tokens i32[B, P], flags i32[B]).
  """
  return _spec_accept(logits, mask, mask_enabled, states, drafts, n_drafts, q, params, seed,
                      position, vocab_size=vocab_size, purpose=purpose, one_residual=False)


@functools.partial(jax.jit, static_argnames=["vocab_size", "purpose"])
def spec_accept_one_residual(logits, mask, mask_enabled, states, drafts, n_drafts, q, params,
                             seed, position, *, vocab_size: int,
                             purpose: int = PURPOSE_SAMPLE) -> SpecResult:
  """``spec_accept_reference`` (same arguments and results, token for token) with one
  residual pass: every position's statistics in parallel, the walk in jnp, then the residual
  norm(max(p - q, 0)) only at each row's stopping position instead of at all K positions."""
  return _spec_accept(logits, mask, mask_enabled, states, drafts, n_drafts, q, params, seed,
                      position, vocab_size=vocab_size, purpose=purpose, one_residual=True)


def _at_position(q, drafts, j):
  """(q, drafts) of the one position j[b] of each row, as K = 1 inputs."""
  pick = lambda x: jnp.take_along_axis(x, j.reshape((-1,) + (1,) * (x.ndim - 1)), 1)
  if isinstance(q, DenseQ):
    q = DenseQ(pick(q.probs))
  elif isinstance(q, SparseQ):
    q = SparseQ(pick(q.ids), pick(q.probs))
  return q, pick(drafts)


def _spec_accept(logits, mask, mask_enabled, states, drafts, n_drafts, q, params, seed, position,
                 *, vocab_size: int, purpose: int, one_residual: bool) -> SpecResult:
  b, p, vm = _check(logits, mask, mask_enabled, states, drafts, n_drafts, q, vocab_size)
  k = p - 1
  n = jnp.clip(n_drafts, 0, k).astype(jnp.int32)
  if mask is None:
    mask = jnp.zeros((b, p, 1), jnp.int32)
    mask_enabled, states = jnp.zeros((b,), bool), jnp.zeros((b, p), jnp.int8)
  rp = _repeat_params(params, p)
  z = _prepare_logits(logits.reshape(b * p, vm), rp,
                      _penalty_prefix(drafts, p).reshape(b * p, k) if k else None)
  enabled_rows = jnp.repeat(mask_enabled, p)
  legal = _sampling.unpack_legal(mask.reshape(b * p, -1).astype(jnp.int32), enabled_rows,
                                 vocab_size, vm)
  s = _sampling.support(z.astype(jnp.float32), legal, rp.temperature, rp.top_k, rp.top_p,
                        rp.min_p)
  pos = position[:, None] + jnp.arange(p, dtype=jnp.int32)[None, :]            # [B, P]
  key = rng.stream_key(seed[:, None], pos, purpose).reshape(b * p)
  draw = _sampling.gumbel_argmax(s.zt, s.cand, key).reshape(b, p)             # bonus draws
  greedy = s.greedy.reshape(b, p)
  sampling = params.temperature > 0
  probs = _sampling.probabilities(s, rp.temperature).reshape(b, p, vm)

  # Acceptance at positions 0..K-1.
  pk = probs[:, :k]                                                            # [B, K, Vm]
  legal_d = (drafts >= 0) & (drafts < vocab_size)
  p_d = jnp.where(legal_d, jnp.take_along_axis(
      pk, jnp.clip(drafts, 0, vm - 1)[..., None], -1)[..., 0], 0.0)
  q_d = _q_of_draft(q, drafts, vm)
  u = rng.uniform(seed[:, None], pos[:, :k], purpose)
  accept = jnp.where(sampling[:, None], u * q_d < p_d, drafts == greedy[:, :k])

  def residual_draws(pk, q, drafts, keys):
    """The draws from norm(max(p - q, 0)) at [B, K'] positions (-1 where it is empty)."""
    kk = drafts.shape[1]
    res = jnp.maximum(pk - _dense_q(q, drafts, vm), 0.0)                       # [B, K', Vm]
    ok = res > 0
    return _sampling.gumbel_argmax(jnp.log(jnp.where(ok, res, 1.0)).reshape(b * kk, vm),
                                   ok.reshape(b * kk, vm), keys.reshape(-1)).reshape(b, kk)


  # Walk: the first position that stops the row.
  st = states.astype(jnp.int32)
  dead = mask_enabled[:, None] & (st == int(DEAD_END))
  unreach = mask_enabled[:, None] & (st == int(UNREACHABLE))
  pflags = s.flags.reshape(b, p)
  i = jnp.arange(p)[None, :]
  go_on = ~dead & ~unreach & (pflags == 0) & (i < n[:, None]) & jnp.pad(accept, ((0, 0), (0, 1)))
  e = jnp.argmin(go_on, axis=-1).astype(jnp.int32)                           # first stop
  at = lambda x: jnp.take_along_axis(x, e[:, None], -1)[:, 0]
  flags = jnp.where(at(dead), FLAG_DEAD_END, jnp.where(at(unreach), 0, at(pflags)))
  produced = ~at(dead) & ~at(unreach) & (at(pflags) == 0)
  keys = key.reshape(b, p)[:, :k]
  if k == 0:
    correction_e = jnp.full((b,), -1, jnp.int32)
  elif one_residual:
    # One residual pass: at the stopping position only (clipped: a row stopping at K, or
    # before any draft, uses the bonus or nothing, never this draw).
    j = jnp.minimum(e, k - 1)
    q_j, d_j = _at_position(q, drafts, j)
    pk_j = jnp.take_along_axis(pk, j[:, None, None], 1)                       # [B, 1, Vm]
    res_j = residual_draws(pk_j, q_j, d_j, jnp.take_along_axis(keys, j[:, None], 1))
    correction_e = jnp.where(sampling, jnp.where(
        res_j[:, 0] >= 0, res_j[:, 0], jnp.take_along_axis(draw, j[:, None], 1)[:, 0]),
                             jnp.take_along_axis(greedy, j[:, None], 1)[:, 0])
  else:
    # Residual draws at every draft position (only the first rejection's is used).
    res_draw = residual_draws(pk, q, drafts, keys)
    correction = jnp.where(sampling[:, None], jnp.where(res_draw >= 0, res_draw, draw[:, :k]),
                           greedy[:, :k])
    correction_e = at(jnp.pad(correction, ((0, 0), (0, 1))))
  final = jnp.where(e == n, jnp.where(sampling, at(draw), at(greedy)), correction_e)
  tokens = jnp.where(i < e[:, None], jnp.pad(drafts, ((0, 0), (0, 1))), -1)
  tokens = jnp.where((i == e[:, None]) & produced[:, None], final[:, None], tokens)
  return SpecResult(e, tokens.astype(jnp.int32), flags.astype(jnp.int32))


def _kernel(*refs, vocab_size: int, block_words: int, purpose: int, q_kind: str,
            has_mask: bool, positions: int):
  """One program per row; walks positions until the first stop.

  Refs, in order: logits [P, Wm, 32]; mask [P, Wm] and states [P] (if has_mask);
  drafts [Kp]; q refs (sparse: ids [Kp, J], probs [Kp, J]; dense: probs [Kp, Wm, 32]);
  fp [4] f32 (temperature, top_p, min_p, -); ip [8] i32 (top_k, enabled, seed bits,
  position, n_drafts, -, -, -); out [O] i32 (tokens at 0..P-1, accepted at P, flags at P+1).
  """
  refs = list(refs)
  logits_ref = refs.pop(0)
  mask_ref, states_ref = (refs.pop(0), refs.pop(0)) if has_mask else (None, None)
  drafts_ref = refs.pop(0)
  q_refs = [refs.pop(0) for _ in range({"onehot": 0, "sparse": 2, "dense": 1}[q_kind])]
  fp_ref, ip_ref, out_ref = refs
  temperature, top_p, min_p = fp_ref[0], fp_ref[1], fp_ref[2]
  top_k, enabled, seed, position, n = ip_ref[0], ip_ref[1] != 0, ip_ref[2], ip_ref[3], ip_ref[4]
  seed = jax.lax.bitcast_convert_type(seed, jnp.uint32)
  words = logits_ref.shape[-2]
  # Traced constants: the Triton lowering cannot yield bare literals out of cond/while.
  zero = n - n
  one = zero + 1
  positive = temperature > 0
  inv_t = jnp.where(positive, 1.0 / jnp.where(positive, temperature, 1.0), 1.0)
  for i in range(positions):
    out_ref[i] = zero - 1

  def step(carry):
    i, _, flags, _ = carry
    row = _stream.Row(logits_ref, mask_ref, (i,), enabled, vocab_size, words, block_words)
    key = rng.stream_key(seed, position + i, purpose)
    state = states_ref[i] if has_mask else jnp.int32(0)
    dead = enabled & (state == int(DEAD_END))
    unreach = enabled & (state == int(UNREACHABLE))

    def verify():
      st = _stream.stats(row, key, inv_t)
      pflags = _stream.row_flags(st)
      sampling = positive & (pflags == 0)
      th = _stream.thresholds(row, st, sampling, inv_t, top_k, top_p, min_p)
      total, draw = jax.lax.cond(sampling, lambda: _stream.support_draw(row, th, key),
                                 lambda: (zero.astype(jnp.float32), zero - 1))

      def bonus():
        out_ref[i] = jnp.where(sampling, draw, st.greedy)
        return zero, one

      def check_draft():
        d = drafts_ref[i]
        dblk = _stream.load_one(row, d)
        _, w_d = _stream.in_support(dblk, th)
        p_d = jnp.where(dblk.legal, w_d / jnp.maximum(total, 1e-38), 0.0)
        q_d = _q_scalar(q_kind, q_refs, i, d, words)
        u = rng.uniform(seed, position + i, purpose)
        ok = jnp.where(sampling, u * q_d < p_d, d == st.greedy)

        def reject():
          q_block = functools.partial(_q_block, q_kind, q_refs, i, d)
          tok = jax.lax.cond(
              sampling, lambda: _stream.residual_draw(row, th, total, q_block, key, draw),
              lambda: st.greedy)
          out_ref[i] = tok
          return zero, one

        def accept():
          out_ref[i] = d
          return one, zero

        return jax.lax.cond(ok, accept, reject)

      def failed():
        return zero, one

      acc, done = jax.lax.cond(pflags != 0, failed,
                               lambda: jax.lax.cond(i == n, bonus, check_draft))
      return acc, done, pflags

    acc, done, pflags = jax.lax.cond(
        dead | unreach, lambda: (zero, one, zero), verify)
    flags = flags | jnp.where(dead, jnp.int32(FLAG_DEAD_END), pflags)
    return i + acc, i + acc, flags, done

  _, accepted, flags, _ = jax.lax.while_loop(
      lambda c: c[3] == 0, step, (zero, zero, zero, zero))
  out_ref[positions] = accepted
  out_ref[positions + 1] = flags


def _q_scalar(kind, q_refs, i, d, words):
  """q(d) at position i."""
  if kind == "onehot":
    return (d - d + 1).astype(jnp.float32)
  if kind == "sparse":
    ids_ref, probs_ref = q_refs
    return jnp.sum(jnp.where(ids_ref[i, :] == d, probs_ref[i, :].astype(jnp.float32), 0.0))
  inside = (d >= 0) & (d < 32 * words)
  t = jnp.clip(d, 0, 32 * words - 1)
  return jnp.where(inside, q_refs[0][i, t // 32, t % 32].astype(jnp.float32), 0.0)


def _q_block(kind, q_refs, i, d, b: _stream.Block):
  """q over the ids of block b at position i: f32[BW, 32]."""
  if kind == "onehot":
    return (b.ids == d).astype(jnp.float32)
  if kind == "sparse":
    ids_ref, probs_ref = q_refs
    q = jnp.zeros(b.z.shape, jnp.float32)
    for j in range(ids_ref.shape[-1]):
      q = q + jnp.where(b.ids == ids_ref[i, j], probs_ref[i, j].astype(jnp.float32), 0.0)
    return q
  return q_refs[0][i, pl.ds(b.start, b.z.shape[0]), :].astype(jnp.float32)


@functools.partial(jax.jit, static_argnames=["vocab_size", "purpose", "block", "interpret",
                                             "debug"])
def spec_accept_kernel(logits, mask, mask_enabled, states, drafts, n_drafts, q, params, seed,
                       position, *, vocab_size: int, purpose: int = PURPOSE_SAMPLE,
                       block: BlockSizes | None = None, interpret: bool = False,
                       debug: bool = False) -> SpecResult:
  """Pallas kernel path of ``spec_accept`` (same arguments and results)."""
  b, p, vm = _check(logits, mask, mask_enabled, states, drafts, n_drafts, q, vocab_size)
  k = p - 1
  block = block or BlockSizes.get_default()
  z = _prepare_logits(logits.reshape(b * p, vm), _repeat_params(params, p),
                      _penalty_prefix(drafts, p).reshape(b * p, k) if k else None)
  z = pad_vocab(z, -jnp.inf)
  wm = z.shape[-1] // 32
  z = z.reshape(b, p, wm, 32)                                                  # [B, P, Wm, 32]
  kp = max(k, 1)
  drafts_p = jnp.pad(drafts.astype(jnp.int32), ((0, 0), (0, kp - k)), constant_values=-1)
  enabled = jnp.zeros((b,), bool) if mask_enabled is None or mask is None else mask_enabled
  fp, ip4 = pack_row_params(params, enabled, seed, position)
  ip = jnp.concatenate([ip4, jnp.clip(n_drafts, 0, k).astype(jnp.int32)[:, None],
                        jnp.zeros((b, 3), jnp.int32)], axis=-1)                # [B, 8]
  args = [z]
  specs = [pl.BlockSpec((None, p, wm, 32), lambda r: (r, 0, 0, 0))]
  if mask is not None:
    args += [pad_mask(mask.astype(jnp.int32), wm), states.astype(jnp.int32)]
    specs += [pl.BlockSpec((None, p, wm), lambda r: (r, 0, 0)),
              pl.BlockSpec((None, p), lambda r: (r, 0))]
  args.append(drafts_p)
  specs.append(pl.BlockSpec((None, kp), lambda r: (r, 0)))
  if isinstance(q, SparseQ):
    jw = q.ids.shape[-1]
    pad = ((0, 0), (0, kp - k), (0, 0))
    args += [jnp.pad(q.ids.astype(jnp.int32), pad, constant_values=-1),
             jnp.pad(q.probs.astype(jnp.float32), pad)]
    specs += [pl.BlockSpec((None, kp, jw), lambda r: (r, 0, 0))] * 2
    kind = "sparse"
  elif isinstance(q, DenseQ):
    qd = pad_vocab(q.probs, 0.0)
    qd = jnp.pad(qd, ((0, 0), (0, kp - k), (0, 0))).reshape(b, kp, wm, 32)
    args.append(qd)
    specs.append(pl.BlockSpec((None, kp, wm, 32), lambda r: (r, 0, 0, 0)))
    kind = "dense"
  else:
    kind = "onehot"
  args += [fp, ip]
  specs += [pl.BlockSpec((None, 4), lambda r: (r, 0)), pl.BlockSpec((None, 8), lambda r: (r, 0))]
  width = 1 << (p + 1).bit_length()                                          # >= P + 2
  kernel = functools.partial(_kernel, vocab_size=vocab_size,
                             block_words=block_words_for(wm, block), purpose=purpose,
                             q_kind=kind, has_mask=mask is not None, positions=p)
  out = pl.pallas_call(
      kernel,
      grid=(b,),
      in_specs=specs,
      out_specs=pl.BlockSpec((None, width), lambda r: (r, 0)),
      out_shape=jax.ShapeDtypeStruct((b, width), jnp.int32),
      compiler_params=_gpu_params(block),
      interpret=interpret,
      debug=debug,
      name="spec_accept",
  )(*args)
  return SpecResult(out[:, p], out[:, :p], out[:, p + 1])
