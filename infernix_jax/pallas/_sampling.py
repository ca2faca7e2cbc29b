"""Per-row sampling transforms in plain jnp: legality, penalties, top-k/min-p/top-p supports.

The target distribution of a row (DESIGN.md section 5): penalized logits z, legal set A
(mask bits for ids < V; every id < V for a disabled row). With T > 0 the weights are
w = exp(z/T - max_A z/T) on the support S, where
  top-k: the k largest z over the finite legal ids, ties to the smaller id (k <= |A| uses k);
  min-p: w >= min_p;
  top-p: keep v iff the mass of strictly larger z in the support so far is < top_p * sum w;
and p = w / sum_S w. Greedy (T = 0) is argmax_A z, ties to the smaller id. Every support is
a threshold on the order-preserving int32 key of z, found by bisection (no sort: sorting
[R, 151936] on CPU costs seconds). Rows are vectorized: arrays are [N, Vm].

Branches: everything cheap (a pass or two over the rows) runs for every row and a select
keeps what a row needs. The expensive parts (the C-largest top-k, the whole-row bisections
of large top-k, its ties and top-p, the dense draw's noise) go through `only_if`: skipped when no row needs them
where a skip is free, computed and selected where a conditional would wait on the host.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from infernix_jax.pallas import rng
from infernix_jax.pallas._types import FLAG_EMPTY, FLAG_NONFINITE

INT_MIN = np.int32(-2**31)
INT_MAX = np.int32(2**31 - 1)


def sort_key(z):
  """Order-preserving int32 key of f32 values (-0.0 folded onto +0.0, on the bits: XLA
  simplifies z + 0.0 to z, which would keep -0.0 below +0.0 under jit)."""
  bits = jax.lax.bitcast_convert_type(z, jnp.int32)
  bits = jnp.where(bits == INT_MIN, 0, bits)
  return jnp.where(bits < 0, bits ^ np.int32(0x7FFFFFFF), bits)


def fold_zero(z):
  """z with -0.0 replaced by +0.0 (a select, which XLA keeps, unlike z + 0.0): the values
  ``lax.top_k`` orders as ``sort_key`` does."""
  return jnp.where(z == 0.0, jnp.zeros_like(z), z)


def unpack_legal(mask, enabled, vocab_size: int, width: int):
  """The legal ids of packed mask rows, on the device (`mask_layout.unpack` in jnp).

  Args:
    mask: i32[R, W] packed words (bit `id % 32` of word `id // 32`).
    enabled: bool[R]; a disabled row allows every id < V.
    vocab_size: V; ids >= V are never legal.
    width: the output width (Vm, may exceed W * 32: padded with False).

  Returns:
    bool[R, width].
  """
  n, w = mask.shape
  lanes = jnp.arange(32, dtype=jnp.int32)
  bits = jax.lax.shift_right_logical(mask[:, :, None], lanes[None, None, :]) & 1    # [N, W, 32]
  bits = bits.reshape(n, w * 32)[:, :min(width, w * 32)] == 1
  if width > w * 32:
    bits = jnp.pad(bits, ((0, 0), (0, width - w * 32)))
  in_vocab = jnp.arange(width, dtype=jnp.int32) < vocab_size
  return (bits | ~enabled[:, None]) & in_vocab[None, :]


def penalty_entries(ids, counts, presence, frequency):
  """Sparse logit deltas from a history with possible duplicate ids.

  Args:
    ids: i32[N, M] history ids (-1 padding); counts: i32[N, M]; presence, frequency: f32[N].

  Returns:
    (ids i32[N, M], delta f32[N, M]): delta is nonzero only at the first occurrence of an id
    and equals presence * [total > 0] + frequency * total for that id's total count.
  """
  valid = ids >= 0
  same = (ids[:, :, None] == ids[:, None, :]) & valid[:, :, None] & valid[:, None, :]
  total = jnp.sum(jnp.where(same, counts[:, None, :], 0), axis=-1)             # [N, M]
  h = ids.shape[1]
  earlier = jnp.tril(jnp.ones((h, h), bool), k=-1)                             # j < i
  first = ~jnp.any(same & earlier[None], axis=-1)
  delta = presence[:, None] * (total > 0) + frequency[:, None] * total
  return ids, jnp.where(valid & first, delta, 0.0).astype(jnp.float32)


def seen_ids(prompt_mask, ids, width: int):
  """bool[N, width]: the ids of the packed prompt mask (i32[N, Wp]) or of ``ids`` (i32[N, M],
  -1 padding): the tokens a repetition penalty applies to."""
  n, wp = prompt_mask.shape
  lanes = jnp.arange(32, dtype=jnp.int32)
  bits = jax.lax.shift_right_logical(prompt_mask[:, :, None], lanes[None, None, :]) & 1
  seen = bits.reshape(n, wp * 32)[:, :width] == 1                              # [N, <=width]
  if width > wp * 32:
    seen = jnp.pad(seen, ((0, 0), (0, width - wp * 32)))
  if ids.shape[1]:
    safe = jnp.where((ids >= 0) & (ids < width), ids, width)                   # width: dropped
    rows = jnp.broadcast_to(jnp.arange(n)[:, None], ids.shape)
    seen = seen.at[rows, safe].set(True, mode="drop")
  return seen


def apply_repetition(z, seen, penalty):
  """vLLM / HF repetition penalty: z f32[N, Vm] at ``seen`` ids divided by ``penalty`` (f32[N],
  > 0) where positive, multiplied where not (penalty 1 leaves z exactly as it was)."""
  r = penalty[:, None]
  return jnp.where(seen, jnp.where(z > 0, z / r, z * r), z)


def apply_penalties(z, ids, delta):
  """z f32[N, Vm] minus the sparse deltas (ids i32[N, M], delta f32[N, M])."""
  n, vm = z.shape
  if ids.shape[1] == 0:
    return z
  safe = jnp.where((ids >= 0) & (ids < vm), ids, vm)                           # vm: dropped
  rows = jnp.broadcast_to(jnp.arange(n)[:, None], ids.shape)
  return z.at[rows, safe].add(-delta, mode="drop")


class Support(NamedTuple):
  """Target distribution of N rows in dense form."""
  flags: jax.Array      # i32[N]: FLAG_EMPTY / FLAG_NONFINITE
  greedy: jax.Array     # i32[N]: argmax over legal, ties to the smaller id (-1 if flagged
                        # or T > 0 without greedy_all)
  zt: jax.Array         # f32[N, Vm]: z / T (z for greedy rows)
  cand: jax.Array       # bool[N, Vm]: the support S
  w: jax.Array          # f32[N, Vm]: exp(zt - max) on S, 0 elsewhere
  total: jax.Array      # f32[N]: sum of w


class Thresholds(NamedTuple):
  """Target distribution of N rows in threshold form (see the module docstring).

  S = fin & (key, -id) >= (tk, -tid) & w >= min_p & key >= tp, w = exp(z * inv_t - m).
  Rows with ``small`` (0 < top_k <= TOPK_CAP) also carry S in sorted form: their support lies
  within the ``C`` largest keys, so they can be drawn from without touching the whole row.
  """
  flags: jax.Array      # i32[N]
  greedy: jax.Array     # i32[N] (-1 if flagged, or T > 0 without greedy_all)
  sampling: jax.Array   # bool[N]: T > 0 and not flagged
  inv_t: jax.Array      # f32[N]
  m: jax.Array          # f32[N]: max over finite legal of z * inv_t
  tk: jax.Array         # i32[N] top-k key threshold (INT_MIN: off)
  tid: jax.Array        # i32[N] largest id kept at key == tk
  tp: jax.Array         # i32[N] top-p key threshold (INT_MIN: off)
  min_p: jax.Array      # f32[N]
  small: jax.Array      # bool[N]
  top_ids: jax.Array    # i32[N, C]: ids by (key desc, id asc)
  top_cand: jax.Array   # bool[N, C]: S in that order (small rows only)


TOPK_CAP = 64

# The names of the expensive branches `only_if` may skip (the lowering test lists them).
SKIPPABLE = ("top_k_small", "top_k_bisection", "top_k_ties", "top_p_bisection",
             "dense_draw")


def skip_is_free() -> bool:
  """Whether this backend skips a branch for free (read at trace time). On CPU and TPU the
  device reads its own predicate; XLA's GPU conditional copies the predicate to the host and
  waits for it, which also cuts the step's command buffer (CUDA graph) in pieces."""
  return jax.default_backend() in ("cpu", "tpu")


