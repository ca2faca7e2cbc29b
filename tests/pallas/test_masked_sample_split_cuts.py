"""masked_sample split, rows with top-k / top-p / min-p cuts: the sorting-free second pass
(per-chunk key histograms, thresholds chosen in jnp) draws exactly the reference's tokens and
flags (same counter-based noise), ties at the thresholds included."""

from __future__ import annotations

import functools
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from infernix_jax import pallas as ip
from infernix_jax.pallas import _sampling, rng
from infernix_jax.testing.exact import exact_jit
from tests.pallas import cases

ms = importlib.import_module("infernix_jax.pallas.masked_sample")
split = importlib.import_module("infernix_jax.pallas.masked_sample_split")

CAP = _sampling.TOPK_CAP
# (vocab_size, logits width, dtype, chunk words): V never a multiple of the chunk; the last
# shape is narrower than TOPK_CAP, so the reference's small-k path keeps the whole row.
SHAPES = [(1000, 1000, np.float32, 8), (1000, 1024, jnp.bfloat16, 16),
          (2053, 2080, np.float32, 16), (2053, 2053, jnp.bfloat16, 8), (37, 40, np.float32, 1)]
FAST = [SHAPES[0], SHAPES[4]]             # the rest: `make test` only (tests/conftest.py)
PRODUCT = [s for s in SHAPES if s not in FAST]
SEED_BASES = (0, 1000, 77777)


