"""masked_sample split over vocabulary chunks: per-chunk partials (Pallas grid and plain-jnp
reshape) combine to exactly the reference's tokens and flags (same counter-based noise).

Each comparison runs as one program compiled at XLA's default level (`exact_jit`: at the
LLVM level 0 in XLA_FLAGS the kernel's and the reference's float results may differ by an ulp),
called once per seed base."""

from __future__ import annotations

import functools
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from infernix_jax import pallas as ip
from infernix_jax.testing.exact import exact_jit
from tests.pallas import cases

ms = importlib.import_module("infernix_jax.pallas.masked_sample")

INT_MAX = np.iinfo(np.int32).max
# (vocab_size, logits width, dtype, chunk words: chunks of 256 / 512 tokens): V is never a
# multiple of the chunk, the width is either V itself or padded to 32, and each chunk size
# meets both vocabularies, both dtypes and both kinds of width.
PRODUCT = [(1000, 1000, np.float32, 8), (1000, 1024, jnp.bfloat16, 16),
           (2053, 2080, np.float32, 16), (2053, 2053, jnp.bfloat16, 8)]
CHUNK_WORDS = [8, 16]
EMPTY_ROWS, NONFINITE_ROWS = {6, 7}, {8, 9, 10}


def split_case(seed: int, v: int, vm: int, chunk: int, dtype) -> cases.Case:
  """Greedy and sampled rows mixed, no top-k / top-p / min-p cut: each row is drawn by the
  split alone. ``chunk``: tokens per chunk."""
  rng = np.random.default_rng(seed)
  rows, logits, legal, enabled = [], [], [], []
  ids = np.arange(v)

  def add(temperature, z=None, allowed=None, on=True):
    z = rng.normal(size=vm) * 3.0 if z is None else z
    allowed = rng.random(v) < 0.4 if allowed is None else allowed
    rows.append(dict(temperature=temperature)), logits.append(z), legal.append(allowed)
    enabled.append(on)

  add(0.0)                                                              # 0 greedy
  add(1.0)                                                              # 1 sampled
  add(0.3)                                                              # 2
  add(2.5)                                                              # 3
  add(0.0, allowed=(ids >= chunk) & (ids < 2 * chunk) & (rng.random(v) < 0.4))  # 4 one chunk
  last = (v - 1) // chunk * chunk
  add(0.8, allowed=(ids >= last) & (rng.random(v) < 0.5))               # 5 the partial chunk
  add(1.0, allowed=np.zeros(v, bool))                                   # 6 empty
  add(0.0, allowed=np.zeros(v, bool))                                   # 7 empty, greedy
  allowed = rng.random(v) < 0.4
  z = rng.normal(size=vm) * 3.0
  z[np.flatnonzero(allowed)[3]] = np.nan
  add(1.0, z, allowed)                                                  # 8 legal NaN
  add(0.0, np.full(vm, -np.inf), allowed)                               # 9 legal all -inf
  z = rng.normal(size=vm)
  z[np.flatnonzero(allowed)[-1]] = np.inf
  add(0.0, z, allowed)                                                  # 10 legal +inf
  z = rng.normal(size=vm)
  z[np.flatnonzero(~allowed)[:5]] = np.nan                              # illegal NaN: harmless
  add(1.0, z, allowed)                                                  # 11
  add(1.2, allowed=np.zeros(v, bool), on=False)                         # 12 disabled
  add(0.0, allowed=np.zeros(v, bool), on=False)                         # 13 disabled, greedy
  z = rng.normal(size=vm)
  z[[chunk + 3, v - 2]] = 9.0                                           # tie across chunks
  add(0.0, z, np.ones(v, bool))                                         # 14
  z = np.full(vm, -np.inf)
  z[v - 40:] = rng.normal(size=vm - v + 40)
  add(1.0, z, np.ones(v, bool))                                         # 15 -inf then finite
  add(0.05)                                                             # 16 low temperature
  logits = np.stack(logits).astype(dtype)
  return cases.Case(logits, np.stack(legal), np.array(enabled), rows, v)


