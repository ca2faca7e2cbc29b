"""FP64 oracle of tree speculative acceptance and a tiny prefix-indexed world for its tests.

Written from the rule's statement (SpecInfer's multi-step speculative sampling, arXiv
2305.09781) with plain Python loops over nodes and tokens, independently of the jnp code.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools

import numpy as np

from tests.pallas import oracle

FLAG_DEAD_END = oracle.FLAG_DEAD_END


def children(parents, n_nodes):
  """Per node, its valid children in increasing index (node 0 is the root)."""
  kids = [[] for _ in range(len(parents))]
  for t in range(1, n_nodes):
    if 0 <= parents[t] < t:
      kids[parents[t]].append(t)
  return kids


def path_to(parents, t):
  """Nodes of t's root path, root excluded, t included (depth order)."""
  path = []
  while t > 0:
    path.append(t)
    t = parents[t]
  return path[::-1]


def outcome_distribution(p, q, tokens, parents, n_nodes, *, stops=None, naive=False):
  """Exact probability of every outcome of the rule on one fixed tree (one row).

  Args:
    p: per node t, f64[Vm] target at the position after t's root path (one-hot at temperature 0).
    q: per node t >= 1, f64[Vm] law node t's token was drawn from (entry 0 unused).
    tokens, parents: per node (entry 0 unused); n_nodes: valid nodes, root included.
    stops: per node None (READY) or the flag ending the row there without a token:
      FLAG_DEAD_END, 0 (Unreachable), FLAG_NONFINITE or FLAG_EMPTY.
    naive: the wrong rule (every sibling tested against the unchanged p_c; the all-rejected
      draw from norm(max(p_c - q_last, 0))).

  Returns:
    dict (accepted path tuple, emitted token or -1, flag) -> probability.
  """
  kids = children(parents, n_nodes)
  stops = stops or [None] * len(parents)
  out = {}

  def add(key, prob):
    if prob > 0:
      out[key] = out.get(key, 0.0) + prob

  def visit(c, path, prob):
    if stops[c] is not None:
      add((path, -1, stops[c]), prob)
      return
    pc = np.asarray(p[c], np.float64)
    r = pc.copy()
    for u in kids[c]:
      d = tokens[u]
      test = pc if naive else r
      qu = np.asarray(q[u], np.float64)
      pd = test[d] if 0 <= d < len(test) else 0.0
      qd = qu[d] if 0 <= d < len(qu) else 0.0
      a = min(1.0, pd / qd) if qd > 0 else float(pd > 0)
      visit(u, path + (u,), prob * a)
      prob *= 1.0 - a
      if prob == 0:
        return
      res = np.maximum(test - qu, 0.0)
      r = res / res.sum() if res.sum() > 0 else np.zeros_like(res)
    if kids[c] and r.sum() == 0:
      r = pc
    for x in range(len(r)):
      add((path, x, 0), prob * r[x])

  visit(0, (), 1.0)
  return out


def emitted_sequences(dist, tokens):
  """Outcome distribution -> distribution of the emitted token tuples (path tokens, then the
  emitted token); outcomes with a flag or no token are kept as their path tokens only."""
  seqs = {}
  for (path, tok, _), prob in dist.items():
    s = tuple(tokens[u] for u in path) + ((tok,) if tok >= 0 else ())
    seqs[s] = seqs.get(s, 0.0) + prob
  return seqs


