"""tree_accept: the chain special case, the FP64 law of the rule, chi-square, greedy, kernel.

Every jnp call uses one shape (B rows, T nodes, Vm = 70: three mask words, the last block of
the kernel shifted) and one parameter structure, so the file compiles each program once.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from infernix_jax import mask_layout
from infernix_jax import pallas as ip
from infernix_jax.pallas._types import pack_ids
from infernix_jax.pallas.tree_accept import tree_accept_naive_reference
from tests.pallas import oracle, tree_oracle
from tests.pallas.tree_oracle import TreeWorld

B, T, V, VM, M = 1024, 6, 40, 70, 3
K = T - 1
CALLS = 20                       # chi-square: CALLS * B draws per case


def _params(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, presence=0.0, frequency=0.0,
            history=None, repetition=1.0, prompt=None):
  """SamplingParams for B rows with history width M and a 2-word prompt mask (always)."""
  hist = np.full((B, M), -1, np.int32) if history is None else np.asarray(history, np.int32)
  p = ip.SamplingParams.create(B, temperature=temperature, top_k=top_k, top_p=top_p,
                               min_p=min_p, presence_penalty=presence,
                               frequency_penalty=frequency, history_ids=jnp.asarray(hist),
                               repetition_penalty=repetition)
  return dataclasses.replace(p, prompt_mask=jnp.asarray(pack_ids(prompt, B, width=64)))


def _tree_args(logits, legal, enabled, states, tokens, parents, n_nodes, q, params, seed,
               position):
  return dict(logits=jnp.asarray(logits, jnp.float32),
              mask=jnp.asarray(mask_layout.pack(legal)), mask_enabled=jnp.asarray(enabled),
              states=jnp.asarray(states, jnp.int8), tokens=jnp.asarray(tokens, jnp.int32),
              parents=jnp.asarray(parents, jnp.int32), n_nodes=jnp.asarray(n_nodes, jnp.int32),
              q=q, params=params, seed=jnp.asarray(seed, jnp.uint32),
              position=jnp.asarray(position, jnp.int32))


def _run(fn, args, **kw):
  return tuple(np.asarray(x) for x in fn(**args, vocab_size=V, **kw))


# ---------------------------------------------------------------------------------------------
# 1. A chain-shaped tree is spec_accept.

@functools.lru_cache(maxsize=None)
def _chain_case(kind):
  """spec_accept inputs over B random rows (flags, states, penalties, every sampler) whose
  drafts were refined so that long prefixes get accepted, and the same rows as chain trees."""
  rng = np.random.default_rng(0 if kind == "onehot" else 1)
  r = np.arange(B)
  logits = (rng.normal(size=(B, T, VM)) * 2).astype(np.float32)
  legal = rng.random((B, T, V)) < 0.6
  legal[..., 0] = True
  legal[rng.random((B, T)) < 0.02] = False                                     # empty sets
  nan = rng.random((B, T)) < 0.02
  logits[nan, 0] = np.nan                                                      # legal NaN
  states = np.zeros((B, T), np.int8)
  u = rng.random((B, T))
  states[u < 0.05] = mask_layout.DEAD_END
  states[(u >= 0.05) & (u < 0.1)] = mask_layout.UNREACHABLE
  enabled = r % 5 != 0                                                         # masks off
  n = rng.integers(0, K + 1, B)
  params = _params(temperature=np.where(r % 4 == 0, 0.0, np.where(r % 4 == 1, 1.0, 0.7)),
                   top_k=np.where(r % 3 == 1, 4, 0), top_p=np.where(r % 5 == 2, 0.8, 1.0),
                   min_p=np.where(r % 7 == 3, 0.05, 0.0), presence=0.5, frequency=0.3,
                   history=rng.integers(-1, V, (B, M)),
                   repetition=np.where(r % 6 == 5, 1.5, 1.0),
                   prompt=[list(rng.integers(0, V, 3)) for _ in r])
  seed = rng.integers(0, 2**32, B, dtype=np.uint64)
  position = rng.integers(0, 10_000, B)
  qd = rng.dirichlet(np.ones(VM), size=(B, K)).astype(np.float32)
  drafts = rng.integers(0, V, (B, K))
  spec = dict(logits=jnp.asarray(logits), mask=jnp.asarray(mask_layout.pack(legal)),
              mask_enabled=jnp.asarray(enabled), states=jnp.asarray(states),
              n_drafts=jnp.asarray(n, jnp.int32), params=params,
              seed=jnp.asarray(seed, jnp.uint32), position=jnp.asarray(position, jnp.int32))
  # spec_accept always gets a DenseQ (one compile): for drafts in [0, V), OneHotQ and the
  # DenseQ of one-hot rows run the same arithmetic (q(d) = 1, residual max(p - onehot, 0)).
  chain_q = lambda: ip.DenseQ(jnp.asarray(np.eye(VM, dtype=np.float32)[drafts]
                                          if kind == "onehot" else qd))
  for _ in range(K):              # replace the first rejected draft by what was emitted there
    acc, toks, _ = _run(ip.spec_accept_reference,
                        dict(spec, drafts=jnp.asarray(drafts, jnp.int32), q=chain_q()))
    fix = (acc < n) & (r % 3 != 0)
    drafts[fix, acc[fix]] = np.maximum(toks[fix, acc[fix]], 0)
  want = _run(ip.spec_accept_reference,
              dict(spec, drafts=jnp.asarray(drafts, jnp.int32), q=chain_q()))
  # The tree: node 0 and parents[:, 0] are garbage (ignored), node t hangs off t - 1.
  tokens = np.concatenate([rng.integers(0, V, (B, 1)), drafts], 1)
  parents = np.broadcast_to(np.arange(T) - 1, (B, T)).copy()
  parents[:, 0] = rng.integers(-1, T, B)
  tq = ip.OneHotQ() if kind == "onehot" else ip.DenseQ(jnp.asarray(np.concatenate(
      [rng.random((B, 1, VM)).astype(np.float32), qd], 1)))
  tree = _tree_args(logits, legal, enabled, states, tokens, parents, n + 1, tq, params, seed,
                    position)
  return tree, want


@pytest.mark.parametrize("kind", ["onehot", "dense"])
def test_chain_tree_equals_spec_accept(kind):
  tree, (acc, toks, flags) = _chain_case(kind)
  got = _run(ip.tree_accept_reference, tree)
  np.testing.assert_array_equal(got[0], acc)
  np.testing.assert_array_equal(got[2], toks)
  np.testing.assert_array_equal(got[3], flags)
  depth = np.arange(T)[None, :]
  np.testing.assert_array_equal(got[1], np.where(depth < acc[:, None], depth + 1, -1))
  # The rows cover every outcome: all acceptance depths, every flag, stops with no token.
  assert set(acc) == set(range(T)), np.bincount(acc)
  assert {0, ip.FLAG_DEAD_END, ip.FLAG_NONFINITE, ip.FLAG_EMPTY} <= set(flags)
  assert np.any((toks[np.arange(B), acc] == -1) & (flags == 0))                # Unreachable


# ---------------------------------------------------------------------------------------------
# 2. The FP64 law of the rule: emitted tokens follow the target; the naive rule does not.

LAW_CASES = [  # (kind, parents, world parameters)
    ("onehot", [-1, 0, 0, 0, 1, 1, 2], dict(presence=0.4, frequency=0.2, history=(1,))),
    ("dense", [-1, 0, 0, 1, 1], dict(top_k=4)),
    ("masked", [-1, 0, 0, 1, 2], dict(temperature=0.7, top_p=0.9, presence=0.5)),
    ("dense", [-1, 0, 1, 2], dict(min_p=0.1)),                                # a chain
    ("onehot", [-1, 0, 0, 1, 1], dict(temperature=0.0)),                      # greedy
]


@pytest.mark.parametrize("kind,parents,kw", LAW_CASES)
def test_rule_preserves_the_target_law(kind, parents, kw):
  world = TreeWorld(5, 8, seed=len(parents), **kw)
  law = tree_oracle.emitted_law(world, parents, kind)
  assert abs(sum(law.values()) - 1.0) < 1e-12
  depth = max(len(tree_oracle.path_to(parents, t)) for t in range(len(parents)))
  for length in range(1, depth + 2):
    gap = tree_oracle.max_gap(tree_oracle.prefix_law(law, world, length),
                              tree_oracle.target_law(world, length))
    assert gap < 1e-9, (length, gap)
  naive = tree_oracle.emitted_law(world, parents, kind, naive=True)
  naive_gap = max(tree_oracle.max_gap(tree_oracle.prefix_law(naive, world, length),
                                      tree_oracle.target_law(world, length))
                  for length in range(1, depth + 2))
  if len(tree_oracle.children(parents, len(parents))[0]) > 1 and kw.get("temperature") != 0:
    assert naive_gap > 1e-3, naive_gap                      # the check catches the naive rule
  else:
    assert naive_gap < 1e-9                                 # one child per node: the same rule


# ---------------------------------------------------------------------------------------------
# 3. Chi-square of the jnp rule on a fixed tree against the oracle's outcome distribution.

@functools.lru_cache(maxsize=None)
def _fixed_tree(case):
  """(tree inputs without seeds, oracle outcome distributions (exact, naive))."""
  if case == "onehot_illegal_sibling":
    world = TreeWorld(V, VM, seed=5, legal_frac=0.5, scale=2.0, presence=0.6, history=(3,))
    parents = [-1, 0, 0, 0, 1, 1]
    p0 = world.target(())
    top = [int(x) for x in np.argsort(-p0, kind="stable")]
    illegal = int(np.flatnonzero(~world.legal(())[:V])[0])
    p1 = world.target((top[0],))
    top1 = [int(x) for x in np.argsort(-p1, kind="stable")]
    tokens = [0, top[0], illegal, top[1], top1[0], top1[1]]
    q = [None] + [np.eye(VM)[t] for t in tokens[1:]]
    qin = ip.OneHotQ()
  else:       # dense q (half the target, half a law on the grammar), siblings at two levels
    world = TreeWorld(V, VM, seed=6, temperature=0.8, top_k=10, presence=0.5, history=(2,))
    parents = [-1, 0, 0, 1, 1, 2]
    ranks = tree_oracle.sibling_ranks(parents)
    tokens, q = [0], [None]
    for t in range(1, T):
      prefix = tuple(tokens[u] for u in tree_oracle.path_to(parents, parents[t]))
      pt = world.target(prefix)
      qt = 0.4 * pt + 0.6 * world.proposal(prefix, ranks[t], "masked")
      qt = qt.astype(np.float32).astype(np.float64)
      q.append(qt)
      r = pt                                  # the residual this node is tested against
      for u in range(1, t):
        if parents[u] == parents[t]:
          r = np.maximum(r - q[u], 0.0) / np.maximum(r - q[u], 0.0).sum()
      # The token whose acceptance is closest to 1/2 (the oracle takes any fixed tree).
      a = np.minimum(1.0, r / np.where(qt > 0, qt, 1.0))
      tokens.append(int(np.argmax(np.where(qt > 0, np.minimum(a, 1.0 - a), -1.0))))
    qin = ip.DenseQ(jnp.asarray(np.tile(np.stack([np.zeros(VM)] + q[1:])[None], (B, 1, 1)),
                                jnp.float32))
  rows = world.node_inputs(tokens, parents)
  dists = [tree_oracle.outcome_distribution([r[3] for r in rows], q, tokens, parents, T,
                                            naive=naive) for naive in (False, True)]
  tile = lambda x: np.tile(np.asarray(x)[None], (B,) + (1,) * np.ndim(x))
  params = _params(temperature=world.temperature, top_k=world.top_k, presence=world.presence,
                   history=tile(list(world.history) + [-1] * (M - len(world.history))))
  args = _tree_args(tile([r[1] for r in rows]), tile([r[2][:V] for r in rows]),
                    np.ones(B, bool), np.zeros((B, T)), tile(tokens), tile(parents),
                    np.full(B, T), qin, params, np.zeros(B), np.zeros(B))
  return args, dists


def _histogram(fn, args):
  counts = {}
  rng = np.random.default_rng(4)
  for call in range(CALLS):
    out = _run(fn, dict(args, seed=jnp.asarray(call * B + np.arange(B), jnp.uint32),
                        position=jnp.asarray(rng.integers(0, 10_000, B), jnp.int32)))
    acc, path, toks, flags = out
    for i in range(B):
      key = (tuple(int(x) for x in path[i, :acc[i]]), int(toks[i, acc[i]]), int(flags[i]))
      counts[key] = counts.get(key, 0) + 1
  return counts


def _pvalue(counts, dist):
  keys = sorted(set(counts) | set(dist))
  return oracle.chi_square_pvalue([counts.get(k, 0) for k in keys],
                                  [dist.get(k, 0.0) for k in keys])


@pytest.mark.parametrize("case", ["onehot_illegal_sibling", "dense_masked"])
def test_chi_square_against_the_oracle(case):
  args, (exact, naive) = _fixed_tree(case)
  assert sum(abs(exact.get(k, 0) - naive.get(k, 0)) for k in set(exact) | set(naive)) > 0.1
  counts = _histogram(ip.tree_accept_reference, args)
  assert _pvalue(counts, exact) > 1e-3
  assert len({k[0] for k in counts}) >= 5                   # the tree's paths occur
  wrong = _histogram(tree_accept_naive_reference, args)
  assert _pvalue(wrong, exact) < 1e-6
  assert _pvalue(wrong, naive) > 1e-3                       # it is the naive rule, faithfully


# ---------------------------------------------------------------------------------------------
# 4. Greedy: the longest root path of masked argmaxes, then the argmax there.

@functools.lru_cache(maxsize=None)
def _greedy_case():
  world = TreeWorld(V, VM, seed=8, legal_frac=0.4, presence=0.7, history=(5,))
  rng = np.random.default_rng(5)
  parents = np.zeros((B, T), int)
  tokens = np.zeros((B, T), int)
  states = np.zeros((B, T), np.int8)
  logits, legal = np.zeros((B, T, VM)), np.zeros((B, T, V), bool)
  for b in range(256):                    # 256 distinct trees, tiled over the B rows below
    parents[b, 0] = -1
    for t in range(1, T):
      parents[b, t] = rng.integers(0, t)
      prefix = tuple(tokens[b, u] for u in tree_oracle.path_to(parents[b], parents[b, t]))
      tokens[b, t] = world.greedy(prefix) if rng.random() < 0.7 else rng.integers(0, VM + 2)
    for t, (_, z, a, _) in enumerate(world.node_inputs(tokens[b], parents[b])):
      logits[b, t], legal[b, t] = z, a[:V]
    u = rng.random(T)
    states[b, u < 0.06] = mask_layout.DEAD_END
    states[b, (u >= 0.06) & (u < 0.12)] = mask_layout.UNREACHABLE
  n = rng.integers(1, T + 1, 256)
  tile = lambda x: np.concatenate([x[:256]] * (B // 256))
  args = _tree_args(tile(logits), tile(legal), np.ones(B, bool), tile(states), tile(tokens),
                    tile(parents), tile(n), ip.OneHotQ(),
                    _params(temperature=0.0, presence=world.presence,
                            history=np.tile([5, -1, -1], (B, 1))),
                    rng.integers(0, 2**32, B, dtype=np.uint64), rng.integers(0, 100, B))
  return world, args


def _greedy_walk(world, tokens, parents, n, states):
  """(accepted, path, tokens, flags) of one row by walking the tree in numpy."""
  kids = tree_oracle.children(parents, n)
  c, path, out = 0, [], []
  while True:
    if states[c] == mask_layout.DEAD_END:
      return len(path), path, out, ip.FLAG_DEAD_END
    if states[c] == mask_layout.UNREACHABLE:
      return len(path), path, out, 0
    x = world.greedy(tuple(tokens[u] for u in path))
    nxt = [u for u in kids[c] if tokens[u] == x]
    out.append(x)
    if not nxt:
      return len(path), path, out, 0
    c = nxt[0]
    path.append(c)


def test_greedy_follows_the_argmax_path():
  world, args = _greedy_case()
  acc, path, toks, flags = _run(ip.tree_accept_reference, args)
  tokens, parents = np.asarray(args["tokens"]), np.asarray(args["parents"])
  n, states = np.asarray(args["n_nodes"]), np.asarray(args["states"])
  for b in range(256):
    a, p, o, f = _greedy_walk(world, list(tokens[b]), list(parents[b]), n[b], states[b])
    assert (acc[b], flags[b]) == (a, f), b
    assert list(path[b]) == p + [-1] * (T - len(p)), b
    assert list(toks[b]) == o + [-1] * (T - len(o)), b
  assert np.max(acc) >= 3 and np.any(flags == ip.FLAG_DEAD_END)
  np.testing.assert_array_equal(acc[256:], np.tile(acc[:256], B // 256 - 1))


# ---------------------------------------------------------------------------------------------
# 5. The Pallas kernel (interpret mode on CPU) equals the reference; it lowers to Triton.

ROWS = 8


@pytest.mark.slow
def test_kernel_interpret_equals_reference():
  args, _ = _fixed_tree("dense_masked")
  chain, _ = _chain_case("dense")
  for full in (dict(args, seed=jnp.arange(B, dtype=jnp.uint32)), chain):
    want = _run(ip.tree_accept_reference, full)
    rows = jax.tree.map(lambda x: x[:ROWS], full)
    got = _run(ip.tree_accept, rows, impl="interpret")
    for w, g in zip(want, got):
      np.testing.assert_array_equal(g, w[:ROWS])
  greedy = _greedy_case()[1]
  rows = jax.tree.map(lambda x: x[:ROWS], greedy)
  want = _run(ip.tree_accept_reference, greedy)
  got = _run(ip.tree_accept, dict(rows, q=ip.DenseQ(jnp.zeros((ROWS, T, VM)))), impl="interpret")
  for w, g in zip(want, got):
    np.testing.assert_array_equal(g, w[:ROWS])


@pytest.mark.parametrize("q", [ip.OneHotQ(), ip.DenseQ(jnp.zeros((2, T, 1024)))],
                         ids=["onehot", "dense"])
def test_kernel_lowers_to_triton(q):
  def fn(logits, mask, states):
    return ip.tree_accept_kernel(
        logits, mask, None if mask is None else jnp.ones((2,), bool), states,
        jnp.zeros((2, T), jnp.int32), jnp.zeros((2, T), jnp.int32), jnp.full((2,), T, jnp.int32),
        q, ip.SamplingParams.create(2, history_ids=jnp.zeros((2, 2), jnp.int32)),
        jnp.zeros((2,), jnp.uint32), jnp.zeros((2,), jnp.int32), vocab_size=1000)
  masked = isinstance(q, ip.OneHotQ)
  text = jax.jit(fn).trace(
      jnp.zeros((2, T, 1024), jnp.bfloat16),
      jnp.zeros((2, T, 32), jnp.int32) if masked else None,
      jnp.zeros((2, T), jnp.int8) if masked else None).lower(
          lowering_platforms=("cuda",)).as_text()
  assert "xla.gpu.triton" in text and 'name = "tree_accept"' in text


def test_dispatch_and_shape_errors():
  _, args = _greedy_case()
  want = _run(ip.tree_accept_reference, args)
  for w, g in zip(want, _run(ip.tree_accept, args, impl="reference")):
    np.testing.assert_array_equal(g, w)
  with pytest.raises(ValueError, match="parents.shape"):
    ip.tree_accept(**dict(args, parents=args["parents"][:, 1:]), vocab_size=V)
  with pytest.raises(ValueError, match="q.probs.shape"):
    ip.tree_accept(**dict(args, q=ip.DenseQ(jnp.zeros((B, K, VM)))), vocab_size=V)