def only_if(pred, fn, otherwise, name: str):
  """fn() where the scalar `pred` holds, else otherwise() (same pytree structure).

  For the expensive branches of SKIPPABLE, which most rounds rule out (greedy rows need none
  of them): a `lax.cond` in the named scope `name` where `skip_is_free()`; elsewhere both
  run and a select picks, so no conditional waits on the host. The result is the same.
  """
  assert name in SKIPPABLE, name
  with jax.named_scope(name):
    if skip_is_free():
      return jax.lax.cond(pred, fn, otherwise)
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), fn(), otherwise())


def _kth_key(keys, ok, k):
  """Per row, the largest key t with #{ok & key >= t} >= k (k >= 1 assumed where used)."""
  lo = jnp.min(jnp.where(ok, keys, INT_MAX), axis=-1)
  hi = jnp.max(jnp.where(ok, keys, INT_MIN), axis=-1)

  def body(_, c):
    lo, hi = c
    mid = (lo >> 1) + (hi >> 1) + (lo & hi & 1) + ((lo ^ hi) & 1)               # ceil((lo+hi)/2)
    good = jnp.sum(ok & (keys >= mid[:, None]), axis=-1) >= k
    act = lo < hi
    return jnp.where(act & good, mid, lo), jnp.where(act & ~good, mid - 1, hi)

  lo, _ = jax.lax.fori_loop(0, 32, body, (lo, hi))
  return lo


