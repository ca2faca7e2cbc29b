"""Fused masked candidate selection: packed grammar mask + sampling transforms + draw, per row.

Axis letters: R rows, Vm logits width (32 * Wm after padding), V tokenizer vocabulary,
W = ceil(V / 32) mask words, M history entries. See ``_sampling`` for the math and ``rng``
for the counter-based randomness.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from infernix_jax.pallas import _sampling, _stream, rng
from infernix_jax.pallas._types import SamplingParams


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


# The split over (rows, vocabulary chunks) lives in ``masked_sample_split``; its names stay
# readable from here (the dispatch and the tests use them through this module), loaded on first
# use because that module builds on this one.
_SPLIT_NAMES = ("ChunkPartials", "CutSupport", "SplitBlockSizes", "combine_partials",
                "cut_support", "cut_tokens",
                "masked_sample_split_kernel", "masked_sample_split_reference",
                "split_partials_kernel", "split_partials_reference")


def __getattr__(name):
  if name in _SPLIT_NAMES:
    from infernix_jax.pallas import masked_sample_split
    return getattr(masked_sample_split, name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
