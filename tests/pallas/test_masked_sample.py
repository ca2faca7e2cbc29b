"""masked_sample: kernel == reference == FP64 oracle; exact distribution; counter RNG."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from infernix_jax import mask_layout
from infernix_jax import pallas as ip
from tests.pallas import cases, oracle

SEEDS = 3


def _inputs(case: cases.Case, seed_base=0):
  r = len(case.rows)
  seed = jnp.arange(r, dtype=jnp.uint32) * 7919 + seed_base
  position = jnp.arange(r, dtype=jnp.int32) + 11
  return (jnp.asarray(case.logits), case.mask, jnp.asarray(case.enabled), case.params(), seed,
          position)


@pytest.mark.parametrize("v,vm,dtype", cases.PRODUCT)
def test_reference_matches_fp64_oracle(v, vm, dtype):
  case = cases.product_case(1, v, vm, dtype)
  logits, mask, enabled, params, _, _ = _inputs(case)
  p, greedy, flags = jax.device_get(ip.masked_probs_reference(logits, mask, enabled, params,
                                                              vocab_size=v))
  tol = cases.TOLERANCE[np.dtype(dtype)]
  for i, row in enumerate(case.rows):
    kw = {k: row[k] for k in ("temperature", "top_k", "top_p", "min_p", "presence",
                              "frequency", "history", "repetition", "prompt") if k in row}
    p_or, g_or, f_or = oracle.target(case.logits[i].astype(np.float64), case.oracle_legal(i),
                                     **kw)
    assert flags[i] == f_or, (i, row)
    assert greedy[i] == g_or, (i, row)
    np.testing.assert_array_equal(p[i] > 0, p_or > 0, err_msg=f"support of row {i}: {row}")
    np.testing.assert_allclose(p[i], p_or, **tol, err_msg=f"row {i}: {row}")


def test_oracle_cases_are_not_vacuous():
  case = cases.product_case(1, 257, 288, np.float32)
  p12, _, _ = oracle.target(case.logits[12], case.oracle_legal(12), top_k=3)
  unconstrained_top20 = np.argsort(-case.logits[12][:257])[:20]
  support = np.flatnonzero(p12)
  assert len(support) == 3 and not set(support) & set(unconstrained_top20)
  p18, _, _ = oracle.target(case.logits[18], case.oracle_legal(18), top_k=6)
  z = case.logits[18][:257][case.legal[18]]
  assert np.sum(z >= np.sort(z)[-6]) > 6          # the k-th value is tied: id order decides


def _token_draws(fn, case, seeds=SEEDS):
  out = []
  for s in range(seeds):
    logits, mask, enabled, params, seed, position = _inputs(case, seed_base=1000 * s)
    tok, flags = fn(logits, mask, enabled, params, seed, position, vocab_size=case.vocab_size)
    out.append((np.asarray(tok), np.asarray(flags)))
  return out


class MaskedSampleKernelTest:
  """Kernel vs reference, token for token (same counter-based noise)."""
  INTERPRET = False

  def setup_method(self):
    if not self.INTERPRET and jax.default_backend() != "gpu":
      pytest.skip("the compiled kernel needs a GPU; InterpretTest runs it everywhere")

  def kernel(self, *args, **kw):
    return ip.masked_sample_kernel(*args, interpret=self.INTERPRET,
                                   block=ip.BlockSizes(2, 4, 1) if self.INTERPRET else None,
                                   **kw)

  @pytest.mark.parametrize("v,vm,dtype", cases.PRODUCT)
  def test_kernel_matches_reference(self, v, vm, dtype):
    case = cases.product_case(2, v, vm, dtype)
    got = _token_draws(self.kernel, case)
    want = _token_draws(ip.masked_sample_reference, case)
    for (tk, fk), (tr, fr) in zip(got, want):
      np.testing.assert_array_equal(fk, fr)
      np.testing.assert_array_equal(tk, tr)
    flags = want[0][1]
    assert set(np.flatnonzero(flags == ip.FLAG_EMPTY)) == {7}
    assert set(np.flatnonzero(flags == ip.FLAG_NONFINITE)) == {8, 10, 11}
    assert np.all(want[0][0][flags != 0] == -1) and np.all(want[0][0][flags == 0] >= 0)
    assert np.all(want[0][0] < v)

  def test_kernel_support_is_exact(self):
    """Many draws of one row: the kernel hits exactly the oracle's candidate set."""
    case = cases.product_case(3, 257, 288, np.float32)
    for row_id in (12, 18, 3):
      r = 192
      row = case.rows[row_id]
      sub = cases.Case(np.repeat(case.logits[row_id:row_id + 1], r, 0),
                       np.repeat(case.legal[row_id:row_id + 1], r, 0), np.ones(r, bool),
                       [row] * r, 257)
      tok, flags = self.kernel(jnp.asarray(sub.logits), sub.mask, jnp.asarray(sub.enabled),
                               sub.params(), jnp.arange(r, dtype=jnp.uint32),
                               jnp.zeros((r,), jnp.int32), vocab_size=257)
      p_or, _, _ = oracle.target(sub.logits[0], sub.oracle_legal(0),
                                 **{k: row[k] for k in ("temperature", "top_k", "top_p")
                                    if k in row})
      assert not np.any(np.asarray(flags))
      assert set(np.asarray(tok)) == set(np.flatnonzero(p_or)), row

  def test_mask_none_equals_disabled_rows(self):
    case = cases.product_case(4, 100, 128, np.float32)
    logits, _, _, params, seed, position = _inputs(case)
    r = len(case.rows)
    a = self.kernel(logits, None, None, params, seed, position, vocab_size=100)
    b = ip.masked_sample_reference(logits, case.mask, jnp.zeros((r,), bool), params, seed,
                                   position, vocab_size=100)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


