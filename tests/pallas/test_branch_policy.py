"""The references' expensive branches: skipped (`lax.cond`, CPU / TPU) or computed and selected
(GPU) give the same distribution and the same tokens, and match the FP64 oracle, including
the whole-row bisections of top-k beyond `_sampling.TOPK_CAP` and their ties."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from infernix_jax.pallas import _sampling
from infernix_jax import pallas as ip
from tests.pallas import cases, oracle

V, VM = 300, 320


def _case() -> cases.Case:
  """The product rows plus rows that take the bisection branches (k > TOPK_CAP)."""
  base = cases.product_case(5, V, VM, np.float32)
  rng = np.random.default_rng(5)
  k = 2 * _sampling.TOPK_CAP
  extra = [dict(temperature=1.0, top_k=k), dict(temperature=0.8, top_k=k, top_p=0.9),
           dict(temperature=1.0, top_k=k), dict(temperature=1.0, top_k=k, min_p=0.05),
           dict(temperature=1.1, top_p=0.5, min_p=0.02), dict(temperature=0.0, top_k=k)]
  logits = [rng.normal(size=VM) * 3 for _ in extra]
  # Many ties at the k-th key (+ 0.0: no -0.0, which jitted sort_key ranks below +0.0).
  logits[2] = np.round(rng.normal(size=VM)) + 0.0
  legal = [np.ones(V, bool)] * len(extra)
  return cases.Case(np.concatenate([base.logits, np.asarray(logits, np.float32)]),
                    np.concatenate([base.legal, legal]),
                    np.concatenate([base.enabled, [False, False, False, True, True, False]]),
                    base.rows + extra, V)


def _under(policy: bool, monkeypatch, args, seed, position):
  """(masked_probs_reference, masked_sample_reference) under the policy, as one program."""
  monkeypatch.setattr(_sampling, "skip_is_free", lambda: policy)
  jax.clear_caches()  # the policy is read at trace time: trace again
  both = jax.jit(lambda a, s, p: (ip.masked_probs_reference.__wrapped__(*a, vocab_size=V),
                                  ip.masked_sample_reference.__wrapped__(*a, s, p,
                                                                         vocab_size=V)))
  return jax.device_get(both(args, seed, position))


@pytest.mark.parametrize("rows", ["all", "greedy", "sampled", "big_k"])
def test_both_policies_match_the_oracle(rows, monkeypatch):
  case = _case()
  temps = np.array([r.get("temperature", 1.0) for r in case.rows])
  idx = {"all": np.arange(len(temps)), "greedy": np.flatnonzero(temps == 0),
         "sampled": np.flatnonzero(temps > 0),
         "big_k": np.flatnonzero([r.get("top_k", 0) > _sampling.TOPK_CAP
                                  for r in case.rows])}[rows]
  sub = cases.Case(case.logits[idx], case.legal[idx], case.enabled[idx],
                   [case.rows[i] for i in idx], V)
  args = (jnp.asarray(sub.logits), sub.mask, jnp.asarray(sub.enabled), sub.params())
  r = len(idx)
  seed, position = jnp.arange(r, dtype=jnp.uint32) * 7919, jnp.arange(r, dtype=jnp.int32)
  out = {}
  for policy in (True, False):
    out[policy] = _under(policy, monkeypatch, args, seed, position)
  for a, b in zip(jax.tree.leaves(out[True]), jax.tree.leaves(out[False])):
    np.testing.assert_array_equal(a, b)
  (p, greedy, flags), (tok, tok_flags) = out[True]
  np.testing.assert_array_equal(flags, tok_flags)
  for i, row in enumerate(sub.rows):
    kw = {k: row[k] for k in ("temperature", "top_k", "top_p", "min_p", "presence",
                              "frequency", "history", "repetition", "prompt") if k in row}
    p_or, g_or, f_or = oracle.target(sub.logits[i].astype(np.float64), sub.oracle_legal(i),
                                     **kw)
    assert (flags[i], greedy[i]) == (f_or, g_or), (i, row)
    np.testing.assert_array_equal(p[i] > 0, p_or > 0, err_msg=f"support of {row}")
    np.testing.assert_allclose(p[i], p_or, **cases.TOLERANCE[np.dtype(np.float32)])
    assert tok[i] == -1 if f_or else p_or[tok[i]] > 0, (i, row, tok[i])


def test_the_big_k_rows_take_the_bisection_branches():
  """Not vacuous: k > TOPK_CAP cuts the support below the finite legal ids, with a tie."""
  case = _case()
  for i in (len(case.rows) - 6, len(case.rows) - 4):
    row = case.rows[i]
    p, _, _ = oracle.target(case.logits[i].astype(np.float64), case.oracle_legal(i),
                            temperature=row["temperature"], top_k=row["top_k"])
    assert np.count_nonzero(p) == row["top_k"] < V
  z = np.sort(case.logits[-4][:V])[::-1]
  assert z[2 * _sampling.TOPK_CAP - 1] == z[2 * _sampling.TOPK_CAP]   # tied at the k-th
