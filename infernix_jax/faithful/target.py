"""The target's log-probabilities at every node of a token trie, by tree-attention forwards.

Axis letters (docs/CONTRACTS.md): T positions of a call (the prompt's last token, then trie
nodes, padded to a power of two), C the ids gathered per position (a node's children, then
the EOS ids), Vm logits width, V vocab.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from infernix_jax.faithful.trie import TokenTrie

TOKENS_PER_CALL = 128  # trie nodes (plus the anchor) scored by one tree-attention call


@dataclasses.dataclass
class ForwardCost:
  """What computing the node distributions cost."""

  forwards: int = 0  # target calls (one prefill + one tree-attention call per chunk)
  tokens: int = 0  # token positions run through the target (prompt + padded chunks)
  seconds: float = 0.0  # wall seconds of the forwards and the gathering

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)


def pow2(n: int, minimum: int = 1) -> int:
  """The least power of two >= n and >= minimum (shape buckets bound the compiles)."""
  size = minimum
  while size < n:
    size *= 2
  return size


def preorder(trie: TokenTrie) -> list[int]:
  """Every non-root node, depth first (each node right after its ancestors)."""
  out, stack = [], list(reversed(trie.children[0].values()))
  while stack:
    node = stack.pop()
    out.append(node)
    stack.extend(reversed(trie.children[node].values()))
  return out


def chunks(trie: TokenTrie, limit: int) -> list[tuple[list[int], set[int]]]:
  """Splits the trie into sub-forests of at most `limit` nodes, each closed under ancestors.

  Nodes are taken depth first; a chunk that would overflow is closed and the next starts
  with the root path of its first node again (those copies only give context).

  Returns:
    [(nodes in depth-first order, the nodes scored in this chunk)]: every node is scored
    in exactly one chunk.
  """
  if limit < int(trie.depth.max(initial=0)):
    raise ValueError(f"a chunk of {limit} nodes cannot hold a root path of "
                     f"{int(trie.depth.max())} tokens")
  out: list[tuple[list[int], set[int]]] = []
  nodes: list[int] = []
  held: set[int] = set()
  scored: set[int] = set()
  for node in preorder(trie):
    path, up = [], node
    while up > 0 and up not in held:
      path.append(up)
      up = int(trie.parent[up])
    if len(nodes) + len(path) > limit:
      out.append((nodes, scored))
      nodes, held, scored = [], set(), set()
      path, up = [], node
      while up > 0:
        path.append(up)
        up = int(trie.parent[up])
    nodes.extend(reversed(path))
    held.update(path)
    scored.add(node)
  if nodes or not out:
    out.append((nodes, scored))
  return out


class TreeScorer:
  """The target's next-token log-probabilities after token-tree nodes, over one prompt.

  The prompt (all but its last token) is prefilled once into a one-row KV cache; each
  `score` call is then one tree-attention call (`models.tree_verify`) in which the prompt's
  last token stands for the root (node 0, depth 0) and every node reads its own root path.

  Args:
    graphdef, state: the target (`nnx.split(model)`).
    cfg: its ModelConfig.
    prompt: the request's prompt ids (at least one).
    vocab_size: V; ids >= V (logits padding) get no mass.
    temperature: T > 0: p = softmax(logits / T).
    width: the most nodes one call holds (besides the anchor).
  """

  def __init__(self, graphdef: Any, state: Any, cfg: Any, prompt, vocab_size: int,
               temperature: float, width: int = TOKENS_PER_CALL):
    import jax
    import jax.numpy as jnp

    from infernix_jax import models as im
    t0 = time.perf_counter()
    self.graphdef, self.state, self.width = graphdef, state, width
    self.prompt = [int(t) for t in prompt]
    self.cost = ForwardCost()
    n = len(self.prompt) - 1
    self.cache = im.KVCache.init(cfg, batch=1, capacity=pow2(n + pow2(1 + width, 16), 16))
    if n:
      head = np.zeros((1, pow2(n, 16)), np.int32)
      head[0, :n] = self.prompt[:-1]
      _, _, self.cache = im.prefill(graphdef, state, self.cache, head,
                                    np.asarray([n], np.int32))
      self.cost.forwards += 1
      self.cost.tokens += n

    @jax.jit
    def scores(logits, idx):  # [1, T, Vm], [1, T, C] -> log-softmax at idx over the V ids
      z = logits[..., :vocab_size].astype(jnp.float32) / temperature
      return jnp.take_along_axis(jax.nn.log_softmax(z, axis=-1), idx, axis=-1)

    self._scores = scores
    self.cost.seconds += time.perf_counter() - t0

  def score(self, nodes, parent, token, depth, want) -> list[np.ndarray]:
    """One call: log p(ids | node) for each (node, ids) of `want`.

    Args:
      nodes: the call's nodes (root excluded), each after its parent; closed under
        ancestors; at most `width`.
      parent, token, depth: indexable by node id (the root is node 0).
      want: [(node, i64[C_n] ids)], nodes among `nodes` or the root.

    Returns:
      [f64[C_n]] the log-probabilities, in `want`'s order.
    """
    import jax.numpy as jnp

    from infernix_jax import models as im
    t0 = time.perf_counter()
    if len(nodes) > self.width:
      raise ValueError(f"{len(nodes)} nodes exceed the scorer's width {self.width}")
    t = pow2(1 + len(nodes), 16)  # buckets bound the compiles
    tokens = np.zeros((1, t), np.int32)  # [1, T]: the anchor, then the nodes
    depths = np.zeros((1, t), np.int32)
    ancestors = np.zeros((1, t, t), bool)  # [1, T, T]
    ancestors[0, np.arange(t), np.arange(t)] = True  # padding reads itself only
    tokens[0, 0] = self.prompt[-1]
    where = {0: 0}  # node -> its position in this call
    for i, node in enumerate(nodes, start=1):
      tokens[0, i], depths[0, i] = token[node], depth[node]
      ancestors[0, i] = ancestors[0, where[int(parent[node])]]
      ancestors[0, i, i] = True
      where[node] = i
    c = pow2(max((len(ids) for _, ids in want), default=1))
    idx = np.zeros((1, t, c), np.int32)  # [1, T, C]
    for node, ids in want:
      idx[0, where[node], :len(ids)] = ids
    logits, self.cache = im.tree_verify(self.graphdef, self.state, self.cache,
                                        jnp.asarray(tokens), jnp.asarray(depths),
                                        jnp.asarray(ancestors))
    logp = np.asarray(self._scores(logits, jnp.asarray(idx)), np.float64)[0]  # [T, C]
    self.cost.forwards += 1
    self.cost.tokens += t
    self.cost.seconds += time.perf_counter() - t0
    return [logp[where[node], :len(ids)] for node, ids in want]


def node_logprobs(graphdef: Any, state: Any, cfg: Any, prompt, trie: TokenTrie,
                  vocab_size: int, temperature: float, *, tokens_per_call: int = TOKENS_PER_CALL):
  """log p(child token | node) and log p(EOS | node) at every node, p = softmax(logits / T).

  One `TreeScorer` call per chunk of the trie (`chunks`): the logits at a node are the
  target's distribution after that node's tokens.

  Args:
    graphdef, state: the target (`nnx.split(model)`).
    cfg: its ModelConfig.
    prompt: the request's prompt ids (at least one).
    trie: the TokenTrie of the constraint.
    vocab_size: V; ids >= V (logits padding) get no mass.
    temperature: T > 0 of the request's law.
    tokens_per_call: trie nodes per call (besides the anchor).

  Returns:
    (edge f64[N]: log p(token[node] | parent) (0 at the root), eos f64[N]: log of the summed
    probability of the trie's EOS ids at the node (-inf where the node is not a member),
    ForwardCost).
  """
  scorer = TreeScorer(graphdef, state, cfg, prompt, vocab_size, temperature, tokens_per_call)
  eos_ids = np.asarray(trie.eos_ids, np.int64)
  edge = np.zeros(trie.size, np.float64)
  eos = np.full(trie.size, -np.inf, np.float64)
  for k, (nodes, scored) in enumerate(chunks(trie, tokens_per_call)):
    owners = ([0] if k == 0 else []) + [n for n in nodes if n in scored]
    want = [(n, np.append(np.fromiter(trie.children[n], np.int64), eos_ids)) for n in owners]
    for (node, ids), logp in zip(want, scorer.score(nodes, trie.parent, trie.token, trie.depth,
                                                    want)):
      kids = list(trie.children[node].values())
      edge[kids] = logp[:len(kids)]
      if trie.member[node] and len(eos_ids):
        eos[node] = np.logaddexp.reduce(logp[len(kids):])
  return edge, eos, scorer.cost


def log_phi(trie: TokenTrie, edge: np.ndarray, eos: np.ndarray) -> np.ndarray:
  """log Φ(node) = log(p(EOS | node)·[member] + Σ_t p(t | node)·Φ(child_t)), f64[N].

  Children always have larger depth than their parent: one sweep per depth, deepest first.
  """
  acc = eos.copy()
  for d in range(int(trie.depth.max(initial=0)), 0, -1):
    idx = np.flatnonzero(trie.depth == d)
    np.logaddexp.at(acc, trie.parent[idx], edge[idx] + acc[idx])
  return acc
