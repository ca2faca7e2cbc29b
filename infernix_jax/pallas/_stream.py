"""In-kernel streaming over one row's vocabulary: legality, statistics and support thresholds.

Used inside Pallas kernels (Triton on GPU, ``interpret=True`` elsewhere). A row is viewed as
logits [Wm, 32] (Vm = 32 * Wm) and mask words [Wm]; it is read in blocks of BW words
([BW, 32] tokens, BW a power of two). The last block is shifted back to end at Wm and its
already-seen lanes are masked out, so no load is ever out of bounds and no padding copy of
the logits is needed. Every statistic is a scalar fold over blocks; thresholds are found by
bisection on the order-preserving int32 key of z, exactly as ``_sampling.support`` does on
whole arrays, so kernel and reference agree token for token.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from infernix_jax.pallas import rng
from infernix_jax.pallas._sampling import INT_MAX, INT_MIN, sort_key
from infernix_jax.pallas._types import FLAG_EMPTY, FLAG_NONFINITE

F32_NEG_INF = np.float32(-np.inf)


@dataclasses.dataclass(frozen=True)
class Row:
  """One row of a kernel: refs plus the static geometry.

  Attributes:
    logits: ref [..., Wm, 32] (f32 or bf16); mask: ref [..., Wm] int32 words, or None when
      no row of the call is constrained (nothing is read).
    lead: leading indices selecting the row inside the refs (e.g. ``(i,)`` for a position).
    enabled: scalar bool; False = unconstrained row (mask not read).
    vocab_size: V (static); ids >= V are never legal.
    words: Wm (static); block_words: BW (static, power of two, <= Wm).
  """
  logits: Any
  mask: Any
  lead: tuple
  enabled: Any
  vocab_size: int
  words: int
  block_words: int

  @property
  def num_blocks(self) -> int:
    return -(-self.words // self.block_words)


class Block(NamedTuple):
  z: jax.Array      # f32[BW, 32] logits
  ids: jax.Array    # i32[BW, 32] token ids
  legal: jax.Array  # bool[BW, 32]: in this block, id < V, mask bit set (or row disabled)
  fin: jax.Array    # bool[BW, 32]: legal and finite
  key: jax.Array    # i32[BW, 32] sort key of z (0 where not finite)
  start: jax.Array  # first word of the block (scalar)


def load(row: Row, j) -> Block:
  """Block j of the row."""
  bw = row.block_words
  start = jnp.minimum(j * bw, row.words - bw)
  rows = jax.lax.broadcasted_iota(jnp.int32, (bw, 1), 0) + start                 # [BW, 1]
  lanes = jax.lax.broadcasted_iota(jnp.int32, (1, 32), 1)                        # [1, 32]
  z = row.logits[(*row.lead, pl_ds(start, bw), slice(None))].astype(jnp.float32)  # [BW, 32]
  ids = rows * 32 + lanes
  legal = (rows >= j * bw) & (ids < row.vocab_size)
  if row.mask is not None:                     # None: a batch without constrained rows
    words = row.mask[(*row.lead, pl_ds(start, bw))]                              # [BW]
    bits = jax.lax.shift_right_logical(words[:, None], lanes) & 1                # [BW, 32]
    legal = legal & ((bits == 1) | ~row.enabled)
  fin = legal & (jnp.abs(z) < jnp.inf)
  return Block(z, ids, legal, fin, sort_key(jnp.where(fin, z, 0.0)), start)


def pl_ds(start, size):
  from jax.experimental import pallas as pl  # local: keeps this module importable cheaply
  return pl.ds(start, size)


def fold(row: Row, fn, init):
  """Folds ``fn(block, carry) -> carry`` over the row's blocks in id order."""
  return jax.lax.fori_loop(0, row.num_blocks, lambda j, c: fn(load(row, j), c), init)


def _count(x):
  return jnp.sum(x.astype(jnp.int32))


def _first_max(score, ok, ids):
  """(max over ok of score, smallest id attaining it); (-inf, INT_MAX) when none."""
  s = jnp.where(ok, score, F32_NEG_INF)
  best = jnp.max(s)
  return best, jnp.min(jnp.where(ok & (s == best), ids, INT_MAX))


def _merge_max(a, b):
  """Merges (score, id) maxima; on equal scores keeps the smaller id."""
  take = (b[0] > a[0]) | ((b[0] == a[0]) & (b[1] < a[1]))
  return jnp.where(take, b[0], a[0]), jnp.where(take, b[1], a[1])


