"""tree_accept with every node's statistics in parallel and one residual draw per row equals
the reference token for token (accepted counts, paths, tokens, flags): the tree cases of
test_tree_accept, and random trees over a parameter product (vocabularies not a multiple of
32, greedy and sampled rows, top-k / top-p / min-p, one-hot and dense q, masks with an
all-zero word, every node accepted, early rejection, several rejected siblings, chains, stars,
orphans, n_nodes 0)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from infernix_jax import mask_layout
from infernix_jax import pallas as ip
from tests.pallas import cases
from tests.pallas import test_tree_accept as tt

T = 7


@functools.partial(jax.jit, static_argnames="v")
def _reference_and_one_residual(inputs, *, v):
  """(reference, one residual draw): one program."""
  return (ip.tree_accept_reference(**inputs, vocab_size=v),
          ip.tree_accept_one_residual(**inputs, vocab_size=v))


def _equal(inputs, v):
  want, got = ([np.asarray(x) for x in out] for out in _reference_and_one_residual(inputs, v=v))
  for name, a, b in zip(("accepted", "path", "tokens", "flags"), want, got):
    np.testing.assert_array_equal(b, a, err_msg=name)
  return want


@pytest.mark.parametrize("kind", ["onehot", "dense"])
def test_chain_trees_equal_the_reference(kind):
  tree, _ = tt._chain_case(kind)
  _equal(tree, tt.V)


@pytest.mark.parametrize("case", ["onehot_illegal_sibling", "dense_masked"])
def test_fixed_trees_with_sibling_rejections_equal_the_reference(case):
  args, _ = tt._fixed_tree(case)
  seen = set()
  for call in range(3):
    acc, path, _, _ = _equal(dict(args, seed=jnp.asarray(call * tt.B + np.arange(tt.B),
                                                         jnp.uint32)), tt.V)
    seen |= {tuple(p[:a]) for a, p in zip(acc, path)}
  assert len(seen) >= 5, seen                       # later siblings accepted at both levels


def test_greedy_trees_equal_the_reference():
  _, args = tt._greedy_case()
  acc, _, _, flags = _equal(args, tt.V)
  assert np.max(acc) >= 3 and np.any(flags == ip.FLAG_DEAD_END)


def _parents(rng, shape_kind):
  """One row's parents: a chain, a star, two levels of siblings, or random with orphans."""
  if shape_kind == 0:
    return np.arange(T) - 1
  if shape_kind == 1:
    return np.zeros(T, int)
  if shape_kind == 2:
    return np.array([-1, 0, 0, 0, 1, 1, 1])
  par = np.array([rng.integers(0, t) if t else -1 for t in range(T)])
  par[rng.random(T) < 0.1] = T + 1                                             # orphans
  return par