def _tie_id(ids, tie, r, width: int):
  """Per row, the smallest id t with #{tie & id <= t} >= r."""
  lo = jnp.zeros(r.shape, jnp.int32)
  hi = jnp.full(r.shape, width - 1, jnp.int32)

  def body(_, c):
    lo, hi = c
    mid = (lo + hi) // 2
    good = jnp.sum(tie & (ids <= mid[:, None]), axis=-1) >= r
    act = lo < hi
    return jnp.where(act & ~good, mid + 1, lo), jnp.where(act & good, mid, hi)

  lo, _ = jax.lax.fori_loop(0, max(1, int(np.ceil(np.log2(max(width, 2))))) + 1, body,
                            (lo, hi))
  return lo


def _top_p_key(keys, inside, w, top_p):
  """Per row, the smallest key t with sum{inside & key > t} w < top_p * sum w (else max)."""
  target = top_p * jnp.sum(jnp.where(inside, w, 0.0), axis=-1)
  lo = jnp.min(jnp.where(inside, keys, INT_MAX), axis=-1)
  hi = jnp.max(jnp.where(inside, keys, INT_MIN), axis=-1)

  def body(_, c):
    lo, hi = c
    mid = (lo >> 1) + (hi >> 1) + (lo & hi & 1)                                 # floor
    mass = jnp.sum(jnp.where(inside & (keys > mid[:, None]), w, 0.0), axis=-1)
    good = mass < target
    act = lo < hi
    return jnp.where(act & ~good, mid + 1, lo), jnp.where(act & good, mid, hi)

  lo, _ = jax.lax.fori_loop(0, 32, body, (lo, hi))
  return lo