def cut_case(seed: int, v: int, vm: int, chunk: int, dtype) -> cases.Case:
  """Greedy, plain and cut rows in one batch (see the comments); ``chunk``: tokens per chunk."""
  rng_ = np.random.default_rng(seed)
  rows, logits, legal, enabled = [], [], [], []
  ids = np.arange(v)

  def add(row, z=None, allowed=None, on=True):
    z = rng_.normal(size=vm) * 3.0 if z is None else np.asarray(z, np.float32)
    allowed = rng_.random(v) < 0.6 if allowed is None else allowed
    rows.append(row), logits.append(z), legal.append(allowed), enabled.append(on)

  halves = lambda: np.round(rng_.normal(size=vm) * 2) / 2               # many equal values
  # Signed zeros as the largest values: -0.0 and +0.0 are one key, ordered by id.
  zeros = -np.abs(halves()) - 0.5
  at = rng_.random(vm) < 0.3
  zeros[at] = np.where(rng_.random(at.sum()) < 0.5, -0.0, 0.0)
  ties = halves()
  add(dict(temperature=0.0, top_k=3, top_p=0.5))                        # 0 greedy ignores cuts
  add(dict(temperature=1.0))                                            # 1 plain
  for k in (1, 5, CAP, CAP + 1, 200):                                   # 2-6 top-k
    add(dict(temperature=0.9, top_k=k))
  add(dict(temperature=1.0, top_k=10), allowed=np.isin(ids, rng_.choice(v, 4, replace=False)))
  #                                                                     7 k > the legal count
  add(dict(temperature=1.0, top_k=v), on=False)                         # 8 k = V
  for p in (0.0, 0.5, 0.9, 1.0):                                        # 9-12 top-p
    add(dict(temperature=1.1, top_p=p))
  add(dict(temperature=1.0, min_p=0.1))                                 # 13 min-p
  add(dict(temperature=0.6, min_p=0.5))                                 # 14
  add(dict(temperature=0.9, top_k=10, top_p=0.9, min_p=0.05))          # 15 all three
  add(dict(temperature=1.3, top_k=200, top_p=0.8))                     # 16 large k + top-p
  add(dict(temperature=0.8, top_k=40, top_p=0.5, min_p=0.01))          # 17 small k + top-p
  add(dict(temperature=1.0, top_p=0.7, min_p=0.02))                    # 18
  add(dict(temperature=1.0, top_k=6), z=ties)                           # 19 ties at the k-th
  add(dict(temperature=1.0, top_k=140), z=ties)                         # 20 large k at a tie
  add(dict(temperature=1.0, top_p=0.5), z=ties)                         # 21 top-p at tied keys
  add(dict(temperature=0.7, top_k=20, top_p=0.6), z=ties)              # 22
  add(dict(temperature=1.0, top_p=0.0), z=ties)                         # 23 the max group only
  add(dict(temperature=1.0, top_k=3), z=zeros)                          # 24 signed zeros
  add(dict(temperature=1.0, top_k=CAP + 7), z=zeros)                    # 25
  add(dict(temperature=1.0, top_p=0.3, min_p=0.5), z=zeros)             # 26
  add(dict(temperature=0.0, top_k=2), z=zeros)                          # 27 greedy at signed 0
  inside = (ids >= chunk) & (ids < 2 * chunk) & (rng_.random(v) < 0.5)
  inside[chunk] = True                                                  # other chunks all masked
  add(dict(temperature=1.0, top_k=5, top_p=0.9), allowed=inside)        # 28
  last = (v - 1) // chunk * chunk
  add(dict(temperature=0.8, top_p=0.8, min_p=0.05),
      allowed=(ids >= last) & (rng_.random(v) < 0.7))                   # 29 the partial chunk
  add(dict(temperature=1.0, top_k=4), allowed=np.zeros(v, bool))        # 30 empty
  z = rng_.normal(size=vm)
  allowed = rng_.random(v) < 0.5
  z[np.flatnonzero(allowed)[0]] = np.nan
  add(dict(temperature=1.0, top_p=0.9), z=z, allowed=allowed)           # 31 legal NaN
  z = np.full(vm, -np.inf)
  z[v - 30:] = rng_.normal(size=vm - v + 30)
  add(dict(temperature=1.0, top_k=12, top_p=0.95), z=z, on=False)      # 32 -inf then finite
  add(dict(temperature=0.05, top_k=100, min_p=0.2))                     # 33 low temperature
  add(dict(temperature=2.0, top_k=7, presence=0.5, frequency=0.3,
           history=list(rng_.integers(0, v, 4))))                       # 34 penalties first
  add(dict(temperature=0.0))                                            # 35 greedy
  # 36: top-p exactly at a boundary: two legal ids, the mass above the second (1.0, the max's
  # weight) equals top_p * total, so the second is out (the comparison is strict).
  def boundary(z2):
    """(top_p, z2) with top_p * (1 + exp(z2)) == 1 exactly in f32, or None."""
    z2 = np.float32(np.float32(z2).astype(dtype))
    total = np.float32(1.0) + np.float32(jax.jit(jnp.exp)(z2))
    near = np.float32(1.0) / total + np.arange(-4, 5) * np.float32(2.0 ** -24)
    return next(((t, z2) for t in near.astype(np.float32) if t * total == np.float32(1.0)),
                None)

  top_p, z2 = next(b for b in map(boundary, np.linspace(-0.1, -1.0, 50)) if b)
  z = rng_.normal(size=vm)
  z[3], z[v - 2] = 0.0, z2
  add(dict(temperature=1.0, top_p=float(top_p)), z=z, allowed=np.isin(ids, [3, v - 2]))
  # 37-40: z / T overflows f32 (m = +inf, weights exp(z / T - m) NaN): these rows take the
  # reference itself, whose NaN comparisons depend on how XLA compiles them.
  huge = lambda: rng_.normal(size=vm) * 1e9
  for row in (dict(), dict(top_k=5), dict(top_k=CAP + 30), dict(top_p=0.9)):
    add(dict(row, temperature=1e-30), z=huge())
  return cases.Case(np.stack(logits).astype(dtype), np.stack(legal), np.array(enabled), rows,
                    v)


def _args(case: cases.Case, base: int):
  r = len(case.rows)
  return (jnp.asarray(case.logits), case.mask, jnp.asarray(case.enabled), case.params(),
          jnp.arange(r, dtype=jnp.uint32) * 7919 + base, jnp.arange(r, dtype=jnp.int32) + 3)


def _check(case, got, want):
  tok, flags = map(np.asarray, want)
  for name, g, w in zip(("tokens", "flags"), got, want):
    g, w = np.asarray(g), np.asarray(w)
    bad = np.flatnonzero(g != w)
    assert not len(bad), [(int(i), case.rows[i], int(g[i]), int(w[i])) for i in bad]
  assert set(np.flatnonzero(flags)) == {30, 31}
  drawn = (flags == 0) & (np.arange(len(tok)) < 37)   # the overflow rows may draw nothing
  assert np.all(tok[drawn] >= 0) and np.all(tok < case.vocab_size)