class TestMaskedSampleKernelInterpret(MaskedSampleKernelTest):
  INTERPRET = True


class TestMaskedSampleKernelGpu(MaskedSampleKernelTest):
  INTERPRET = False


def _repeat_rows(logits, legal, r, **params):
  enabled = jnp.ones((r,), bool)
  mask = jnp.asarray(mask_layout.pack(np.repeat(legal[None], r, 0)))
  return (jnp.asarray(np.repeat(logits[None], r, 0)), mask, enabled,
          ip.SamplingParams.create(r, **params))


DRAWS = 100_000


@pytest.mark.parametrize("params", [
    dict(temperature=0.9),
    dict(temperature=0.8, top_k=6, top_p=0.85, min_p=0.02),
])
def test_samples_follow_masked_p(params):
  """Chi-square over 1e5 draws (fixed seeds) against the FP64 oracle; a wrong p fails."""
  rng = np.random.default_rng(5)
  v = 48
  logits = (rng.normal(size=v) * 1.5).astype(np.float32)
  legal = rng.random(v) < 0.5
  args = _repeat_rows(logits, legal, DRAWS, **params)
  tok, flags = ip.masked_sample_reference(*args, jnp.arange(DRAWS, dtype=jnp.uint32),
                                          jnp.full((DRAWS,), 5, jnp.int32), vocab_size=v)
  assert not np.any(np.asarray(flags))
  counts = np.bincount(np.asarray(tok), minlength=v)
  p, _, _ = oracle.target(logits, legal, **params)
  assert oracle.chi_square_pvalue(counts, p) > 1e-3
  # Power check: the same test rejects a slightly different distribution.
  wrong = dict(params, temperature=params["temperature"] * 1.1)
  p_wrong, _, _ = oracle.target(logits, legal, **wrong)
  assert oracle.chi_square_pvalue(counts, p_wrong) < 1e-6


def test_randomness_depends_on_seed_position_purpose_not_row():
  rng = np.random.default_rng(6)
  v, r = 64, 32
  logits = rng.normal(size=v).astype(np.float32)
  args = _repeat_rows(logits, np.ones(v, bool), r, temperature=1.0)
  seed = jnp.asarray(rng.integers(0, 2**32, r), jnp.uint32)
  position = jnp.asarray(rng.integers(0, 1000, r), jnp.int32)
  base, _ = ip.masked_sample_reference(*args, seed, position, vocab_size=v)
  perm = rng.permutation(r)
  moved, _ = ip.masked_sample_reference(*args, seed[perm], position[perm], vocab_size=v)
  np.testing.assert_array_equal(np.asarray(moved), np.asarray(base)[perm])
  same = jnp.full((r,), 42, jnp.uint32)
  tok, _ = ip.masked_sample_reference(*args, same, jnp.full((r,), 9, jnp.int32), vocab_size=v)
  assert len(set(np.asarray(tok))) == 1                # same (seed, position, purpose)
  # Kernel rows at other indices draw the same tokens.
  kt, _ = ip.masked_sample_kernel(*args, seed[perm], position[perm], vocab_size=v,
                                  interpret=True)
  np.testing.assert_array_equal(np.asarray(kt), np.asarray(base)[perm])
  # Other positions or another purpose give other draws.
  others = [ip.masked_sample_reference(*args, same, jnp.full((r,), 9 + d, jnp.int32),
                                       purpose=pu, vocab_size=v)[0][0]
            for d, pu in [(1, 0), (2, 0), (3, 0), (0, 1)]]
  assert len(set(int(t) for t in others) | {int(tok[0])}) > 2