def top_c_support(z, top_vals, top_ids, small, k, inv_t, m, min_p, top_p, need_p):
  """Top-k, min-p and top-p of the rows whose top-k set lies in C sorted entries.

  Args:
    z: f32[N, >= Vm] logits; top_vals f32[N, C] (``fold_zero``ed, -inf: no entry) and top_ids
      i32[N, C]: entries by (key desc, id asc), holding at least the first k finite legal
      ones; small: bool[N]; k: i32[N] (>= 1); inv_t, m, min_p, top_p: f32[N]; need_p: bool[N].

  Returns:
    (tp i32[N] top-p key threshold (INT_MIN where not need_p), cand bool[N, C]: the support).
    Top-p keeps a key group iff the mass of the support's strictly larger keys (exclusive
    cumsum in this order, read at the group's first entry) is < top_p * its total; the first
    group always stays.
  """
  n, c = top_vals.shape
  top_keys = sort_key(top_vals)
  j = jnp.arange(c)[None, :]
  w_top = jnp.exp(jnp.take_along_axis(z, top_ids, -1) * inv_t[:, None] - m[:, None])
  top_in = (small[:, None] & (j < k[:, None]) & (top_vals > -jnp.inf)
            & (w_top >= min_p[:, None]))
  w_in = jnp.where(top_in, w_top, 0.0)
  excl = jnp.cumsum(w_in, axis=-1) - w_in
  new_group = jnp.concatenate([jnp.ones((n, 1), bool), top_keys[:, 1:] != top_keys[:, :-1]],
                              -1)
  start = jax.lax.cummax(jnp.where(new_group, j, 0), axis=1)
  target = (top_p * jnp.sum(w_in, -1))[:, None]
  kept = top_in & (jnp.take_along_axis(excl, start, -1) < target)
  tp = jnp.where(jnp.any(kept, -1), jnp.min(jnp.where(kept, top_keys, INT_MAX), -1),
                 top_keys[:, 0])
  tp = jnp.where(need_p, tp, INT_MIN)
  return tp, top_in & (top_keys >= tp[:, None])