@functools.partial(jax.jit, static_argnames=("v", "cw"))
def _reference_and_jnp_split(args, *, v, cw):
  """(reference, jnp split): one program (the split holds the reference for its overflow rows)."""
  return (ip.masked_sample_reference(*args, vocab_size=v),
          ms.masked_sample_split_reference(*args, vocab_size=v, chunk_words=cw))


def _jnp_split_equals_reference(v, vm, dtype, cw):
  case = cut_case(1, v, vm, 32 * cw, dtype)
  for base in SEED_BASES:
    want, got = _reference_and_jnp_split(_args(case, base), v=v, cw=cw)
    _check(case, got, want)
  return case, want


@pytest.mark.parametrize("v,vm,dtype,cw", FAST)
def test_cut_rows_equal_the_reference(v, vm, dtype, cw):
  case, (tok, _) = _jnp_split_equals_reference(v, vm, dtype, cw)
  tok = np.asarray(tok)
  chunk = 32 * cw
  assert chunk <= tok[28] < 2 * chunk and tok[29] >= (v - 1) // chunk * chunk
  assert tok[32] >= v - 30


@pytest.mark.parametrize("v,vm,dtype,cw", PRODUCT)
def test_cut_rows_equal_the_reference_product(v, vm, dtype, cw):
  _jnp_split_equals_reference(v, vm, dtype, cw)


def test_sort_key_folds_signed_zeros_under_jit_and_eagerly():
  """-0.0 and +0.0 are one key, jitted or not (XLA rewrites z + 0.0 to z), and ``lax.top_k``
  over ``fold_zero``ed values orders them like the keys: by id."""
  z = jnp.asarray([-0.0, 0.0, 1.0, -2.0, -0.0, -np.inf], jnp.float32)
  for fn in (_sampling.sort_key, jax.jit(_sampling.sort_key)):
    keys = np.asarray(fn(z))
    assert keys[0] == keys[1] == keys[4] == 0 and keys[2] > 0 > keys[3] > keys[5]
  _, ids = jax.jit(lambda x: jax.lax.top_k(_sampling.fold_zero(x), 4))(z)
  assert list(np.asarray(ids)) == [2, 0, 1, 4]


def test_the_tie_rows_tie_at_their_thresholds():
  """The constructed rows are not vacuous: the k-th value is shared by more ids than k
  leaves room for, and the signed-zero rows have -0.0 and +0.0 at their top."""
  case = cut_case(1, 1000, 1000, 256, np.float32)
  for i, k in ((19, 6), (20, 140), (24, 3), (25, CAP + 7)):
    z = case.logits[i][:1000][case.legal[i]]
    kth = np.sort(z)[::-1][k - 1]
    assert np.sum(z > kth) < k < np.sum(z >= kth), i
  z = case.logits[24][:1000][case.legal[24]]
  top = z[z == z.max()]
  assert z.max() == 0.0 and np.any(np.signbit(top)) and np.any(~np.signbit(top))


def test_the_second_pass_has_the_reference_support():
  _second_pass_has_the_reference_support(*SHAPES[0])


@pytest.mark.parametrize("v,vm,dtype,cw", SHAPES[1:])
def test_the_second_pass_has_the_reference_support_product(v, vm, dtype, cw):
  _second_pass_has_the_reference_support(v, vm, dtype, cw)


