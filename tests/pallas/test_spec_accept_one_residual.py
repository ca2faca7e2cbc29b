"""spec_accept with one residual pass (at each row's stopping position) equals the reference
token for token: all drafts accepted, early rejections, greedy and sampled rows, every q kind."""

from __future__ import annotations

import functools
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from infernix_jax import pallas as ip
from tests.pallas.spec_world import World
from tests.pallas.test_spec_accept import _edge_inputs

sa = importlib.import_module("infernix_jax.pallas.spec_accept")


@functools.partial(jax.jit, static_argnames="v")
def _reference_and_one_residual(inputs, *, v):
  """(reference, one residual): one program (they share the statistics of every position)."""
  return (ip.spec_accept_reference(**inputs, vocab_size=v),
          sa.spec_accept_one_residual(**inputs, vocab_size=v))


def _equal(inputs, v):
  want, got = ([np.asarray(x) for x in out] for out in _reference_and_one_residual(inputs, v=v))
  for name, a, b in zip(("accepted", "tokens", "flags"), want, got):
    np.testing.assert_array_equal(b, a, err_msg=name)
  return want


# Every q kind with both K and both dtypes, and each K with both dtypes (a pairwise cover of
# kind x K x dtype: the dtype only enters through the logits, before q is read).
CASES = [("onehot", 1, jnp.float32), ("onehot", 3, jnp.bfloat16), ("sparse", 1, jnp.bfloat16),
         ("sparse", 3, jnp.float32), ("dense", 1, jnp.float32), ("dense", 3, jnp.bfloat16)]


@pytest.mark.parametrize("kind,k,dtype", CASES)
def test_one_residual_equals_reference(kind, k, dtype):
  world = World(20, 40, k, seed=7, legal_frac=0.8)
  rng = np.random.default_rng(k)
  rows = 48
  inputs = world.batch(rows, kind, dict(temperature=1.0), rng,
                       n_drafts=np.where(np.arange(rows) % 8 == 7, 0, rng.integers(1, k + 1, rows)))
  inputs["logits"] = inputs["logits"].astype(dtype)
  r = np.arange(rows)
  inputs["params"] = ip.SamplingParams.create(
      rows, temperature=np.where(r % 3 == 0, 0.0, 0.6 + 0.1 * (r % 5)),
      top_k=np.where(r % 4 == 1, 3, 0), top_p=np.where(r % 3 == 2, 0.8, 1.0),
      min_p=np.where(r % 5 == 3, 0.05, 0.0))
  inputs["mask_enabled"] = jnp.asarray(r % 7 != 4)
  n = np.asarray(inputs["n_drafts"])
  greedy = r % 3 == 0
  seen = np.zeros(4, bool)
  # A quarter of the greedy rows draft the target's argmax chain (every draft accepted): each round
  # of the reference replaces the first rejected draft by its correction.
  chain = greedy & (r % 4 == 0)
  for _ in range(k):
    acc, tok, _ = (np.asarray(x) for x in _reference_and_one_residual(inputs, v=20)[0])
    d = np.asarray(inputs["drafts"]).copy()
    fix = chain & (acc < n)
    d[fix, acc[fix]] = tok[fix, acc[fix]]
    inputs["drafts"] = jnp.asarray(d, jnp.int32)
  # Another quarter drafts anything but the argmax at position 0: rejected there.
  wrong = greedy & (r % 4 == 2)
  d = np.asarray(inputs["drafts"]).copy()
  d[wrong, 0] = (tok[wrong, 0] + 1) % 20
  inputs["drafts"] = jnp.asarray(d, jnp.int32)
  for base in (0, 500):
    inputs["seed"] = jnp.arange(rows, dtype=jnp.uint32) + base
    accepted, tokens, flags = _equal(inputs, 20)
    ok = flags == 0
    seen[0] |= np.any(ok & (accepted == n) & (n > 0) & greedy)      # all drafts accepted
    seen[1] |= np.any(ok & (accepted < n) & greedy)                   # early rejection
    seen[2] |= np.any(ok & (accepted > 0) & ~greedy)                  # accepted drafts
    seen[3] |= np.any(ok & (accepted < n) & ~greedy)                  # early rejection
  assert np.all(seen), seen              # both regimes for greedy rows; sampled rows accept
                                         # drafts and reject some (every draft at K = 1)


def test_one_residual_edge_rows():
  inputs, v = _edge_inputs()
  _equal(inputs, v)
  inputs["params"] = ip.SamplingParams.create(8, temperature=0.9)
  _equal(inputs, v)