def _args(case: cases.Case, seed_base: int, mask=True):
  r = len(case.rows)
  return (jnp.asarray(case.logits), case.mask if mask else None,
          jnp.asarray(case.enabled) if mask else None, case.params(),
          jnp.arange(r, dtype=jnp.uint32) * 7919 + seed_base,
          jnp.arange(r, dtype=jnp.int32) + 11)


def _equal_partials(a: ms.ChunkPartials, b: ms.ChunkPartials):
  for name, x, y in zip(ms.ChunkPartials._fields, a, b):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=name)


@functools.partial(jax.jit, static_argnames=("v", "cw"))
def _jnp_split_and_reference(args, *, v, cw):
  """(reference, jnp split partials, their combine, jnp split): one program (plain jnp on
  both sides: equal at LLVM level 0 too)."""
  parts = ms.split_partials_reference(*args, vocab_size=v, chunk_words=cw)
  return (ip.masked_sample_reference(*args, vocab_size=v), parts,
          ms.combine_partials(parts, args[3].temperature)[:2],
          ms.masked_sample_split_reference(*args, vocab_size=v, chunk_words=cw))


@pytest.mark.parametrize("v,vm,dtype,cw", PRODUCT)
def test_jnp_split_equals_reference(v, vm, dtype, cw):
  case = split_case(1, v, vm, 32 * cw, dtype)
  for base in (0, 1000):
    want, parts, got, split = _jnp_split_and_reference(_args(case, base), v=v, cw=cw)
    assert parts.state.shape == (len(case.rows), -(-vm // (32 * cw)))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(split), np.asarray(want))
  tok, flags = map(np.asarray, want)
  assert set(np.flatnonzero(flags == ip.FLAG_EMPTY)) == EMPTY_ROWS
  assert set(np.flatnonzero(flags == ip.FLAG_NONFINITE)) == NONFINITE_ROWS
  assert tok[14] == 32 * cw + 3                        # the tie goes to the smaller id
  assert 32 * cw <= tok[4] < 64 * cw and tok[5] >= (v - 1) // (32 * cw) * 32 * cw
  assert tok[15] >= v - 40 and np.all(tok[flags == 0] >= 0) and np.all(tok < v)


def test_combine_ties_to_the_smaller_id_across_chunks():
  """An oracle-free check of the combine: equal maxima in two chunks give the smaller id."""
  f = lambda *x: jnp.asarray([x], jnp.float32)
  i = lambda *x: jnp.asarray([x], jnp.int32)
  parts = ms.ChunkPartials(i(1, 1, 0), f(2.0, 2.0, -np.inf), i(40, 7, INT_MAX),
                           f(5.0, 5.0, -np.inf), i(90, 64, INT_MAX))
  tok, flags, _ = ms.combine_partials(parts, jnp.asarray([0.0]))
  assert (int(tok[0]), int(flags[0])) == (7, 0)
  tok, _, _ = ms.combine_partials(parts, jnp.asarray([1.0]))
  assert int(tok[0]) == 64


@functools.partial(exact_jit, static_argnames=("v", "block", "interpret"))
def _kernel_partials_and_references(args, *, v, block, interpret):
  """(kernel partials, jnp split partials, the kernel partials' combine, reference)."""
  parts = ms.split_partials_kernel(*args, vocab_size=v, block=block, interpret=interpret)
  return (parts, ms.split_partials_reference(*args, vocab_size=v, chunk_words=block.chunk_words),
          ms.combine_partials(parts, args[3].temperature)[:2],
          ip.masked_sample_reference(*args, vocab_size=v))


@functools.partial(exact_jit, static_argnames=("v", "block", "interpret"))
def _kernel_and_references(args, reference_args, *, v, block, interpret):
  """(split kernel, reference on ``reference_args``, jnp split): one program."""
  return (ms.masked_sample_split_kernel(*args, vocab_size=v, block=block, interpret=interpret),
          ip.masked_sample_reference(*reference_args, vocab_size=v),
          ms.masked_sample_split_reference(*args, vocab_size=v, chunk_words=block.chunk_words))


class SplitKernelTest:
  """The split kernel's partials equal the jnp split's, and its tokens the reference's."""
  INTERPRET = False

  def setup_method(self):
    if not self.INTERPRET and jax.default_backend() != "gpu":
      pytest.skip("the compiled kernel needs a GPU; the Interpret subclass runs it everywhere")

  def block(self, cw):
    return ms.SplitBlockSizes(cw, 4, 1)

  @pytest.mark.parametrize("v,vm,dtype,cw", PRODUCT)
  def test_kernel_equals_reference(self, v, vm, dtype, cw):
    case = split_case(2, v, vm, 32 * cw, dtype)
    for base in (0, 1000):
      args = _args(case, base)
      parts, ref_parts, got, want = _kernel_partials_and_references(
          args, v=v, block=self.block(cw), interpret=self.INTERPRET)
      _equal_partials(parts, ref_parts)
      np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    flags = np.asarray(want[1])
    assert set(np.flatnonzero(flags != 0)) == EMPTY_ROWS | NONFINITE_ROWS
    # Greedy rows draw no noise; chunks without a legal id are left empty.
    greedy = np.asarray(args[3].temperature) == 0
    assert np.all(np.asarray(parts.smax)[greedy] == -np.inf)
    state, zarg = np.asarray(parts.state), np.asarray(parts.zarg)
    assert np.all(state[4, 2:] == 0) and state[4, 0] == 0 and np.all(zarg[6] == INT_MAX)

  @pytest.mark.parametrize("cw", CHUNK_WORDS)
  def test_cut_rows_take_the_reference(self, cw):
    """Rows with top-k / top-p / min-p, and a row whose z / T overflows, mixed with plain
    rows: the whole op equals the reference."""
    v, vm = 1000, 1000
    case = cases.product_case(5, v, vm, np.float32)
    rng = np.random.default_rng(5)
    case.logits[1] = (rng.normal(size=vm) * 1e9).astype(np.float32)
    case.rows[1] = dict(temperature=1e-30)                              # z / T = +-inf
    for base in (0, 1000):
      args = _args(case, base)
      got, want, jnp_split = _kernel_and_references(args, args, v=v, block=self.block(cw),
                                                    interpret=self.INTERPRET)
      np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
      np.testing.assert_array_equal(np.asarray(jnp_split), np.asarray(want))
    assert int(want[0][1]) >= 0

  def test_mask_none_equals_disabled_rows(self):
    case = split_case(3, 1000, 1024, 256, np.float32)
    args = list(_args(case, 0))
    args[2] = jnp.zeros((len(case.rows),), bool)
    a, b, _ = _kernel_and_references(_args(case, 0, mask=False), tuple(args), v=1000,
                                     block=self.block(8), interpret=self.INTERPRET)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


class TestSplitKernelInterpret(SplitKernelTest):
  INTERPRET = True


class TestSplitKernelGpu(SplitKernelTest):
  INTERPRET = False


def test_chunk_words_must_be_a_power_of_two():
  case = split_case(4, 1000, 1000, 256, np.float32)
  with pytest.raises(ValueError, match="chunk_words"):
    ms.masked_sample_split_kernel(*_args(case, 0), vocab_size=1000,
                                  block=ms.SplitBlockSizes(12, 4, 1), interpret=True)


def test_dispatch_runs_the_split_kernel_where_asked_and_the_reference_on_cpu(monkeypatch):
  case = split_case(6, 1000, 1000, 256, np.float32)
  args = _args(case, 0)
  monkeypatch.delenv("INFERNIX_PALLAS_IMPL", raising=False)
  if jax.default_backend() == "cpu":
    assert ip.resolve_impl(None, "masked_sample", len(case.rows)) == "reference"
  calls = []
  real = ms.masked_sample_split_kernel
  monkeypatch.setattr(ms, "masked_sample_split_kernel",
                      lambda *a, **kw: calls.append(kw["interpret"]) or real(*a, **kw))
  got, want = exact_jit(lambda a: (ip.masked_sample(*a, vocab_size=1000, impl="interpret"),
                                   ip.masked_sample_reference(*a, vocab_size=1000)))(args)
  assert calls == [True]
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
