"""Best-first expansion of a finite language's token trie: most probable prefixes first.

The full trie of a large finite language holds every tokenization of every member (TREC's
42 labels: 9,615 nodes; Banking77: over 2 million), but almost all of its probability sits
on a few paths. `expand` grows the trie from the root, scoring the most probable unexpanded
prefixes (the frontier) in one tree-attention call per round, and stops as soon as what is
left unexplored cannot change the answer:

- greedy: the most probable member (its probability summed over tokenizations) is found
  when its mass exceeds the runner-up's by more than the frontier's mass F = Σ p(prefix)
  over unexpanded prefixes (no member below them can weigh more): the argmax is exact;
- sampling: μ* restricted to the members found is within total variation F / (Z + F) of
  μ*, Z the mass of the members found; expansion stops once that is at most `tolerance`
  (0 expands everything: μ* itself).

Unexpanded prefixes stay in the trie as leaves that are neither expanded nor members, so
their Φ is 0 and the law never takes them.
"""

from __future__ import annotations

import dataclasses
import heapq
import time
from typing import Any

import numpy as np

from infernix_jax import mask_layout
from infernix_jax.faithful.target import ForwardCost, TreeScorer
from infernix_jax.faithful.trie import LanguageTooLargeError, TokenTrie


@dataclasses.dataclass(frozen=True)
class Expansion:
  """What `expand` found.

  Attributes:
    trie: expanded nodes and the unexpanded frontier (leaves, `expanded` False).
    edge: f64[N] log p(token[node] | parent); eos: f64[N] log p(EOS | node) (-inf off the
      members found).
    expanded: bool[N] the node's next-token distribution was scored.
    member_mass: Z, the probability of the members found (summed over their tokenizations).
    frontier_mass: F, Σ p(prefix) over the unexpanded nodes: a bound on the mass they hide.
    stop: "complete" (no frontier left), "greedy" (the argmax is certified) or "tolerance".
    cost: the target calls (ForwardCost); cost.seconds includes the host's mask walks.
  """

  trie: TokenTrie
  edge: np.ndarray
  eos: np.ndarray
  expanded: np.ndarray
  member_mass: float
  frontier_mass: float
  stop: str
  cost: ForwardCost

  @property
  def tv_bound(self) -> float:
    """Total variation between μ* and μ* restricted to the members found, at most."""
    total = self.member_mass + self.frontier_mass
    return self.frontier_mass / total if total > 0 else 0.0


def _greedy_certified(masses: dict[bytes, float], frontier: float) -> bool:
  """The heaviest string found outweighs every other string, found or not, for sure."""
  if not masses:
    return False
  top = sorted(masses.values(), reverse=True)[:2]
  return top[0] > (top[1] if len(top) > 1 else 0.0) + frontier