def test_errors_and_dispatch(monkeypatch):
  case = cases.product_case(7, 100, 128, np.float32)
  logits, mask, enabled, params, seed, position = _inputs(case)
  with pytest.raises(ValueError, match="mask.shape"):
    ip.masked_sample(logits, mask[:, :2], enabled, params, seed, position, vocab_size=100)
  with pytest.raises(ValueError, match="vocab_size"):
    ip.masked_sample(logits, mask, enabled, params, seed, position, vocab_size=129)
  monkeypatch.setenv("INFERNIX_PALLAS_IMPL", "bogus")
  with pytest.raises(ValueError, match="INFERNIX_PALLAS_IMPL"):
    ip.resolve_impl()
  monkeypatch.setenv("INFERNIX_PALLAS_IMPL", "auto")
  assert ip.resolve_impl() == "reference"  # no op: what every op runs where nothing was measured
  # Routing: "interpret" reaches the kernel with interpret=True (stubbed: the interpreted
  # kernel itself is compared with the reference in the kernel test classes).
  calls = []
  monkeypatch.setattr(ip.dispatch._ms, "masked_sample_split_kernel",
                      lambda *a, **kw: calls.append(kw) or ("kernel", kw["interpret"]))
  monkeypatch.setenv("INFERNIX_PALLAS_IMPL", "interpret")
  assert ip.masked_sample(logits, mask, enabled, params, seed, position,
                          vocab_size=100) == ("kernel", True)
  assert calls[0]["vocab_size"] == 100
  a = ip.masked_sample(logits, mask, enabled, params, seed, position, vocab_size=100,
                       impl="reference")
  b = ip.masked_sample_reference(logits, mask, enabled, params, seed, position, vocab_size=100)
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert len(calls) == 1


def test_repetition_penalty_matches_fp64_oracle():
  """The repetition penalty (vLLM semantics: a seen id's positive logit divided by it, a
  negative one multiplied; seen = prompt or history) under a mask, with presence / frequency
  after it: masked_probs_reference equals the FP64 oracle, and the kernel draws the
  reference's tokens. A penalty of 1 changes nothing."""
  rng = np.random.default_rng(11)
  v, vm, r = 45, 64, 6
  logits = (rng.normal(size=(r, vm)) * 3.0).astype(np.float32)
  legal = rng.random((r, v)) < 0.6
  rows = [dict(temperature=1.0, repetition=1.8, prompt=[1, 2, 3, 40], history=[3, 5]),
          dict(temperature=0.7, top_k=5, repetition=1.3, prompt=list(range(0, 45, 3)),
               history=[7, 7], presence=0.4, frequency=0.3),
          dict(temperature=0.0, repetition=4.0, prompt=list(range(v))),
          dict(temperature=1.0, repetition=0.6, prompt=[10, 11], top_p=0.9),
          dict(temperature=1.0, repetition=1.0, prompt=[4, 5, 6]),
          dict(temperature=1.1, min_p=0.05, repetition=2.5, history=[0, 9])]
  case = cases.Case(logits, legal, np.array([1, 1, 1, 0, 1, 1], bool), rows, v)
  params = case.params()
  p, greedy, flags = jax.device_get(ip.masked_probs_reference(
      jnp.asarray(logits), case.mask, jnp.asarray(case.enabled), params, vocab_size=v))
  for i, row in enumerate(rows):
    p_or, g_or, f_or = oracle.target(logits[i], case.oracle_legal(i), **row)
    assert (flags[i], greedy[i]) == (f_or, g_or), (i, row)
    np.testing.assert_allclose(p[i], p_or, rtol=2e-5, atol=2e-6, err_msg=f"row {i}")
  plain = cases.Case(logits, legal, case.enabled, [dict(rows[4], prompt=[])] * r, v).params()
  assert plain.prompt_mask.shape[-1] == 0  # no row penalised: no prompt mask at all
  p_plain, _, _ = jax.device_get(ip.masked_probs_reference(
      jnp.asarray(logits), case.mask, jnp.asarray(case.enabled), plain, vocab_size=v))
  np.testing.assert_array_equal(p[4], p_plain[4])
  assert not np.allclose(p[0], oracle.target(logits[0], case.oracle_legal(0))[0], atol=1e-3)
  seed, position = jnp.arange(r, dtype=jnp.uint32), jnp.full((r,), 3, jnp.int32)
  for base in (0, 100):
    args = (jnp.asarray(logits), case.mask, jnp.asarray(case.enabled), params, seed + base,
            position)
    want = ip.masked_sample_reference(*args, vocab_size=v)
    got = ip.masked_sample_kernel(*args, vocab_size=v, interpret=True,
                                  block=ip.BlockSizes(2, 4, 1))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