def gumbel_block(blk: Block, key):
  return rng.gumbel(rng.random_bits(key, blk.ids))


class Stats(NamedTuple):
  n_legal: jax.Array
  n_bad: jax.Array     # legal NaN / +inf
  n_fin: jax.Array
  zmax: jax.Array      # max finite legal z
  greedy: jax.Array    # smallest id at zmax
  kmin: jax.Array      # min / max sort key over finite legal
  kmax: jax.Array
  draw: jax.Array      # Gumbel-max over finite legal of z * inv_t (the untruncated draw)


def stats(row: Row, key, inv_t) -> Stats:
  """One pass: counts, flags inputs, greedy argmax and the untruncated Gumbel-max draw."""
  zero = jnp.int32(0)

  def fn(b: Block, c):
    n_legal, n_bad, n_fin, zb, kmin, kmax, gb = c
    n_legal = n_legal + _count(b.legal)
    n_bad = n_bad + _count(b.legal & ~b.fin & ~(b.z == F32_NEG_INF))
    n_fin = n_fin + _count(b.fin)
    zb = _merge_max(zb, _first_max(b.z, b.fin, b.ids))
    kmin = jnp.minimum(kmin, jnp.min(jnp.where(b.fin, b.key, INT_MAX)))
    kmax = jnp.maximum(kmax, jnp.max(jnp.where(b.fin, b.key, INT_MIN)))
    gb = _merge_max(gb, _first_max(b.z * inv_t + gumbel_block(b, key), b.fin, b.ids))
    return n_legal, n_bad, n_fin, zb, kmin, kmax, gb

  none = (F32_NEG_INF, INT_MAX)
  n_legal, n_bad, n_fin, zb, kmin, kmax, gb = fold(
      row, fn, (zero, zero, zero, none, INT_MAX, INT_MIN, none))
  return Stats(n_legal, n_bad, n_fin, zb[0], zb[1], kmin, kmax, gb[1])


def _ceil_mid(lo, hi):
  return (lo >> 1) + (hi >> 1) + (lo & hi & 1) + ((lo ^ hi) & 1)


def _floor_mid(lo, hi):
  return (lo >> 1) + (hi >> 1) + (lo & hi & 1)


def _bisect(lo, hi, good_at, ceil: bool):
  """Largest t in [lo, hi] with good_at(t) (ceil=True, good is a prefix), or smallest
  (ceil=False, good is a suffix). One pass per step; stops when lo == hi."""

  def body(c):
    lo, hi = c
    mid = _ceil_mid(lo, hi) if ceil else _floor_mid(lo, hi)
    good = good_at(mid)
    if ceil:
      return jnp.where(good, mid, lo), jnp.where(good, hi, mid - 1)
    return jnp.where(good, lo, mid + 1), jnp.where(good, mid, hi)

  lo, _ = jax.lax.while_loop(lambda c: c[0] < c[1], body, (lo, hi))
  return lo


class Thresholds(NamedTuple):
  """The support S = fin & (key, -id) >= (tk, -tid) & w >= min_p & key >= tp."""
  tk: jax.Array
  tid: jax.Array
  tp: jax.Array
  min_p: jax.Array
  m: jax.Array       # max of z * inv_t over finite legal
  inv_t: jax.Array


def in_support(b: Block, th: Thresholds):
  """(cand bool[BW, 32], w f32[BW, 32]) of a block (also works on scalars)."""
  cand = b.fin & ((b.key > th.tk) | ((b.key == th.tk) & (b.ids <= th.tid)))
  w = jnp.where(cand, jnp.exp(b.z * th.inv_t - th.m), 0.0)
  cand = cand & (w >= th.min_p) & (b.key >= th.tp)
  return cand, jnp.where(cand, w, 0.0)


