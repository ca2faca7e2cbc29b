"""masked_sample split over vocabulary chunks: a grid over (rows, chunks), partials combined in jnp.

Axis letters as in ``masked_sample``; C vocabulary chunks of L = 32 * chunk_words tokens, D the
256 digits of one byte of a sort key.

Each chunk of a row writes its partials: the flag state (0 no legal id, 1 legal ids, 2 a legal
NaN / +inf), the max finite legal logit and the smallest id at it, and (sampling rows only) the
Gumbel-max winner of z * inv_t + g over the finite legal ids with its smallest id. The noise of
id v is a function of (seed, position, purpose, v) only, so chunking cannot change it, and
max-then-smallest-id combines exactly: the tokens equal the reference's.

Rows with a top-k / top-p / min-p cut take a second, sorting-free pass (``cut_support``, in
the manner of radix-select samplers such as FlashInfer's and vLLM's) instead of the reference:
per-chunk histograms of one byte of the order-preserving key (``_sampling.sort_key``) at a
time, the bucket chosen in jnp (by count for top-k, by probability mass under the row's max for
top-p), four bytes giving the exact threshold key; top-k's ties at that key go to the smaller
ids by per-chunk counts, and min-p is a direct test of each weight. Rows whose top-k set fits
in TOPK_CAP entries gather it and apply the reference's own top-p (``_sampling.top_c_support``):
bit-exact. The other rows' top-p sums masses per chunk (a scatter-add, in any order on a GPU),
so where the mass above a key lies within rounding of top_p * total the cut can differ from the
reference's whole-row sums, as the unsplit kernel's block sums can. The histograms are jnp on
the kernel path too (a Pallas histogram would need a compare per digit; XLA fuses these).
Sampling rows whose max z * inv_t overflows f32 still take the reference's tokens
(``_reference_rows``): its weights are NaN there, and how XLA compiles NaN comparisons decides
them.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

from infernix_jax.pallas import _sampling, _stream, rng
from infernix_jax.pallas._types import FLAG_EMPTY, FLAG_NONFINITE, SamplingParams
from infernix_jax.pallas.masked_sample import (_gpu_params, _prepare_logits, check_inputs,
                                               masked_sample_reference, pack_row_params,
                                               pad_mask)

_SIGN = np.uint32(0x80000000)


@dataclasses.dataclass(frozen=True)
class SplitBlockSizes:
  """Split-kernel tiling: chunks of ``chunk_words * 32`` tokens (a power of two), one program
  per (row, chunk)."""
  chunk_words: int
  num_warps: int
  num_stages: int

  @classmethod
  def get_default(cls) -> "SplitBlockSizes":
    return cls(chunk_words=64, num_warps=4, num_stages=1)


class ChunkPartials(NamedTuple):
  """Per (row, chunk) partials, each [R, C]."""
  state: jax.Array   # i32: 0 no legal id, 1 legal ids, 2 a legal NaN / +inf
  zmax: jax.Array    # f32: max finite legal z (-inf if none)
  zarg: jax.Array    # i32: smallest id at zmax (INT_MAX if none)
  smax: jax.Array    # f32: max finite legal z * inv_t + gumbel (-inf: none, or a greedy row)
  sarg: jax.Array    # i32: smallest id at smax (INT_MAX if none)


def _first_max(s, ok, ids):
  """Per chunk, (max over ok of s, smallest id at it): f32[R, C], i32[R, C] from [R, C, L]."""
  s = jnp.where(ok, s, -jnp.inf)
  best = jnp.max(s, -1)
  return best, jnp.min(jnp.where(ok & (s == best[..., None]), ids, _sampling.INT_MAX), -1)


def _combine_max(best, arg):
  """Per row, (max over chunks, smallest id at it) of per-chunk maxima [R, C]."""
  top = jnp.max(best, axis=-1)
  return top, jnp.min(jnp.where(best == top[:, None], arg, _sampling.INT_MAX), axis=-1)


def combine_partials(p: ChunkPartials, temperature):
  """(tokens i32[R], flags i32[R], m f32[R]) from the chunks' partials: max over chunks, ties
  to the smaller id (what the reference's whole-row reductions give); m = max z * inv_t of
  sampling rows (the reference's weight offset)."""
  state = jnp.max(p.state, axis=-1)
  zmax, greedy = _combine_max(p.zmax, p.zarg)
  flags = jnp.where(state == 0, FLAG_EMPTY, jnp.where(
      (state == 2) | (zmax == -jnp.inf), FLAG_NONFINITE, 0)).astype(jnp.int32)
  best, drawn = _combine_max(p.smax, p.sarg)
  drawn = jnp.where(best > -jnp.inf, drawn, -1)
  sampling = temperature > 0
  tok = jnp.where(flags != 0, -1, jnp.where(sampling, drawn, greedy)).astype(jnp.int32)
  inv_t = 1.0 / jnp.where(sampling, temperature, 1.0)
  return tok, flags, jnp.where(sampling, zmax * inv_t, 0.0)


def _chunk_hist(digit, val):
  """Per-chunk histograms [R, C, D] of val over digit (both [R, C, L]): one byte's pass, as a
  jnp scatter-add (one pass over the row; a Pallas kernel would need a compare per digit)."""
  r, c, _ = digit.shape
  rows, chunks = jnp.arange(r)[:, None, None], jnp.arange(c)[None, :, None]
  return jnp.zeros((r, c, 256), val.dtype).at[rows, chunks, digit].add(val)


def _radix_select(u, ok, val, pick):
  """Walks the bytes of the unsigned keys u (u32[R, C, L]), the most significant first.

  At each byte, the per-chunk histograms of ``val`` and of counts over the ``ok`` entries whose
  higher bytes equal the prefix chosen so far are summed over chunks, and
  ``pick(above, beyond, tot, cnt) -> digit`` chooses one; ``beyond[:, d]`` is the sum of val
  over the ok entries above digit d (all [R, D]), ``above`` that sum above the prefix (f32 or
  i32[R]). Returns (key u32[R], the sum of val over the ok entries above it).
  """
  r = u.shape[0]
  prefix = jnp.zeros((r,), jnp.uint32)
  above = jnp.zeros((r,), val.dtype)
  for level in range(4):
    shift = 24 - 8 * level
    match = ok
    if level:
      match = ok & ((u >> (shift + 8)) == (prefix >> (shift + 8))[:, None, None])
    digit = ((u >> shift) & 255).astype(jnp.int32)                              # [R, C, L]
    tot = jnp.sum(_chunk_hist(digit, jnp.where(match, val, 0)), axis=1)        # [R, D]
    cnt = tot if val.dtype == jnp.int32 else jnp.sum(
        _chunk_hist(digit, match.astype(jnp.int32)), axis=1)
    suffix = jnp.cumsum(tot[:, ::-1], axis=-1)[:, ::-1]                         # digits >= d
    beyond = above[:, None] + jnp.concatenate([suffix[:, 1:], jnp.zeros_like(tot[:, :1])], -1)
    d = pick(beyond, tot, cnt)
    above = jnp.take_along_axis(beyond, d[:, None], -1)[:, 0]
    prefix = prefix | (d.astype(jnp.uint32) << shift)
  return prefix, above


def _rank(x):
  """Inclusive rank in id order of the True entries of x (bool[R, C, L]): per-chunk counts,
  offset across chunks."""
  n = jnp.sum(x, axis=-1, dtype=jnp.int32)                                      # [R, C]
  return (jnp.cumsum(n, axis=-1) - n)[..., None] + jnp.cumsum(x, axis=-1, dtype=jnp.int32)


class CutSupport(NamedTuple):
  """The support of the cut rows: ``cand`` for rows with no top-k or a large one, the sorted
  ``top_ids`` / ``top_cand`` for rows whose top-k set fits in TOPK_CAP (``small``)."""
  cand: jax.Array       # bool[R, C, L]
  top_ids: jax.Array    # i32[R, CAP]: ids by (key desc, id asc)
  top_cand: jax.Array   # bool[R, CAP]
  small: jax.Array      # bool[R]
  inv_t: jax.Array      # f32[R]


def cut_support(z, legal, params: SamplingParams, m, live, *, width: int) -> CutSupport:
  """The top-k / min-p / top-p support of each ``live`` row (empty elsewhere).

  The support is ``masked_sample_reference``'s: the k first finite legal ids by (key desc,
  id asc) (all of them when k >= their number), then w = exp(z * inv_t - m) >= min_p, then
  top-p keeps a key group iff the support's mass above it is < top_p * its total.

  Args:
    z: f32[R, C, L] penalized logits in chunks; legal: bool[R, C, L].
    params: SamplingParams [R]; m: f32[R] max finite legal z * inv_t; live: bool[R], the
      rows to cut (sampling, unflagged, finite m).
    width: Vm, the logits' width (the reference's small-k path keeps min(TOPK_CAP, Vm)).
  """
  r, c, l = z.shape
  ids = jnp.arange(c * l, dtype=jnp.int32).reshape(1, c, l)                     # [1, C, L]
  col = lambda x: x[:, None, None]
  fin = legal & jnp.isfinite(z)
  keys = _sampling.sort_key(jnp.where(fin, z, 0.0))                             # [R, C, L]
  u = jax.lax.bitcast_convert_type(keys, jnp.uint32) ^ _SIGN                    # unsigned order
  to_key = lambda x: jax.lax.bitcast_convert_type(x ^ _SIGN, jnp.int32)
  top_k = params.top_k
  k = jnp.where(top_k > 0, top_k, 1)
  need_k = live & (top_k > 0) & (top_k < jnp.sum(fin, axis=(1, 2)))

  # Top-k: the k-th largest key by counts (the largest digit with >= k entries at or above
  # it), then the ties at that key in id order up to k.
  tk, n_gt = _radix_select(u, fin & col(need_k), jnp.ones_like(keys),
                           lambda beyond, tot, cnt: jnp.maximum(
                               jnp.sum(beyond + tot >= k[:, None], axis=-1) - 1, 0))
  tk = to_key(tk)
  tie = fin & col(need_k) & (keys == col(tk))
  tid = jnp.min(jnp.where(tie & (_rank(tie) == col(k - n_gt)), ids, _sampling.INT_MAX),
                axis=(1, 2))
  kept = fin & (~col(need_k) | (keys > col(tk)) | ((keys == col(tk)) & (ids <= col(tid))))

  inv_t = 1.0 / jnp.where(live, params.temperature, 1.0)
  zt = z * col(inv_t)
  inside = kept & (jnp.exp(zt - col(m)) >= col(params.min_p))
  need_p = live & (params.top_p < 1.0)
  cap = min(_sampling.TOPK_CAP, width)
  small = live & (top_k > 0) & (top_k <= cap)

  # Other rows' top-p: the smallest present key whose mass above is < top_p * total (the
  # largest key when none is), by mass histograms under the row's max.
  dense_p = need_p & ~small
  w = jnp.where(inside & col(dense_p), jnp.exp(zt - col(m)), 0.0)
  target = params.top_p * jnp.sum(jnp.sum(w, axis=-1), axis=-1)

  def by_mass(beyond, tot, cnt):
    ok = (cnt > 0) & (beyond < target[:, None])
    last = 255 - jnp.argmax(cnt[:, ::-1] > 0, axis=-1)
    return jnp.where(jnp.any(ok, axis=-1), jnp.argmax(ok, axis=-1), last)

  tp, _ = _radix_select(u, inside & col(dense_p), w, by_mass)
  tp = jnp.where(dense_p, to_key(tp), _sampling.INT_MIN)
  cand = inside & (keys >= col(tp)) & col(live & ~small)

  # Small k: the top-k set (at most TOPK_CAP ids) gathered, sorted by (key desc, id asc),
  # and cut by the reference's own top-p over it.
  sel = kept & col(small)
  slot = jnp.where(sel, _rank(sel) - 1, cap)
  rows = jnp.arange(r)[:, None, None]
  top_ids = jnp.zeros((r, cap), jnp.int32).at[rows, slot].set(
      jnp.broadcast_to(ids, slot.shape), mode="drop")                           # [R, CAP]
  zf = z.reshape(r, c * l)
  n_sel = jnp.sum(sel, axis=(1, 2))
  top_vals = jnp.where(jnp.arange(cap)[None, :] < n_sel[:, None],
                       _sampling.fold_zero(jnp.take_along_axis(zf, top_ids, -1)),
                       -jnp.inf)
  _, top_ids, top_vals = jax.lax.sort((~_sampling.sort_key(top_vals), top_ids, top_vals),
                                      dimension=-1, num_keys=2)
  _, top_cand = _sampling.top_c_support(zf, top_vals, top_ids, small, k, inv_t, m,
                                        params.min_p, params.top_p, need_p)
  return CutSupport(cand, top_ids, top_cand, small, inv_t)


def cut_tokens(z, legal, params: SamplingParams, key, m, live, *, width: int):
  """The Gumbel-max draw of each ``live`` row over its ``cut_support`` (arguments as there;
  key: u32[R] stream keys), ties to the smaller id: i32[R] (-1 where not live or the support
  is empty)."""
  r, c, l = z.shape
  s = cut_support(z, legal, params, m, live, width=width)
  ids = jnp.arange(c * l, dtype=jnp.int32).reshape(1, c, l)                     # [1, C, L]
  g = rng.gumbel(rng.random_bits(key[:, None, None], ids))
  best, arg = _combine_max(*_first_max(z * s.inv_t[:, None, None] + g, s.cand, ids))
  dense = jnp.where(best > -jnp.inf, arg, -1)
  zt_top = jnp.take_along_axis(z.reshape(r, c * l), s.top_ids, -1) * s.inv_t[:, None]
  sparse = _sampling._argmax_gumbel_at(zt_top, s.top_cand, s.top_ids, key)
  return jnp.where(s.small, sparse, jnp.where(live, dense, -1)).astype(jnp.int32)


def _cut_rows(tok, flags, m, chunks, params: SamplingParams, key, width: int):
  """Sampling rows with a top-k / top-p / min-p cut take ``cut_tokens``. Skipped while no row
  needs it where a skip is free (CPU, TPU); elsewhere computed and selected."""
  cut = (params.top_k > 0) | (params.top_p < 1.0) | (params.min_p > 0.0)
  live = (params.temperature > 0) & (flags == 0) & cut & jnp.isfinite(m)
  compute = lambda: cut_tokens(*chunks, params, key, m, live, width=width)
  if _sampling.skip_is_free():
    drawn = jax.lax.cond(jnp.any(live), compute, lambda: jnp.full_like(tok, -1))
  else:
    drawn = compute()
  return jnp.where(live, drawn, tok)


def _reference_rows(tok, flags, m, args, kw):
  """The reference's tokens for sampling rows whose max z * inv_t overflows f32 (where the
  reference's weights exp(z * inv_t - m) are NaN). Skipped while no row needs it where a skip
  is free (CPU, TPU); elsewhere computed and selected (no host-synced conditional)."""
  params = args[3]
  need = (params.temperature > 0) & (flags == 0) & ~jnp.isfinite(m)
  ref = lambda: masked_sample_reference(*args, **kw)
  if _sampling.skip_is_free():
    ref_tok, _ = jax.lax.cond(jnp.any(need), ref, lambda: (tok, flags))
  else:
    ref_tok, _ = ref()
  return jnp.where(need, ref_tok, tok), flags


def _finish(parts: ChunkPartials, chunks, args, purpose: int, vocab_size: int):
  """Tokens and flags from the partials: the untruncated draw, the cut rows' second pass, the
  reference for overflowing rows."""
  params = args[3]
  tok, flags, m = combine_partials(parts, params.temperature)
  tok = _cut_rows(tok, flags, m, chunks, params, rng.stream_key(args[4], args[5], purpose),
                  args[0].shape[1])
  return _reference_rows(tok, flags, m, args, dict(purpose=purpose, vocab_size=vocab_size))


def _chunk_layout(vm: int, chunk_words: int):
  """(chunk words, chunks C, padded width C * chunk words * 32)."""
  wm = -(-vm // 32)
  cw = min(chunk_words, 1 << (wm.bit_length() - 1))
  c = -(-wm // cw)
  return cw, c, c * cw * 32


def _chunks(logits, mask, mask_enabled, params: SamplingParams, vocab_size: int,
            chunk_words: int):
  """(z f32[R, C, L], legal bool[R, C, L]): penalized logits padded with -inf and reshaped to
  chunks of L = 32 * chunk_words tokens (a power of two, at most the row)."""
  r, vm = logits.shape
  z = _prepare_logits(logits, params).astype(jnp.float32)
  _, c, width = _chunk_layout(vm, chunk_words)
  z = jnp.pad(z, ((0, 0), (0, width - vm)), constant_values=-jnp.inf)
  if mask is None:
    mask, mask_enabled = jnp.zeros((r, 1), jnp.int32), jnp.zeros((r,), bool)
  legal = _sampling.unpack_legal(mask.astype(jnp.int32), mask_enabled, vocab_size, width)
  return z.reshape(r, c, -1), legal.reshape(r, c, -1)                         # [R, C, L]


@functools.partial(jax.jit, static_argnames=["purpose", "vocab_size", "chunk_words"])
def split_partials_reference(logits, mask, mask_enabled, params: SamplingParams, seed, position,
                             *, purpose: int = 0, vocab_size: int, chunk_words: int = 64):
  """``ChunkPartials`` in plain jnp: [R, Vm] padded and reshaped to [R, C, L] chunks of
  L = 32 * chunk_words (a power of two, at most the row) tokens."""
  check_inputs(logits, mask, mask_enabled, params, seed, position, vocab_size)
  z, legal = _chunks(logits, mask, mask_enabled, params, vocab_size, chunk_words)
  ids = jnp.arange(z.shape[1] * z.shape[2], dtype=jnp.int32).reshape(1, *z.shape[1:])
  fin = legal & jnp.isfinite(z)
  bad = legal & ~fin & (z != -jnp.inf)
  state = jnp.where(jnp.any(bad, -1), 2, jnp.where(jnp.any(legal, -1), 1, 0))
  zmax, zarg = _first_max(z, fin, ids)
  positive = params.temperature > 0
  inv_t = 1.0 / jnp.where(positive, params.temperature, 1.0)
  key = rng.stream_key(seed, position, purpose)
  g = rng.gumbel(rng.random_bits(key[:, None, None], ids))
  smax, sarg = _first_max(z * inv_t[:, None, None] + g, fin & positive[:, None, None], ids)
  return ChunkPartials(state.astype(jnp.int32), zmax, zarg, smax, sarg)


@functools.partial(jax.jit, static_argnames=["purpose", "vocab_size", "chunk_words"])
def masked_sample_split_reference(logits, mask, mask_enabled, params: SamplingParams, seed,
                                  position, *, purpose: int = 0, vocab_size: int,
                                  chunk_words: int = 64):
  """``masked_sample_reference`` as a plain-jnp split (same arguments and results): per-chunk
  partials (``split_partials_reference``) combined exactly, then the cut rows' second pass
  (``cut_tokens``). Noise is drawn for every row here (jnp cannot skip a row); the kernel
  skips greedy rows and empty chunks."""
  parts = split_partials_reference(logits, mask, mask_enabled, params, seed, position,
                                   purpose=purpose, vocab_size=vocab_size,
                                   chunk_words=chunk_words)
  chunks = _chunks(logits, mask, mask_enabled, params, vocab_size, chunk_words)
  return _finish(parts, chunks, (logits, mask, mask_enabled, params, seed, position), purpose,
                 vocab_size)


def _split_kernel(logits_ref,  # [CW, 32]: chunk j of row i
                  mask_ref,    # [CW] int32 words, or None
                  fp_ref,      # [4] f32: temperature, top_p, min_p, unused
                  ip_ref,      # [4] i32: top_k, enabled, seed bits, position
                  zf_ref,      # [2] f32 out: zmax, smax
                  zi_ref,      # [4] i32 out: state, zarg, sarg, unused
                  *, vocab_size: int, purpose: int):
  cw = logits_ref.shape[0]
  temperature = fp_ref[0]
  enabled, seed, position = ip_ref[1] != 0, ip_ref[2], ip_ref[3]
  neg_inf, int_max = _stream.F32_NEG_INF, _sampling.INT_MAX
  zf_ref[0], zf_ref[1] = neg_inf, neg_inf
  zi_ref[0], zi_ref[1], zi_ref[2], zi_ref[3] = 0, int_max, int_max, 0
  rows = jax.lax.broadcasted_iota(jnp.int32, (cw, 1), 0) + pl.program_id(1) * cw  # [CW, 1]
  lanes = jax.lax.broadcasted_iota(jnp.int32, (1, 32), 1)                         # [1, 32]
  live = pl.program_id(1) * (cw * 32) < vocab_size
  if mask_ref is not None:
    words = mask_ref[...]                                                         # [CW]
    live = live & (~enabled | (jnp.max(jnp.where(words != 0, 1, 0)) > 0))

  @pl.when(live)                          # chunks with no legal id are skipped
  def _():
    z = logits_ref[...].astype(jnp.float32)                                       # [CW, 32]
    ids = rows * 32 + lanes
    legal = ids < vocab_size
    if mask_ref is not None:
      bits = jax.lax.shift_right_logical(mask_ref[...][:, None], lanes) & 1
      legal = legal & ((bits == 1) | ~enabled)
    fin = legal & (jnp.abs(z) < jnp.inf)
    n_bad = jnp.sum((legal & ~fin & ~(z == neg_inf)).astype(jnp.int32))
    n_legal = jnp.sum(legal.astype(jnp.int32))
    zi_ref[0] = jnp.where(n_bad > 0, 2, jnp.where(n_legal > 0, 1, 0))
    zmax, zarg = _stream._first_max(z, fin, ids)
    zf_ref[0], zi_ref[1] = zmax, zarg

    @pl.when(temperature > 0)             # greedy rows draw no noise
    def _():
      key = rng.stream_key(jax.lax.bitcast_convert_type(seed, jnp.uint32), position, purpose)
      inv_t = 1.0 / temperature
      smax, sarg = _stream._first_max(z * inv_t + rng.gumbel(rng.random_bits(key, ids)), fin,
                                      ids)
      zf_ref[1], zi_ref[2] = smax, sarg


@functools.partial(jax.jit, static_argnames=["purpose", "vocab_size", "block", "interpret",
                                             "debug"])
def split_partials_kernel(logits, mask, mask_enabled, params: SamplingParams, seed, position, *,
                          purpose: int = 0, vocab_size: int,
                          block: SplitBlockSizes | None = None, interpret: bool = False,
                          debug: bool = False) -> ChunkPartials:
  """``ChunkPartials`` from a Pallas grid over (rows, chunks) (what
  ``split_partials_reference`` computes; chunks without a legal id and the noise of greedy
  rows are skipped, leaving the empty partials)."""
  r, vm = check_inputs(logits, mask, mask_enabled, params, seed, position, vocab_size)
  block = block or SplitBlockSizes.get_default()
  if block.chunk_words < 1 or block.chunk_words & (block.chunk_words - 1):
    raise ValueError(f"{block.chunk_words=} must be a power of two")
  cw, c, width = _chunk_layout(vm, block.chunk_words)
  z = _prepare_logits(logits, params)
  z = jnp.pad(z, ((0, 0), (0, width - vm)), constant_values=-jnp.inf).reshape(r, c * cw, 32)
  enabled = jnp.zeros((r,), bool) if mask_enabled is None else mask_enabled
  fp, ip = pack_row_params(params, enabled, seed, position)
  kernel = functools.partial(_split_kernel, vocab_size=vocab_size, purpose=purpose)
  in_specs = [pl.BlockSpec((None, cw, 32), lambda i, j: (i, j, 0))]
  args = [z]
  if mask is None:
    kernel = functools.partial(lambda lr, *rest, k: k(lr, None, *rest), k=kernel)
  else:
    in_specs.append(pl.BlockSpec((None, cw), lambda i, j: (i, j)))
    args.append(pad_mask(mask.astype(jnp.int32), c * cw))                     # [R, C * CW]
  in_specs += [pl.BlockSpec((None, 4), lambda i, j: (i, 0))] * 2
  zf, zi = pl.pallas_call(
      kernel,
      grid=(r, c),
      in_specs=in_specs,
      out_specs=[pl.BlockSpec((None, None, 2), lambda i, j: (i, j, 0)),
                 pl.BlockSpec((None, None, 4), lambda i, j: (i, j, 0))],
      out_shape=[jax.ShapeDtypeStruct((r, c, 2), jnp.float32),
                 jax.ShapeDtypeStruct((r, c, 4), jnp.int32)],
      compiler_params=_gpu_params(block),
      interpret=interpret,
      debug=debug,
      name="masked_sample_split",
  )(*args, fp, ip)
  return ChunkPartials(zi[..., 0], zf[..., 0], zi[..., 1], zf[..., 1], zi[..., 2])


@functools.partial(jax.jit, static_argnames=["purpose", "vocab_size", "block", "interpret",
                                             "debug"])
def masked_sample_split_kernel(logits, mask, mask_enabled, params: SamplingParams, seed,
                               position, *, purpose: int = 0, vocab_size: int,
                               block: SplitBlockSizes | None = None, interpret: bool = False,
                               debug: bool = False):
  """Split-vocabulary Pallas path of ``masked_sample`` (same arguments and results): the
  kernel's ``ChunkPartials`` combined in jnp; rows with a top-k / top-p / min-p cut take the
  second pass (``cut_tokens``, whose histograms are jnp: XLA fuses them)."""
  parts = split_partials_kernel(logits, mask, mask_enabled, params, seed, position,
                                purpose=purpose, vocab_size=vocab_size, block=block,
                                interpret=interpret, debug=debug)
  cw = (block or SplitBlockSizes.get_default()).chunk_words
  chunks = _chunks(logits, mask, mask_enabled, params, vocab_size, cw)
  return _finish(parts, chunks, (logits, mask, mask_enabled, params, seed, position), purpose,
                 vocab_size)