def expand(scorer: TreeScorer, session: Any, vocab: Any, *, greedy: bool = False,
           tolerance: float = 0.0, max_nodes: int, max_depth: int,
           name: str = "the constraint") -> Expansion:
  """Grows the token trie of a finite constraint best first, scoring it with the target.

  Each round pops the most probable frontier prefixes (as many as one `scorer` call holds
  with their ancestors), walks the session to their legal tokens (`session.lookahead`, never
  committed), scores their next-token distributions in one call and pushes their children.

  Args:
    scorer: the target over the request's prompt (`TreeScorer`, at the law's temperature).
    session: a fresh session of the compiled constraint.
    vocab: the constraint's Vocabulary (V, EOS ids; `decode` for greedy's strings).
    greedy: stop once the most probable member is certified.
    tolerance: sampling: stop once F / (Z + F) <= tolerance (ignored when greedy).
    max_nodes, max_depth: the trie's budgets.
    name: how errors name the constraint.

  Returns:
    the Expansion.

  Raises:
    LanguageTooLargeError: the budgets are exceeded before the stopping rule holds.
  """
  t0 = time.perf_counter()
  calls0 = scorer.cost.seconds
  eos_all = np.asarray(sorted(int(e) for e in vocab.eos_ids), np.int64)
  buf = np.zeros((max_depth + 2, mask_layout.mask_words(vocab.size)), np.int32)
  parent, token, depth = [-1], [-1], [0]
  member, expanded = [False], [False]
  children: list[dict[int, int]] = [{}]
  edge, eos, logp = [0.0], [-np.inf], [0.0]
  paths: list[tuple[int, ...]] = [()]
  eos_seen: set[int] = set()
  masses: dict[bytes, float] = {}
  heap = [(-0.0, 0)]  # (-log p(prefix), node)
  member_mass, stop = 0.0, "complete"
  while heap and np.isfinite(heap[0][0]):  # prefixes of probability 0 hide nothing
    frontier = float(sum(np.exp(-k) for k, _ in heap))
    if greedy and _greedy_certified(masses, frontier):
      stop = "greedy"
      break
    if not greedy and tolerance > 0 and frontier <= tolerance * (member_mass + frontier):
      stop = "tolerance"
      break
    batch, held = [], set()
    while heap:
      node = heap[0][1]
      need, up = [], node
      while up > 0 and up not in held:
        need.append(up)
        up = parent[up]
      if batch and len(held) + len(need) > scorer.width:
        break
      heapq.heappop(heap)
      batch.append(node)
      held.update(need)
    want = []
    for node in batch:
      path = paths[node]
      states = session.lookahead(list(path), out=buf[:len(path) + 1])
      if states[len(path)] != mask_layout.READY:
        continue
      legal = np.flatnonzero(mask_layout.unpack(buf[len(path)], vocab.size))
      is_eos = np.isin(legal, eos_all)
      kids = legal[~is_eos]
      if len(kids) and len(path) >= max_depth:
        raise LanguageTooLargeError(
            f"sampling_law='exact-finite': {name} accepts token sequences longer than "
            f"max_depth={max_depth} tokens (e.g. a prefix of {len(path)} tokens still "
            f"continues); its language is too long or infinite: bound the grammar or use "
            f"sampling_law='local'")
      want.append((node, np.concatenate([kids, legal[is_eos]]).astype(np.int64), len(kids)))
    nodes = sorted(held, key=lambda n: depth[n])
    scored = scorer.score(nodes, parent, token, depth, [(n, ids) for n, ids, _ in want])
    for (node, ids, n_kids), lp in zip(want, scored):
      expanded[node] = True
      if len(ids) > n_kids:
        member[node] = True
        eos_seen.update(int(e) for e in ids[n_kids:])
        eos[node] = float(np.logaddexp.reduce(lp[n_kids:]))
        mass = float(np.exp(logp[node] + eos[node]))
        member_mass += mass
        if greedy:
          text = vocab.decode(list(paths[node]))
          masses[text] = masses.get(text, 0.0) + mass
      if len(parent) + n_kids > max_nodes:
        raise LanguageTooLargeError(
            f"sampling_law='exact-finite': {name} needs more than max_nodes={max_nodes} trie "
            f"nodes before its {'argmax is certain' if greedy else 'law is resolved'}; raise "
            f"the budget, allow a law_tolerance, shrink the language or use "
            f"sampling_law='local'")
      for t, e in zip(ids[:n_kids], lp[:n_kids]):
        child = len(parent)
        parent.append(node)
        token.append(int(t))
        depth.append(depth[node] + 1)
        member.append(False)
        expanded.append(False)
        children.append({})
        edge.append(float(e))
        eos.append(-np.inf)
        logp.append(logp[node] + float(e))
        paths.append(paths[node] + (int(t),))
        children[node][int(t)] = child
        heapq.heappush(heap, (-logp[child], child))
  frontier = float(sum(np.exp(-k) for k, _ in heap))
  trie = TokenTrie(parent=np.asarray(parent, np.int32), token=np.asarray(token, np.int32),
                   depth=np.asarray(depth, np.int32), member=np.asarray(member, bool),
                   eos_ids=tuple(sorted(eos_seen)), children=tuple(children),
                   build_seconds=time.perf_counter() - t0 - (scorer.cost.seconds - calls0))
  cost = dataclasses.replace(scorer.cost, seconds=scorer.cost.seconds + trie.build_seconds)
  return Expansion(trie=trie, edge=np.asarray(edge), eos=np.asarray(eos),
                   expanded=np.asarray(expanded, bool), member_mass=member_mass,
                   frontier_mass=frontier, stop=stop, cost=cost)