def thresholds(z, legal, temperature, top_k, top_p, min_p, *,
               greedy_all: bool = True) -> Thresholds:
  """Thresholds of each row's target distribution.

  Args:
    z: f32[N, Vm] penalized logits; legal: bool[N, Vm]; temperature, top_p, min_p: f32[N];
      top_k: i32[N].
    greedy_all: also compute the argmax of sampling rows (else it is -1 there).
  """
  n, vm = z.shape
  ids = jnp.arange(vm, dtype=jnp.int32)[None, :]
  # One pass for both flags: 0 = no legal id, 1 = legal ids, 2 = a legal NaN / +inf.
  state = jnp.max(jnp.where(legal, jnp.where(jnp.isnan(z) | (z == jnp.inf), 2, 1), 0)
                  .astype(jnp.int8), axis=-1)
  fin = legal & jnp.isfinite(z)
  zf = jnp.where(fin, z, -jnp.inf)
  zmax = jnp.max(zf, axis=-1)                   # -inf iff no finite legal logit
  flags = jnp.where(state == 0, FLAG_EMPTY, jnp.where(
      (state == 2) | (zmax == -jnp.inf), FLAG_NONFINITE, 0)).astype(jnp.int32)
  # max + min over ties (XLA CPU's variadic argmax reduce is ~10x slower): one cheap pass,
  # run for every row.
  want = (temperature <= 0) | greedy_all
  greedy = jnp.min(jnp.where(fin & (zf == zmax[:, None]), ids, INT_MAX), axis=-1)
  greedy = jnp.where((flags == 0) & want, greedy, -1)
  sampling = (temperature > 0) & (flags == 0)
  inv_t = jnp.where(sampling, 1.0 / jnp.where(sampling, temperature, 1.0), 1.0)
  m = jnp.where(sampling, zmax * inv_t, 0.0)
  keys = lambda: sort_key(jnp.where(fin, z, 0.0))             # built only where needed
  need_p = sampling & (top_p < 1.0)
  k = jnp.where(top_k > 0, top_k, 1)

  # Small k: the C largest values (lax.top_k puts equal values in increasing id order; on
  # CPU it is ~200x faster on f32 than on the int32 keys).
  c = min(TOPK_CAP, vm)
  # k >= the number of finite legal ids is harmless here: the -inf tail is never in S.
  small = sampling & (top_k > 0) & (top_k <= c)

  def small_path():
    top_vals, top_ids = jax.lax.top_k(jnp.where(fin & small[:, None], fold_zero(z), -jnp.inf),
                                     c)
    top_keys = sort_key(top_vals)
    top_ids = top_ids.astype(jnp.int32)
    kth = jnp.clip(k - 1, 0, c - 1)[:, None]
    tk = jnp.take_along_axis(top_keys, kth, -1)[:, 0]
    tid = jnp.take_along_axis(top_ids, kth, -1)[:, 0]
    tp, top_cand = top_c_support(z, top_vals, top_ids, small, k, inv_t, m, min_p, top_p,
                                 need_p)
    return tk, tid, tp, top_ids, top_cand

  def no_small():
    full = lambda v: jnp.full((n,), v, jnp.int32)
    return (full(INT_MIN), full(INT_MAX), full(INT_MIN), jnp.zeros((n, c), jnp.int32),
            jnp.zeros((n, c), bool))

  # A top-k of C over every row (a partial sort of each row): skipped while no row needs it.
  tk_small, tid_small, tp_small, top_ids, top_cand = only_if(
      jnp.any(small), small_path, no_small, "top_k_small")

  # Large k (< the number of finite legal ids): bisection over the whole row.
  def big_path():
    ky = keys()
    big = sampling & (top_k > c) & (top_k < jnp.sum(fin, axis=-1))
    tk = jnp.where(big, _kth_key(ky, fin & big[:, None], k), INT_MIN)
    n_gt = jnp.sum(fin & (ky > tk[:, None]), axis=-1)
    tie = fin & (ky == tk[:, None])
    need_tie = big & (n_gt + jnp.sum(tie, axis=-1) > k)
    # ~log2(Vm) more passes, only when logits tie at the k-th key.
    tid = only_if(jnp.any(need_tie), lambda: jnp.where(
        need_tie, _tie_id(ids, tie & need_tie[:, None], k - n_gt, vm), INT_MAX),
                  lambda: jnp.full((n,), INT_MAX, jnp.int32), "top_k_ties")
    return tk, tid

  # 32 passes over every row: skipped while no row asks for k > C.
  tk, tid = only_if(jnp.any(sampling & (top_k > c)), big_path,
                    lambda: (jnp.full((n,), INT_MIN, jnp.int32),
                             jnp.full((n,), INT_MAX, jnp.int32)), "top_k_bisection")
  tk = jnp.where(small, tk_small, tk)
  tid = jnp.where(small, tid_small, tid)

  # Top-p for the other rows: bisection over the whole row.
  dense_p = need_p & ~small

  def top_p_dense():
    ky = keys()
    cand = fin & ((ky > tk[:, None]) | ((ky == tk[:, None]) & (ids <= tid[:, None])))
    w = jnp.where(cand, jnp.exp(z * inv_t[:, None] - m[:, None]), 0.0)
    cand = cand & (w >= min_p[:, None])
    return _top_p_key(ky, cand & dense_p[:, None], jnp.where(cand, w, 0.0), top_p)

  # 32 passes over every row: skipped while no row without small k asks for top-p.
  tp = only_if(jnp.any(dense_p), top_p_dense, lambda: jnp.full((n,), INT_MIN, jnp.int32),
               "top_p_bisection")
  tp = jnp.where(small, tp_small, jnp.where(dense_p, tp, INT_MIN))
  return Thresholds(flags, greedy, sampling, inv_t, m, tk, tid, tp, min_p, small, top_ids,
                    top_cand)


def dense_support(z, legal, th: Thresholds) -> Support:
  """The dense support and weights of each row."""
  ids = jnp.arange(z.shape[1], dtype=jnp.int32)[None, :]
  fin = legal & jnp.isfinite(z)
  keys = sort_key(jnp.where(fin, z, 0.0))
  col = lambda x: x[:, None]
  zt = z * col(th.inv_t)
  cand = fin & ((keys > col(th.tk)) | ((keys == col(th.tk)) & (ids <= col(th.tid))))
  w = jnp.where(cand, jnp.exp(zt - col(th.m)), 0.0)
  cand = cand & (w >= col(th.min_p)) & (keys >= col(th.tp)) & col(th.sampling)
  w = jnp.where(cand, w, 0.0)
  return Support(th.flags, th.greedy, zt, cand, w, jnp.sum(w, axis=-1))


