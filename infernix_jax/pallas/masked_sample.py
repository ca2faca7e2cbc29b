"""Fused masked candidate selection: packed grammar mask + sampling transforms + draw, per row.

Axis letters: R rows, Vm logits width (32 * Wm after padding), V tokenizer vocabulary,
W = ceil(V / 32) mask words, M history entries. See ``_sampling`` for the math and ``rng``
for the counter-based randomness.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from infernix_jax.pallas import _sampling, _stream, rng
from infernix_jax.pallas._types import FLAG_EMPTY, FLAG_NONFINITE, SamplingParams


@dataclasses.dataclass(frozen=True)
class BlockSizes:
  """Kernel tiling: vocabulary blocks of ``block_words * 32`` tokens, one program per row."""
  block_words: int
  num_warps: int
  num_stages: int

  @classmethod
  def get_default(cls) -> "BlockSizes":
    return cls(block_words=64, num_warps=8, num_stages=2)


def check_inputs(logits, mask, mask_enabled, params: SamplingParams, seed, position,
                 vocab_size: int):
  """Raises ValueError on inconsistent shapes; returns (R, Vm)."""
  if logits.ndim != 2:
    raise ValueError(f"{logits.shape=} must be [R, Vm]")
  r, vm = logits.shape
  if not 0 < vocab_size <= vm:
    raise ValueError(f"{vocab_size=} must be in (0, Vm={vm}]")
  w = -(-vocab_size // 32)
  if mask is not None and mask.shape != (r, w):
    raise ValueError(f"{mask.shape=} must be [R={r}, W={w}] (W = ceil(vocab_size / 32))")
  for name, x in (("mask_enabled", mask_enabled), ("seed", seed), ("position", position),
                  ("params.temperature", params.temperature)):
    if x is not None and x.shape != (r,):
      raise ValueError(f"{name} has shape {x.shape}; it must be [R={r}]")
  return r, vm


def _prepare_logits(logits, params: SamplingParams, extra_ids=None):
  """f32 or native logits [N, Vm] with the penalties applied (a copy only then): first the
  repetition penalty over prompt + history (+ ``extra_ids``, a hypothetical draft prefix)
  when the call carries a prompt mask, then presence and frequency over history + extra."""
  repetition = params.prompt_mask.shape[-1] > 0                               # static
  if params.history_ids.shape[-1] == 0 and extra_ids is None and not repetition:
    return logits
  ids, counts = params.history_ids, params.history_counts
  if extra_ids is not None:
    ids = jnp.concatenate([ids, extra_ids], axis=-1)
    counts = jnp.concatenate([counts, (extra_ids >= 0).astype(jnp.int32)], axis=-1)
  z = logits.astype(jnp.float32)
  if repetition:
    seen = _sampling.seen_ids(params.prompt_mask, ids, z.shape[-1])
    z = _sampling.apply_repetition(z, seen, params.repetition_penalty)
  ids, delta = _sampling.penalty_entries(ids, counts, params.presence_penalty,
                                         params.frequency_penalty)
  return _sampling.apply_penalties(z, ids, delta)


def _kernel(logits_ref,  # [Wm, 32]
            mask_ref,    # [Wm] int32 words, or None
            fp_ref,      # [4] f32: temperature, top_p, min_p, unused
            ip_ref,      # [4] i32: top_k, enabled, seed bits, position
            out_ref,     # [2] i32: token, flags
            *, vocab_size: int, block_words: int, purpose: int):
  temperature, top_p, min_p = fp_ref[0], fp_ref[1], fp_ref[2]
  top_k, enabled, seed, position = ip_ref[0], ip_ref[1], ip_ref[2], ip_ref[3]
  row = _stream.Row(logits_ref, mask_ref, (), enabled != 0, vocab_size, logits_ref.shape[0],
                    block_words)
  key = rng.stream_key(jax.lax.bitcast_convert_type(seed, jnp.uint32), position, purpose)
  positive = temperature > 0
  inv_t = jnp.where(positive, 1.0 / jnp.where(positive, temperature, 1.0), 1.0)
  st = _stream.stats(row, key, inv_t)
  flags = _stream.row_flags(st)
  sampling = positive & (flags == 0)
  th = _stream.thresholds(row, st, sampling, inv_t, top_k, top_p, min_p)
  truncated = sampling & (((top_k > 0) & (top_k < st.n_fin)) | (top_p < 1.0) | (min_p > 0.0))
  drawn = jax.lax.cond(truncated, lambda: _stream.support_draw(row, th, key)[1],
                       lambda: st.draw)
  out_ref[0] = jnp.where(flags != 0, -1, jnp.where(sampling, drawn, st.greedy))
  out_ref[1] = flags


def pack_row_params(params: SamplingParams, enabled, seed, position):
  """(f32[R, 4], i32[R, 4]) per-row scalars for the kernels."""
  fp = jnp.stack([params.temperature, params.top_p, params.min_p,
                  jnp.zeros_like(params.temperature)], axis=-1).astype(jnp.float32)
  seed_bits = jax.lax.bitcast_convert_type(jnp.asarray(seed).astype(jnp.uint32), jnp.int32)
  ip = jnp.stack([params.top_k, enabled.astype(jnp.int32), seed_bits,
                  jnp.asarray(position, jnp.int32)], axis=-1).astype(jnp.int32)
  return fp, ip


def pad_vocab(x, fill):
  """Pads the last axis to a multiple of 32 (a copy; production widths already are)."""
  vm = x.shape[-1]
  if vm % 32 == 0:
    return x
  return jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, 32 - vm % 32)], constant_values=fill)


def pad_mask(mask, words: int):
  """Pads mask words [..., W] with zeros (illegal) to [..., Wm]."""
  return jnp.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, words - mask.shape[-1])])


def block_words_for(words: int, block: BlockSizes) -> int:
  return min(block.block_words, 1 << (words.bit_length() - 1))


@functools.partial(jax.jit, static_argnames=["purpose", "vocab_size", "block", "interpret",
                                             "debug"])
def masked_sample_kernel(logits, mask, mask_enabled, params: SamplingParams, seed, position, *,
                         purpose: int = 0, vocab_size: int, block: BlockSizes | None = None,
                         interpret: bool = False, debug: bool = False):
  """Pallas kernel path of ``masked_sample`` (same arguments and results)."""
  r, vm = check_inputs(logits, mask, mask_enabled, params, seed, position, vocab_size)
  block = block or BlockSizes.get_default()
  z = pad_vocab(_prepare_logits(logits, params), -jnp.inf)
  wm = z.shape[-1] // 32
  z = z.reshape(r, wm, 32)                                                       # [R, Wm, 32]
  if mask_enabled is None:
    mask_enabled = jnp.zeros((r,), bool)
  fp, ip = pack_row_params(params, mask_enabled, seed, position)
  bw = block_words_for(wm, block)
  kernel = functools.partial(_kernel, vocab_size=vocab_size, block_words=bw, purpose=purpose)
  in_specs = [pl.BlockSpec((None, wm, 32), lambda i: (i, 0, 0))]
  args = [z]
  if mask is None:
    kernel = functools.partial(lambda lr, *rest, k: k(lr, None, *rest), k=kernel)
  else:
    in_specs.append(pl.BlockSpec((None, wm), lambda i: (i, 0)))
    args.append(pad_mask(mask.astype(jnp.int32), wm))                          # [R, Wm]
  in_specs += [pl.BlockSpec((None, 4), lambda i: (i, 0))] * 2
  out = pl.pallas_call(
      kernel,
      grid=(r,),
      in_specs=in_specs,
      out_specs=pl.BlockSpec((None, 2), lambda i: (i, 0)),
      out_shape=jax.ShapeDtypeStruct((r, 2), jnp.int32),
      compiler_params=_gpu_params(block),
      interpret=interpret,
      debug=debug,
      name="masked_sample",
  )(*args, fp, ip)
  return out[:, 0], out[:, 1]


def _gpu_params(block: BlockSizes):
  from jax.experimental.pallas import triton as plgpu
  return plgpu.CompilerParams(num_warps=block.num_warps, num_stages=block.num_stages)


@functools.partial(jax.jit, static_argnames=["vocab_size"])
def masked_probs_reference(logits, mask, mask_enabled, params: SamplingParams, *,
                           vocab_size: int):
  """The target distribution p of each row (what ``masked_sample`` draws from).

  Returns:
    (p f32[R, Vm] (one-hot at temperature 0, zeros for flagged rows), greedy i32[R],
    flags i32[R]).
  """
  r, vm = check_inputs(logits, mask, mask_enabled, params, None, None, vocab_size)
  z = _prepare_logits(logits, params).astype(jnp.float32)
  if mask is None:
    mask, mask_enabled = jnp.zeros((r, 1), jnp.int32), jnp.zeros((r,), bool)
  legal = _sampling.unpack_legal(mask.astype(jnp.int32), mask_enabled, vocab_size, vm)
  s = _sampling.support(z, legal, params.temperature, params.top_k, params.top_p, params.min_p)
  return _sampling.probabilities(s, params.temperature), s.greedy, s.flags


@functools.partial(jax.jit, static_argnames=["purpose", "vocab_size"])
def masked_sample_reference(logits, mask, mask_enabled, params: SamplingParams, seed, position,
                            *, purpose: int = 0, vocab_size: int):
  """Plain-jnp masked sampling (the production path off GPU).

  Args:
    logits: [R, Vm] f32 or bf16. Ids >= vocab_size are never legal.
    mask: i32[R, W] packed legal sets (DESIGN.md section 3), or None if no row is constrained.
    mask_enabled: bool[R]; False rows are unconstrained (their mask words are ignored).
    params: SamplingParams with leading axis R.
    seed: u32[R]; position: i32[R] logical position of the sampled token; purpose: stream id.
    vocab_size: V, the tokenizer vocabulary.

  Returns:
    (tokens i32[R], flags i32[R]); a flagged row (FLAG_EMPTY, FLAG_NONFINITE) has token -1.
  """
  r, vm = check_inputs(logits, mask, mask_enabled, params, seed, position, vocab_size)
  z = _prepare_logits(logits, params).astype(jnp.float32)
  if mask is None:
    mask, mask_enabled = jnp.zeros((r, 1), jnp.int32), jnp.zeros((r,), bool)
  legal = _sampling.unpack_legal(mask.astype(jnp.int32), mask_enabled, vocab_size, vm)
  th = _sampling.thresholds(z, legal, params.temperature, params.top_k, params.top_p,
                            params.min_p, greedy_all=False)
  drawn = _sampling.draw(z, legal, th, rng.stream_key(seed, position, purpose))
  tok = jnp.where(th.flags != 0, -1, jnp.where(params.temperature > 0, drawn, th.greedy))
  return tok.astype(jnp.int32), th.flags


# --- Split-vocabulary path: a grid over (rows, vocabulary chunks), partials combined in jnp ---
#
# Each chunk of a row writes its partials: the flag state (0 no legal id, 1 legal ids, 2 a legal
# NaN / +inf), the max finite legal logit and the smallest id at it, and (sampling rows only)
# the Gumbel-max winner of z * inv_t + g over the finite legal ids with its smallest id. The
# noise of id v is a function of (seed, position, purpose, v) only, so chunking cannot change
# it, and max-then-smallest-id combines exactly: the tokens equal the reference's. Rows with a
# top-k / top-p / min-p cut take the reference's tokens (see ``_reference_rows``).


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


def combine_partials(p: ChunkPartials, temperature):
  """(tokens i32[R], flags i32[R], m f32[R]) from the chunks' partials: max over chunks, ties
  to the smaller id (what the reference's whole-row reductions give); m = max z * inv_t of
  sampling rows (the reference's weight offset)."""
  state = jnp.max(p.state, axis=-1)
  zmax = jnp.max(p.zmax, axis=-1)
  flags = jnp.where(state == 0, FLAG_EMPTY, jnp.where(
      (state == 2) | (zmax == -jnp.inf), FLAG_NONFINITE, 0)).astype(jnp.int32)
  greedy = jnp.min(jnp.where(p.zmax == zmax[:, None], p.zarg, _sampling.INT_MAX), axis=-1)
  best = jnp.max(p.smax, axis=-1)
  drawn = jnp.min(jnp.where(p.smax == best[:, None], p.sarg, _sampling.INT_MAX), axis=-1)
  drawn = jnp.where(best > -jnp.inf, drawn, -1)
  sampling = temperature > 0
  tok = jnp.where(flags != 0, -1, jnp.where(sampling, drawn, greedy)).astype(jnp.int32)
  inv_t = 1.0 / jnp.where(sampling, temperature, 1.0)
  return tok, flags, jnp.where(sampling, zmax * inv_t, 0.0)


def _reference_rows(tok, flags, m, args, kw):
  """The reference's tokens where the split draw does not apply: sampling rows with a top-k /
  top-p / min-p cut, and sampling rows whose max z * inv_t overflows f32 (where the
  reference's weights exp(z * inv_t - m) are NaN). Skipped while no row needs it where a
  skip is free (CPU, TPU); elsewhere computed and selected (no host-synced conditional)."""
  params = args[3]
  cut = (params.top_k > 0) | (params.top_p < 1.0) | (params.min_p > 0.0) | ~jnp.isfinite(m)
  need = (params.temperature > 0) & (flags == 0) & cut
  ref = lambda: masked_sample_reference(*args, **kw)
  if _sampling.skip_is_free():
    ref_tok, _ = jax.lax.cond(jnp.any(need), ref, lambda: (tok, flags))
  else:
    ref_tok, _ = ref()
  return jnp.where(need, ref_tok, tok), flags


def _chunk_layout(vm: int, chunk_words: int):
  """(chunk words, chunks C, padded width C * chunk words * 32)."""
  wm = -(-vm // 32)
  cw = min(chunk_words, 1 << (wm.bit_length() - 1))
  c = -(-wm // cw)
  return cw, c, c * cw * 32


@functools.partial(jax.jit, static_argnames=["purpose", "vocab_size", "chunk_words"])
def split_partials_reference(logits, mask, mask_enabled, params: SamplingParams, seed, position,
                             *, purpose: int = 0, vocab_size: int, chunk_words: int = 64):
  """``ChunkPartials`` in plain jnp: [R, Vm] padded and reshaped to [R, C, L] chunks of
  L = 32 * chunk_words (a power of two, at most the row) tokens."""
  r, vm = check_inputs(logits, mask, mask_enabled, params, seed, position, vocab_size)
  z = _prepare_logits(logits, params).astype(jnp.float32)
  cw, c, width = _chunk_layout(vm, chunk_words)
  z = jnp.pad(z, ((0, 0), (0, width - vm)), constant_values=-jnp.inf)
  if mask is None:
    mask_, enabled = jnp.zeros((r, 1), jnp.int32), jnp.zeros((r,), bool)
  else:
    mask_, enabled = mask.astype(jnp.int32), mask_enabled
  legal = _sampling.unpack_legal(mask_, enabled, vocab_size, width).reshape(r, c, -1)
  z = z.reshape(r, c, -1)                                                     # [R, C, L]
  ids = jnp.arange(width, dtype=jnp.int32).reshape(1, c, -1)
  fin = legal & jnp.isfinite(z)
  bad = legal & ~fin & (z != -jnp.inf)
  state = jnp.where(jnp.any(bad, -1), 2, jnp.where(jnp.any(legal, -1), 1, 0))
  def first_max(s, ok):
    s = jnp.where(ok, s, -jnp.inf)
    best = jnp.max(s, -1)
    return best, jnp.min(jnp.where(ok & (s == best[..., None]), ids, _sampling.INT_MAX), -1)

  zmax, zarg = first_max(z, fin)
  positive = params.temperature > 0
  inv_t = 1.0 / jnp.where(positive, params.temperature, 1.0)
  key = rng.stream_key(seed, position, purpose)
  g = rng.gumbel(rng.random_bits(key[:, None, None], ids))
  smax, sarg = first_max(z * inv_t[:, None, None] + g, fin & positive[:, None, None])
  return ChunkPartials(state.astype(jnp.int32), zmax, zarg, smax, sarg)


@functools.partial(jax.jit, static_argnames=["purpose", "vocab_size", "chunk_words"])
def masked_sample_split_reference(logits, mask, mask_enabled, params: SamplingParams, seed,
                                  position, *, purpose: int = 0, vocab_size: int,
                                  chunk_words: int = 64):
  """``masked_sample_reference`` as a plain-jnp split (same arguments and results): per-chunk
  partials (``split_partials_reference``) combined exactly. Noise is drawn for every row here
  (jnp cannot skip a row); the kernel skips greedy rows and empty chunks."""
  parts = split_partials_reference(logits, mask, mask_enabled, params, seed, position,
                                   purpose=purpose, vocab_size=vocab_size,
                                   chunk_words=chunk_words)
  tok, flags, m = combine_partials(parts, params.temperature)
  return _reference_rows(tok, flags, m, (logits, mask, mask_enabled, params, seed, position),
                         dict(purpose=purpose, vocab_size=vocab_size))


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
  kernel's ``ChunkPartials`` combined in jnp. Rows with a top-k / top-p / min-p cut take the
  reference's tokens."""
  parts = split_partials_kernel(logits, mask, mask_enabled, params, seed, position,
                                purpose=purpose, vocab_size=vocab_size, block=block,
                                interpret=interpret, debug=debug)
  tok, flags, m = combine_partials(parts, params.temperature)
  return _reference_rows(tok, flags, m, (logits, mask, mask_enabled, params, seed, position),
                         dict(purpose=purpose, vocab_size=vocab_size))