@dataclasses.dataclass(frozen=True)
class TreeWorld:
  """Target logits, grammar sets and drafter laws as functions of the prefix (FP64).

  Every table entry is drawn from a generator seeded by (seed, prefix), so any prefix of any
  tree has a fixed value; logits are f32-representable (the jnp code reads them as f32).
  """
  vocab: int
  width: int
  seed: int = 0
  legal_frac: float = 0.7
  scale: float = 1.5
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  min_p: float = 0.0
  presence: float = 0.0
  frequency: float = 0.0
  history: tuple = ()

  def _rng(self, prefix, tag):
    return np.random.default_rng([self.seed, tag, len(prefix), *[int(x) for x in prefix]])

  @functools.lru_cache(maxsize=None)
  def logits(self, prefix) -> np.ndarray:
    z = self._rng(prefix, 1).normal(size=self.width) * self.scale
    return z.astype(np.float32).astype(np.float64)

  @functools.lru_cache(maxsize=None)
  def legal(self, prefix) -> np.ndarray:
    g = self._rng(prefix, 2)
    a = np.zeros(self.width, bool)
    a[:self.vocab] = g.random(self.vocab) < self.legal_frac
    a[g.integers(0, self.vocab)] = True                          # never empty
    return a

  @functools.lru_cache(maxsize=None)
  def target(self, prefix) -> np.ndarray:
    """f64[Vm] target after ``prefix`` (penalties over history + prefix)."""
    return oracle.target(self.logits(prefix), self.legal(prefix), temperature=self.temperature,
                         top_k=self.top_k, top_p=self.top_p, min_p=self.min_p,
                         presence=self.presence, frequency=self.frequency,
                         history=list(self.history) + list(prefix))[0]

  def greedy(self, prefix) -> int:
    return oracle.target(self.logits(prefix), self.legal(prefix), temperature=0.0,
                         presence=self.presence, frequency=self.frequency,
                         history=list(self.history) + list(prefix))[1]

  @functools.lru_cache(maxsize=None)
  def proposal(self, prefix, j, kind) -> np.ndarray:
    """f64[Vm] law of the j-th child drafted after ``prefix``.

    kind: "onehot" (the j-th best of a noisy copy of the target's logits, the grammar
    ignored: siblings are distinct, some illegal), "dense" (a Dirichlet law per prefix and j)
    or "masked" (that law restricted to the legal set).
    """
    q = np.zeros(self.width)
    if kind == "onehot":
      noise = self._rng(prefix, 3).normal(size=self.vocab)          # shared by the siblings
      score = self.logits(prefix)[:self.vocab] + noise
      q[np.argsort(-score, kind="stable")[j]] = 1.0
      return q
    q[:self.vocab] = self._rng(prefix, 4 + j).dirichlet(np.ones(self.vocab) * 0.8)
    if kind == "masked":
      q *= self.legal(prefix)
    return q / q.sum()

  def node_inputs(self, tokens, parents):
    """Per node: (prefix tuple, logits, legal, p) of its position."""
    rows = []
    for t in range(len(parents)):
      prefix = tuple(int(tokens[u]) for u in path_to(parents, t))
      rows.append((prefix, self.logits(prefix), self.legal(prefix), self.target(prefix)))
    return rows


def sibling_ranks(parents):
  ranks, seen = [0] * len(parents), {}
  for t in range(1, len(parents)):
    ranks[t] = seen.get(parents[t], 0)
    seen[parents[t]] = ranks[t] + 1
  return ranks


def emitted_law(world: TreeWorld, parents, kind, *, naive=False):
  """Law of the emitted token tuple when node t's token is drawn from
  world.proposal(prefix of its parent, its sibling rank, kind), independently of its
  siblings: every assignment of the tree's tokens is enumerated with its probability."""
  n = len(parents)
  ranks = sibling_ranks(parents)
  law = {}

  def assign(t, tokens, weight):
    if t == n:
      rows = world.node_inputs(tokens, parents)
      q = [None] + [world.proposal(rows[parents[u]][0], ranks[u], kind) for u in range(1, n)]
      dist = outcome_distribution([r[3] for r in rows], q, tokens, parents, n, naive=naive)
      for s, prob in emitted_sequences(dist, tokens).items():
        law[s] = law.get(s, 0.0) + weight * prob
      return
    prefix = tuple(int(tokens[u]) for u in path_to(parents, parents[t]))
    qd = world.proposal(prefix, ranks[t], kind)
    for x in np.flatnonzero(qd > 0):
      assign(t + 1, tokens + [int(x)], weight * qd[x])

  assign(1, [0], 1.0)
  return law


def prefix_law(law, world: TreeWorld, length: int):
  """Law of the first ``length`` tokens when decoding continues from the emitted tuple with
  the target (a tuple shorter than ``length`` is extended by target draws)."""
  out = {}

  def extend(s, prob):
    if len(s) >= length:
      out[s[:length]] = out.get(s[:length], 0.0) + prob
      return
    p = world.target(s)
    for x in np.flatnonzero(p > 0):
      extend(s + (int(x),), prob * p[x])

  for s, prob in law.items():
    extend(s, prob)
  return out


def target_law(world: TreeWorld, length: int):
  """Law of the first ``length`` tokens of ordinary decoding: prod_i p(x_i | x_<i)."""
  out = {}
  for s in itertools.product(range(world.vocab), repeat=length):
    prob = 1.0
    for i in range(length):
      prob *= world.target(s[:i])[s[i]]
      if prob == 0:
        break
    if prob > 0:
      out[s] = prob
  return out


def max_gap(a: dict, b: dict) -> float:
  return max(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))
