"""spec_accept: exact output distribution (chi-square), kernel == reference, states, flags."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from infernix_jax import mask_layout
from infernix_jax import pallas as ip
from infernix_jax.testing import exact_oracle
from tests.pallas import oracle
from tests.pallas.spec_world import World

DRAWS = 100_000
V, VM, K = 12, 16, 2


def _run(fn, inputs, vocab_size=V, **kw):
  out = fn(**inputs, vocab_size=vocab_size, **kw)
  return tuple(np.asarray(x) for x in out)


def _chain_pvalues(world, params, inputs, result):
  """p-values of t_0 ~ p_0, t_1 ~ p_1(.|t_0), t_2 ~ p_2(.|t_0, t_1) over the rows reaching them."""
  accepted, tokens, flags = result
  assert not np.any(flags)
  pvals = []
  for i in range(world.k + 1):
    rows = np.flatnonzero(accepted >= i)
    expected = np.zeros(world.width)
    prefixes, counts = np.unique(tokens[rows, :i], axis=0, return_counts=True)
    for prefix, c in zip(prefixes, counts):
      expected += c * world.target(i, tuple(int(t) for t in prefix), params)
    observed = np.bincount(tokens[rows, i], minlength=world.width)
    pvals.append(oracle.chi_square_pvalue(observed, expected))
  return pvals


DIST_CASES = [
    ("onehot", dict(temperature=1.0)),
    ("sparse", dict(temperature=0.9, top_k=6)),
    ("dense", dict(temperature=1.0, top_p=0.9, presence=0.6, frequency=0.3, history=[1, 1])),
    ("masked", dict(temperature=0.8, min_p=0.05)),
]


@pytest.mark.parametrize("kind,params", DIST_CASES, ids=[c[0] for c in DIST_CASES])
def test_output_follows_target_p(kind, params):
  world = World(V, VM, K, seed=3)
  rng = np.random.default_rng(11)
  inputs = world.batch(DRAWS, kind, params, rng, n_drafts=rng.integers(0, K + 1, DRAWS))
  result = _run(ip.spec_accept_reference, inputs)
  pvals = _chain_pvalues(world, params, inputs, result)
  assert min(pvals) > 1e-4, pvals
  accepted = result[0]
  assert np.mean(accepted) > 0.2                    # drafts really get accepted
  if kind == "masked":                              # masking q with the grammar accepts more
    plain = _run(ip.spec_accept_reference,
                 world.batch(DRAWS, "dense", params, np.random.default_rng(11),
                             n_drafts=np.random.default_rng(11).integers(0, K + 1, DRAWS)))
    assert np.mean(accepted) > np.mean(plain[0]) + 0.05


@pytest.mark.parametrize("q_kind", ["sparse", "dense"])
def test_counter_example_and_wrong_variant(q_kind):
  right = exact_oracle.counter_example(DRAWS, q_kind, drop_illegal=False)
  assert oracle.chi_square_pvalue(right, [0.5, 0.5, 0.0]) > 1e-4, right
  wrong = exact_oracle.counter_example(DRAWS, q_kind, drop_illegal=True)
  assert abs(wrong[0] / DRAWS - 0.75) < 0.01, wrong           # a 0.75, b 0.25
  assert oracle.chi_square_pvalue(wrong, [0.5, 0.5, 0.0]) < 1e-12


def _greedy_chain(world, inputs):
  """Sequential greedy decoding over the drafts: the exact expected result."""
  drafts, n = np.asarray(inputs["drafts"]), np.asarray(inputs["n_drafts"])
  acc = np.zeros(len(n), int)
  toks = np.full((len(n), world.k + 1), -1)
  for r in range(len(n)):
    prefix = ()
    for i in range(world.k + 1):
      best = int(np.argmax(world.target(i, prefix, dict(temperature=0.0))))
      if i < n[r] and drafts[r, i] == best:
        toks[r, i] = best
        prefix += (best,)
        continue
      toks[r, i] = best
      acc[r] = i
      break
  return acc, toks


def test_greedy_is_sequential_argmax():
  world = World(V, VM, K, seed=5, legal_frac=0.3)
  rng = np.random.default_rng(2)
  inputs = world.batch(300, "onehot", dict(temperature=0.0), rng,
                       n_drafts=rng.integers(0, K + 1, 300))
  accepted, tokens, flags = _run(ip.spec_accept_reference, inputs)
  acc, toks = _greedy_chain(world, inputs)
  assert not flags.any()
  np.testing.assert_array_equal(accepted, acc)
  np.testing.assert_array_equal(tokens, toks)
  assert 0 < np.mean(accepted) and np.any(accepted == K)


def test_rows_move_without_changing_their_stream():
  """Permuting rows (lanes) permutes the results: randomness never sees the row index."""
  world = World(V, VM, K, seed=4)
  rng = np.random.default_rng(8)
  rows = 64
  inputs = world.batch(rows, "dense", dict(temperature=1.0), rng,
                       n_drafts=rng.integers(0, K + 1, rows))
  perm = rng.permutation(rows)
  moved = {k: (jax.tree.map(lambda x: x[perm], v) if k != "q" else ip.DenseQ(v.probs[perm]))
           for k, v in inputs.items()}
  base = _run(ip.spec_accept_reference, inputs)
  got = _run(ip.spec_accept_reference, moved)
  for a, b in zip(base, got):
    np.testing.assert_array_equal(b, a[perm])
  assert len(set(base[0])) > 1


def _edge_inputs():
  """Hand-built rows: DeadEnd reached / not reached, Unreachable after EOS, NaN, disabled."""
  b, v, p = 8, 40, 3
  rng = np.random.default_rng(9)
  logits = rng.normal(size=(b, p, v)).astype(np.float32)
  legal = rng.random((b, p, v)) < 0.5
  states = np.zeros((b, p), np.int8)
  best = np.argmax(np.where(legal, logits, -np.inf), -1)              # greedy per column
  drafts = best[:, :2].copy()
  # row 0: DeadEnd at position 1, draft 0 accepted -> flag, accepted 1.
  states[0, 1] = mask_layout.DEAD_END; legal[0, 1] = False; logits[0, 1] = np.nan
  # row 1: DeadEnd at position 1 but draft 0 is rejected -> no flag.
  states[1, 1] = mask_layout.DEAD_END; legal[1, 1] = False
  drafts[1, 0] = (best[1, 0] + 1) % v
  legal[1, 0, drafts[1, 0]] = True; logits[1, 0, drafts[1, 0]] = logits[1, 0].min() - 1
  # row 2: DeadEnd at position 0 -> flag, nothing produced.
  states[2, 0] = mask_layout.DEAD_END; legal[2, 0] = False
  # row 3: EOS accepted at 1 -> position 2 Unreachable with NaN filler: accepted 2, no token.
  states[3, 2] = mask_layout.UNREACHABLE; logits[3, 2] = np.nan; legal[3, 2] = False
  # row 4: NaN among legal logits at position 0 -> FLAG_NONFINITE.
  logits[4, 0, np.flatnonzero(legal[4, 0])[0]] = np.nan
  # row 5: NaN at position 1, but draft 0 rejected -> nothing flagged.
  drafts[5, 0] = np.flatnonzero(~legal[5, 0])[0]                     # illegal draft
  logits[5, 1] = np.nan; states[5, 1:] = mask_layout.UNREACHABLE
  # row 6: disabled row with DeadEnd states and an empty mask: both ignored.
  states[6] = mask_layout.DEAD_END; legal[6] = False
  # row 7: draft id in the logits padding (>= V) is illegal even unconstrained.
  drafts[7, 0] = v + 3
  logits = np.concatenate([logits, np.full((b, p, 8), 100.0, np.float32)], -1)  # Vm = V + 8
  enabled = np.ones(b, bool); enabled[6] = enabled[7] = False
  if True:  # recompute greedy drafts for rows whose masks were edited
    best = np.argmax(np.where(legal, logits[..., :v], -np.inf), -1)
    drafts[0, 0], drafts[3] = best[0, 0], best[3, :2]
    drafts[6] = np.argmax(logits[6, :2, :v], -1)
  return dict(logits=jnp.asarray(logits), mask=jnp.asarray(mask_layout.pack(legal)),
              mask_enabled=jnp.asarray(enabled), states=jnp.asarray(states),
              drafts=jnp.asarray(drafts, jnp.int32), n_drafts=jnp.full((b,), 2, jnp.int32),
              q=ip.OneHotQ(), params=ip.SamplingParams.create(b, temperature=0.0),
              seed=jnp.arange(b, dtype=jnp.uint32), position=jnp.zeros((b,), jnp.int32)), v


def test_states_and_flags():
  inputs, v = _edge_inputs()
  accepted, tokens, flags = tuple(np.asarray(x) for x in ip.spec_accept_reference(
      **inputs, vocab_size=v))
  d = np.asarray(inputs["drafts"])
  assert (accepted[0], flags[0]) == (1, ip.FLAG_DEAD_END) and list(tokens[0]) == [d[0, 0], -1, -1]
  assert (accepted[1], flags[1]) == (0, 0) and tokens[1, 0] >= 0 and tokens[1, 0] != d[1, 0]
  assert (accepted[2], flags[2]) == (0, ip.FLAG_DEAD_END) and list(tokens[2]) == [-1] * 3
  assert (accepted[3], flags[3]) == (2, 0) and list(tokens[3]) == [d[3, 0], d[3, 1], -1]
  assert (accepted[4], flags[4]) == (0, ip.FLAG_NONFINITE) and list(tokens[4]) == [-1] * 3
  assert (accepted[5], flags[5]) == (0, 0) and tokens[5, 0] >= 0 and tokens[5, 1] == -1
  assert (accepted[6], flags[6]) == (2, 0) and tokens[6, 2] < v
  assert (accepted[7], flags[7]) == (0, 0) and 0 <= tokens[7, 0] < v


class SpecAcceptKernelTest:
  """Kernel vs reference on every output, over q kinds and parameter rows."""
  INTERPRET = False

  def setup_method(self):
    if not self.INTERPRET and jax.default_backend() != "gpu":
      pytest.skip("the compiled kernel needs a GPU; InterpretTest runs it everywhere")

  def kernel(self, **kw):
    return ip.spec_accept_kernel(**kw, interpret=self.INTERPRET,
                                 block=ip.BlockSizes(2, 4, 1) if self.INTERPRET else None)

  @pytest.mark.parametrize("kind,dtype", [("onehot", jnp.float32), ("sparse", jnp.bfloat16),
                                          ("dense", jnp.bfloat16)])
  def test_kernel_matches_reference(self, kind, dtype):
    world = World(20, 40, 3, seed=7, legal_frac=0.8)
    rng = np.random.default_rng(1)
    rows = 16
    inputs = world.batch(rows, kind, dict(temperature=1.0), rng,
                         n_drafts=rng.integers(0, 4, rows))
    inputs["logits"] = inputs["logits"].astype(dtype)
    r = np.arange(rows)
    inputs["params"] = ip.SamplingParams.create(
        rows, temperature=np.where(r % 6 == 0, 0.0, 0.6 + 0.1 * (r % 5)),
        top_k=np.where(r % 4 == 1, 3, 0), top_p=np.where(r % 3 == 2, 0.8, 1.0),
        min_p=np.where(r % 5 == 3, 0.05, 0.0), presence_penalty=0.5, frequency_penalty=0.25,
        history_ids=jnp.asarray(rng.integers(-1, 20, (rows, 3)), jnp.int32))
    inputs["mask_enabled"] = jnp.asarray(r % 7 != 4)
    want = [_run(ip.spec_accept_reference, inputs, vocab_size=20)]
    got = [tuple(np.asarray(x) for x in self.kernel(**inputs, vocab_size=20))]
    for w, g in zip(want, got):
      for a, b in zip(w, g):
        np.testing.assert_array_equal(b, a)
    assert np.any(want[0][0] > 0) and np.any(want[0][0] == 0)

  def test_edge_rows(self):
    inputs, v = _edge_inputs()
    want = ip.spec_accept_reference(**inputs, vocab_size=v)
    got = self.kernel(**inputs, vocab_size=v)
    for a, b in zip(want, got):
      np.testing.assert_array_equal(np.asarray(b), np.asarray(a))

  def test_no_mask(self):
    world = World(20, 40, 2, seed=8)
    rng = np.random.default_rng(3)
    inputs = world.batch(8, "sparse", dict(temperature=0.7), rng)
    inputs.update(mask=None, mask_enabled=None)
    want = ip.spec_accept_reference(**inputs, vocab_size=20)
    got = self.kernel(**inputs, vocab_size=20)
    for a, b in zip(want, got):
      np.testing.assert_array_equal(np.asarray(b), np.asarray(a))


class TestSpecAcceptKernelInterpret(SpecAcceptKernelTest):
  INTERPRET = True


class TestSpecAcceptKernelGpu(SpecAcceptKernelTest):
  INTERPRET = False


def test_shape_errors():
  inputs, v = _edge_inputs()
  with pytest.raises(ValueError, match="drafts.shape"):
    ip.spec_accept(**dict(inputs, drafts=inputs["drafts"][:, :1]), vocab_size=v)
  with pytest.raises(ValueError, match="q.probs.shape"):
    ip.spec_accept(**dict(inputs, q=ip.DenseQ(jnp.zeros((8, 2, 5)))), vocab_size=v)