@functools.lru_cache(maxsize=None)
def _random_trees(v, vm, dtype, kind, rows=128):
  """Random trees whose siblings are their parent's best tokens in order (rejecting one
  changes the residual a lot), refined by the reference's own emissions (so that long paths
  and later siblings get accepted). Dense q is peaked near each parent's best tokens."""
  rng = np.random.default_rng(v + vm + (kind == "dense"))
  r = np.arange(rows)
  logits = (rng.normal(size=(rows, T, vm)) * 2.5).astype(np.float32)
  legal = rng.random((rows, T, v)) < 0.5
  legal[r % 5 == 1, :, 32:64] = False                                         # an all-zero word
  legal[rng.random((rows, T)) < 0.03] = False                                  # empty sets
  nan = rng.random((rows, T)) < 0.03
  logits[nan, 0] = np.nan
  legal[nan, 0] = True                                                         # legal NaN
  states = np.zeros((rows, T), np.int8)
  u = rng.random((rows, T))
  states[u < 0.04] = mask_layout.DEAD_END
  states[(u >= 0.04) & (u < 0.08)] = mask_layout.UNREACHABLE
  parents = np.stack([_parents(rng, i % 4) for i in r])
  n_nodes = np.where(r % 11 == 5, 0, np.where(r % 3 == 1, rng.integers(1, T + 1, rows), T))
  # Node t's token: with probability 0.7 its parent's (rank t)-th best legal logit, where
  # rank t counts t's earlier siblings; else anything, padding ids and negatives included.
  z = np.where(legal, np.nan_to_num(logits[..., :v], nan=0.0), -4.0 + logits[..., :v])
  best = np.argsort(-z, -1, kind="stable")                                     # [R, T, V]
  tokens = rng.integers(0, v, (rows, T))
  odd = rng.random((rows, T))
  tokens[odd < 0.04] = rng.integers(v, vm + 3, (rows, T))[odd < 0.04]
  tokens[(odd >= 0.04) & (odd < 0.06)] = -2
  for i in r:
    for t in range(1, T):
      c = parents[i, t]
      if 0 <= c < t and odd[i, t] >= 0.3:
        tokens[i, t] = best[i, c, sum(parents[i, 1:t] == c)]
  peaked = np.exp(1.5 * np.pad(z, ((0, 0), (0, 0), (0, vm - v)), constant_values=-9.0)
                  + rng.gumbel(size=(rows, T, vm)))
  peaked /= peaked.sum(-1, keepdims=True)                                      # [R, T(c), Vm]

  def proposal():
    if kind == "onehot":
      return ip.OneHotQ()
    q = np.take_along_axis(peaked, np.clip(parents, 0, T - 1)[:, :, None], 1)  # [R, T, Vm]
    q[r % 4 == 2] = np.eye(vm)[np.clip(tokens[r % 4 == 2], 0, vm - 1)]        # one-hot rows
    return ip.DenseQ(jnp.asarray(q, jnp.float32))

  params = ip.SamplingParams.create(
      rows, temperature=np.where(r % 3 == 0, 0.0, 0.7 + 0.1 * (r % 6)),
      top_k=np.where(r % 4 == 1, 4, 0), top_p=np.where(r % 5 == 2, 0.8, 1.0),
      min_p=np.where(r % 7 == 3, 0.08, 0.0), presence_penalty=np.where(r % 2 == 1, 0.4, 0.0),
      history_ids=jnp.asarray(rng.integers(-1, v, (rows, 3)), jnp.int32))
  inputs = dict(logits=jnp.asarray(logits).astype(dtype),
                mask=jnp.asarray(mask_layout.pack(legal)), mask_enabled=jnp.asarray(r % 6 != 0),
                states=jnp.asarray(states), parents=jnp.asarray(parents, jnp.int32),
                n_nodes=jnp.asarray(n_nodes, jnp.int32), params=params,
                seed=jnp.arange(rows, dtype=jnp.uint32),
                position=jnp.asarray(rng.integers(0, 1000, rows), jnp.int32))
  for step in range(T // 2):
    # Where a row emitted at a node with children, give the emitted token to one of them:
    # the first (greedy rows then accept it) or the last (sampled rows then test it after
    # rejecting the earlier siblings).
    acc, path, toks, flags = (np.asarray(x) for x in _reference_and_one_residual(
        dict(inputs, tokens=jnp.asarray(tokens, jnp.int32), q=proposal()), v=v)[0])
    stop = np.where(acc > 0, path[r, np.maximum(acc - 1, 0)], 0)
    emitted = toks[r, acc]
    for i in np.flatnonzero((flags == 0) & (emitted >= 0) & (r % 7 != 6)):
      kids = [t for t in range(1, min(max(n_nodes[i], 1), T))
              if parents[i, t] == stop[i] and parents[i, t] < t]
      if kids:
        tokens[i, kids[0] if r[i] % 3 == 0 else kids[-1]] = emitted[i]
  return dict(inputs, tokens=jnp.asarray(tokens, jnp.int32), q=proposal())


@pytest.mark.parametrize("kind", ["onehot", "dense"])
@pytest.mark.parametrize("v,vm,dtype", cases.PRODUCT[:3])
def test_random_trees_equal_the_reference(kind, v, vm, dtype):
  inputs = _random_trees(v, vm, dtype, kind)
  rows = inputs["n_nodes"].shape[0]
  r = np.arange(rows)
  parents = np.asarray(inputs["parents"])
  n_nodes = np.asarray(inputs["n_nodes"])
  greedy = r % 3 == 0
  seen = {}
  for base in (0, 5000):
    acc, path, toks, flags = _equal(dict(inputs, seed=jnp.arange(rows, dtype=jnp.uint32) + base),
                                    v)
    ok = flags == 0
    stop = np.where(acc > 0, path[r, np.maximum(acc - 1, 0)], 0)
    kids = np.array([sum(1 for t in range(1, min(max(n, 1), T))
                         if parents[i, t] == stop[i] and 0 <= parents[i, t] < t)
                     for i, n in enumerate(n_nodes)])
    ranks = np.array([[sum(1 for s in range(1, p) if parents[i, s] == parents[i, p])
                       for p in path[i, :a]] for i, a in enumerate(acc)], dtype=object)
    late = np.array([max(x, default=0) for x in ranks])       # deepest sibling rank accepted
    for name, hit in {
        "greedy leaf reached": ok & greedy & (acc >= 2) & (kids == 0),
        "sampled leaf reached": ok & ~greedy & (acc >= 1) & (kids == 0),
        "greedy early rejection": ok & greedy & (kids > 0),
        "every sibling rejected": ok & ~greedy & (kids >= 2),
        "later sibling accepted": ok & ~greedy & (late >= 1),
        "third sibling accepted": ok & ~greedy & (late >= 2),
        "dead end": flags == ip.FLAG_DEAD_END,
        "empty or non-finite": (flags == ip.FLAG_EMPTY) | (flags == ip.FLAG_NONFINITE),
        "n_nodes 0": n_nodes == 0,
    }.items():
      seen[name] = seen.get(name, False) or bool(np.any(hit))
  assert all(seen.values()), seen