def support(z, legal, temperature, top_k, top_p, min_p) -> Support:
  """Dense support and weights of each row's target distribution (see ``thresholds``)."""
  return dense_support(z, legal, thresholds(z, legal, temperature, top_k, top_p, min_p))


def draw(z, legal, th: Thresholds, key):
  """Per row, the Gumbel-max draw of z * inv_t over S (-1 for greedy or flagged rows).

  Small-k rows draw within their C sorted candidates, the other sampling rows over the whole
  row (noise for every id: the costly part, skipped by `only_if` while no such row samples).
  Its cuts are cheap and apply to every row: a row's thresholds are INT_MIN where it has
  none, and min-p 0 keeps every finite weight.
  """
  zt_top = jnp.take_along_axis(z, th.top_ids, -1) * th.inv_t[:, None]
  sparse = _argmax_gumbel_at(zt_top, th.top_cand, th.top_ids, key)
  rest = th.sampling & ~th.small
  col = lambda x: x[:, None]

  def dense():
    zt = z * col(th.inv_t)
    cand = legal & jnp.isfinite(z) & col(rest)
    ids = jnp.arange(z.shape[1], dtype=jnp.int32)[None, :]
    keys = sort_key(jnp.where(cand, z, 0.0))
    cand = cand & ((keys > col(th.tk)) | ((keys == col(th.tk)) & (ids <= col(th.tid)))) & (
        keys >= col(th.tp))
    cand = cand & (jnp.exp(zt - col(th.m)) >= col(th.min_p))
    return gumbel_argmax(zt, cand, key)

  dense_tok = only_if(jnp.any(rest), dense, lambda: jnp.full(th.flags.shape, -1, jnp.int32),
                      "dense_draw")
  return jnp.where(th.small, sparse, jnp.where(rest, dense_tok, -1))


def _argmax_gumbel_at(scores, cand, ids, key):
  g = rng.gumbel(rng.random_bits(key[:, None], ids))
  s = jnp.where(cand, scores + g, -jnp.inf)
  best = jnp.max(s, axis=-1)
  tok = jnp.min(jnp.where(cand & (s == best[:, None]), ids, INT_MAX), axis=-1)
  return jnp.where(jnp.any(cand, axis=-1), tok, -1)


def probabilities(s: Support, temperature):
  """f32[N, Vm] target p: w / total at T > 0, one-hot(greedy) at T = 0, zeros if flagged."""
  vm = s.w.shape[1]
  onehot = jnp.arange(vm)[None, :] == s.greedy[:, None]
  p = jnp.where((temperature > 0)[:, None], s.w / jnp.maximum(s.total, 1e-38)[:, None],
                onehot.astype(jnp.float32))
  return jnp.where((s.flags == 0)[:, None], p, 0.0)


def gumbel_argmax(scores, cand, key):
  """Per row, argmax over cand of scores + Gumbel(key, id); ties to the smaller id; -1 if none.

  Args:
    scores: f32[N, Vm]; cand: bool[N, Vm]; key: u32[N] stream keys.
  """
  vm = scores.shape[1]
  ids = jnp.arange(vm, dtype=jnp.int32)
  g = rng.gumbel(rng.random_bits(key[:, None], ids[None, :]))
  s = jnp.where(cand, scores + g, -jnp.inf)      # candidates are finite: Gumbel noise is
  best = jnp.max(s, axis=-1)                      # bounded, so best > -inf iff any candidate
  tok = jnp.min(jnp.where(s == best[:, None], ids[None, :], INT_MAX), axis=-1)
  return jnp.where(best > -jnp.inf, tok, -1)