def load_one(row: Row, token) -> Block:
  """The Block fields of a single token id (any int32; out-of-range ids are illegal)."""
  valid = (token >= 0) & (token < row.vocab_size)
  t = jnp.clip(token, 0, row.vocab_size - 1)
  z = row.logits[(*row.lead, t // 32, t % 32)].astype(jnp.float32)
  legal = valid
  if row.mask is not None:
    bit = jax.lax.shift_right_logical(row.mask[(*row.lead, t // 32)], t % 32) & 1
    legal = legal & ((bit == 1) | ~row.enabled)
  fin = legal & (jnp.abs(z) < jnp.inf)
  return Block(z, t, legal, fin, sort_key(jnp.where(fin, z, 0.0)), t // 32)


def thresholds(row: Row, st: Stats, sampling, inv_t, top_k, top_p, min_p) -> Thresholds:
  """Top-k (ties to the smaller id), min-p and top-p thresholds of a row, by bisection.

  Unneeded searches start with lo == hi and run no pass. Branch results are always derived
  from traced values: the Triton lowering cannot yield bare literals from ``cond``.
  """
  zero = st.n_legal - st.n_legal                                     # traced i32 zero
  need_k = sampling & (top_k > 0) & (top_k < st.n_fin)
  k = jnp.where(need_k, top_k, 1)

  def count_ge(t):
    return fold(row, lambda b, c: c + _count(b.fin & (b.key >= t)), zero) >= k

  tk = _bisect(jnp.where(need_k, st.kmin, INT_MIN), jnp.where(need_k, st.kmax, INT_MIN),
               count_ge, ceil=True)

  def gt_eq(b, c):
    return c[0] + _count(b.fin & (b.key > tk)), c[1] + _count(b.fin & (b.key == tk))

  n_gt, n_eq = jax.lax.cond(need_k, lambda: fold(row, gt_eq, (zero, zero)),
                            lambda: (zero, zero))
  need_tie = need_k & (n_gt + n_eq > k)

  def ties_le(t):
    return fold(row, lambda b, c: c + _count(b.fin & (b.key == tk) & (b.ids <= t)),
                zero) >= k - n_gt

  tid = _bisect(jnp.where(need_tie, 0, INT_MAX),
                jnp.where(need_tie, 32 * row.words - 1, INT_MAX), ties_le, ceil=False)
  m = jnp.where(sampling, st.zmax * inv_t, 0.0)
  th = Thresholds(tk, tid, INT_MIN + zero, jnp.maximum(min_p, 0.0) * sampling, m, inv_t)
  need_p = sampling & (top_p < 1.0)

  def sums(b, c):
    cand, w = in_support(b, th)
    return (c[0] + jnp.sum(w), jnp.minimum(c[1], jnp.min(jnp.where(cand, b.key, INT_MAX))),
            jnp.maximum(c[2], jnp.max(jnp.where(cand, b.key, INT_MIN))))

  fzero = zero.astype(jnp.float32)
  total, lo, hi = jax.lax.cond(
      need_p, lambda: fold(row, sums, (fzero, INT_MAX + zero, INT_MIN + zero)),
      lambda: (fzero, INT_MIN + zero, INT_MIN + zero))
  target = top_p * total

  def mass_below(t):
    def fn(b, c):
      _, w = in_support(b, th)
      return c + jnp.sum(jnp.where(b.key > t, w, 0.0))
    return fold(row, fn, fzero) < target

  return th._replace(tp=_bisect(lo, hi, mass_below, ceil=False))


def row_flags(st: Stats):
  """i32 flags of a row: FLAG_EMPTY, FLAG_NONFINITE or 0."""
  return jnp.where(st.n_legal == 0, jnp.int32(FLAG_EMPTY),
                   jnp.where((st.n_bad > 0) | (st.n_fin == 0), jnp.int32(FLAG_NONFINITE),
                             jnp.int32(0)))


def support_draw(row: Row, th: Thresholds, key):
  """One pass over S: (sum of w, Gumbel-max draw of z * inv_t over S)."""
  def fn(b, c):
    cand, w = in_support(b, th)
    return c[0] + jnp.sum(w), _merge_max(c[1], _first_max(b.z * th.inv_t + gumbel_block(b, key),
                                                          cand, b.ids))

  total, best = fold(row, fn, (jnp.float32(0), (F32_NEG_INF, INT_MAX)))
  return total, best[1]


def residual_draw(row: Row, th: Thresholds, total, q_block, key, fallback):
  """One pass: Gumbel-max draw from norm(max(p - q, 0)) (arXiv 2211.17192), where
  p = w / total on S and ``q_block(block) -> f32[BW, 32]``; ``fallback`` if the residual is 0.
  """
  def fn(b, c):
    _, w = in_support(b, th)
    r = jnp.maximum(w / jnp.maximum(total, 1e-38) - q_block(b), 0.0)
    ok = r > 0
    score = jnp.log(jnp.where(ok, r, 1.0)) + gumbel_block(b, key)
    return _merge_max(c, _first_max(score, ok, b.ids))

  best = fold(row, fn, (F32_NEG_INF, INT_MAX))
  return jnp.where(best[1] == INT_MAX, fallback, best[1])