@functools.partial(jax.jit, static_argnames=("v", "cw"))
def _second_pass_and_reference(args, *, v, cw):
  """(live rows, ``cut_support`` as bool[R, Vm], the reference's support, ``cut_tokens``, the
  reference's tokens): one program."""
  logits, mask, enabled, params = args[:4]
  r, vm = logits.shape
  parts = ms.split_partials_reference(*args, vocab_size=v, chunk_words=cw)
  _, flags, m = ms.combine_partials(parts, params.temperature)
  cut = (params.top_k > 0) | (params.top_p < 1.0) | (params.min_p > 0.0)
  live = (params.temperature > 0) & (flags == 0) & cut & jnp.isfinite(m)
  z, legal = split._chunks(logits, mask, enabled, params, v, cw)
  s = ms.cut_support(z, legal, params, m, live, width=vm)
  small = jnp.zeros((r, vm), jnp.int32).at[jnp.arange(r)[:, None], s.top_ids].add(
      s.top_cand.astype(jnp.int32))
  got = jnp.where(s.small[:, None], small > 0, s.cand.reshape(r, -1)[:, :vm])
  zr = ms._prepare_logits(logits, params).astype(jnp.float32)
  lr = _sampling.unpack_legal(mask, enabled, v, vm)
  want = _sampling.support(zr, lr, params.temperature, params.top_k, params.top_p,
                           params.min_p).cand
  tok = ms.cut_tokens(z, legal, params, rng.stream_key(args[4], args[5], 0), m, live,
                      width=vm)
  return live, got, want, tok, ip.masked_sample_reference(*args, vocab_size=v)[0]


def _second_pass_has_the_reference_support(v, vm, dtype, cw):
  """``cut_support`` is the reference's support on every cut row, as a set of ids (more
  sensitive than draws: a wrong threshold that only adds unlikely ids shows here), and
  ``cut_tokens`` alone draws the reference's tokens there (the reference does not answer
  them). Row 36 sits exactly on a top-p boundary."""
  case = cut_case(1, v, vm, 32 * cw, dtype)
  live, got, want, tok, ref = map(np.asarray,
                                  _second_pass_and_reference(_args(case, 5), v=v, cw=cw))
  assert live.sum() >= 26 and live[36] and not np.any(live[37:41])
  for i in np.flatnonzero(live):
    assert set(np.flatnonzero(got[i])) == set(np.flatnonzero(want[i])), (v, i, case.rows[i])
  assert set(np.flatnonzero(want[36])) == {3}
  np.testing.assert_array_equal(tok[live], ref[live])
  assert np.all(tok[~live] == -1)


def test_the_exact_top_p_boundary_row_is_on_the_boundary():
  """Row 36: one float step more top-p keeps its second id."""
  case = cut_case(1, 1000, 1000, 256, np.float32)
  row = case.rows[36]
  for top_p, support in ((row["top_p"], {3}),
                         (float(np.nextafter(np.float32(row["top_p"]), np.float32(2))),
                          {3, 998})):
    one = cases.Case(case.logits[36:37], case.legal[36:37], case.enabled[36:37],
                     [dict(row, top_p=top_p)], 1000)
    p, _, _ = ip.masked_probs_reference(jnp.asarray(one.logits), one.mask,
                                        jnp.asarray(one.enabled), one.params(),
                                        vocab_size=1000)
    assert set(np.flatnonzero(np.asarray(p[0]))) == support


@functools.partial(exact_jit, static_argnames=("v", "block", "interpret"))
def _kernel_and_reference(args, *, v, block, interpret):
  """(split kernel, reference): one program at XLA's default level (`exact_jit`: at the
  LLVM level 0 in XLA_FLAGS the kernel's and the reference's floats may differ by an ulp)."""
  return (ms.masked_sample_split_kernel(*args, vocab_size=v, block=block, interpret=interpret),
          ip.masked_sample_reference(*args, vocab_size=v))


class CutKernelTest:
  """The Pallas partials plus the second pass equal the reference on cut rows."""
  INTERPRET = True

  @pytest.mark.parametrize("v,vm,dtype,cw", SHAPES[:2])
  def test_kernel_cut_rows_equal_the_reference(self, v, vm, dtype, cw):
    case = cut_case(2, v, vm, 32 * cw, dtype)
    for base in SEED_BASES[:2]:
      got, want = _kernel_and_reference(_args(case, base), v=v,
                                        block=ms.SplitBlockSizes(cw, 4, 1),
                                        interpret=self.INTERPRET)
      _check(case, got, want)


class TestCutKernelInterpret(CutKernelTest):
  INTERPRET = True
