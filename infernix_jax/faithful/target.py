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

TOKENS_PER_CALL = 512  # trie nodes (plus the anchor) scored by one tree-attention call


@dataclasses.dataclass
class ForwardCost:
  """What computing the node distributions cost."""

  forwards: int = 0  # target calls (one prefill + one tree-attention call per chunk)
  tokens: int = 0  # token positions run through the target (prompt + padded chunks)
  seconds: float = 0.0  # wall seconds of the forwards and the gathering

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)


def _pow2(n: int, minimum: int = 1) -> int:
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


def node_logprobs(graphdef: Any, state: Any, cfg: Any, prompt, trie: TokenTrie,
                  vocab_size: int, temperature: float, *, tokens_per_call: int = TOKENS_PER_CALL):
  """log p(child token | node) and log p(EOS | node) at every node, p = softmax(logits / T).

  The prompt (all but its last token) is prefilled once into a one-row KV cache. Each call
  then scores one chunk of the trie (`chunks`) by tree attention (`models.tree_verify`): the
  prompt's last token stands for the root at depth 0 and every node reads its own root
  path, so the logits at a node are the target's distribution after that node's tokens.

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
  import jax
  import jax.numpy as jnp

  from infernix_jax import models as im

  t0 = time.perf_counter()
  cost = ForwardCost()
  prompt = [int(t) for t in prompt]
  parts = chunks(trie, tokens_per_call)
  width = _pow2(1 + max(len(nodes) for nodes, _ in parts), 16)
  cache = im.KVCache.init(cfg, batch=1, capacity=_pow2(len(prompt) - 1 + width, 16))
  if len(prompt) > 1:
    head = np.zeros((1, _pow2(len(prompt) - 1, 16)), np.int32)
    head[0, :len(prompt) - 1] = prompt[:-1]
    _, _, cache = im.prefill(graphdef, state, cache, head,
                             np.asarray([len(prompt) - 1], np.int32))
    cost.forwards += 1
    cost.tokens += len(prompt) - 1
  eos_ids = np.asarray(trie.eos_ids, np.int64)
  n_eos = len(eos_ids)

  @jax.jit
  def scores(logits, idx):  # [1, T, Vm], [1, T, C] -> log-softmax at idx over the V real ids
    z = logits[..., :vocab_size].astype(jnp.float32) / temperature
    return jnp.take_along_axis(jax.nn.log_softmax(z, axis=-1), idx, axis=-1)

  edge = np.zeros(trie.size, np.float64)
  eos = np.full(trie.size, -np.inf, np.float64)
  for k, (nodes, scored) in enumerate(parts):
    t = _pow2(1 + len(nodes), 16)  # buckets bound the compiles
    tokens = np.zeros((1, t), np.int32)  # [1, T]: the anchor, then the chunk's nodes
    depth = np.zeros((1, t), np.int32)
    ancestors = np.zeros((1, t, t), bool)  # [1, T, T]
    ancestors[0, np.arange(t), np.arange(t)] = True  # padding reads itself only
    tokens[0, 0] = prompt[-1]
    where = {0: 0}  # node -> its position in this call
    owners = [(0, 0)] if k == 0 else []  # (node, position) of the nodes scored here
    for i, node in enumerate(nodes, start=1):
      tokens[0, i], depth[0, i] = trie.token[node], trie.depth[node]
      ancestors[0, i] = ancestors[0, where[int(trie.parent[node])]]
      ancestors[0, i, i] = True
      where[node] = i
      if node in scored:
        owners.append((node, i))
    c = _pow2(max(len(trie.children[n]) for n, _ in owners) + n_eos)
    idx = np.zeros((1, t, c), np.int32)  # [1, T, C]: each scored node's children, then EOS
    for node, i in owners:
      kids = list(trie.children[node])
      idx[0, i, :len(kids)] = kids
      idx[0, i, len(kids):len(kids) + n_eos] = eos_ids
    logits, cache = im.tree_verify(graphdef, state, cache, jnp.asarray(tokens),
                                   jnp.asarray(depth), jnp.asarray(ancestors))
    logp = np.asarray(scores(logits, jnp.asarray(idx)), np.float64)[0]  # [T, C]
    cost.forwards += 1
    cost.tokens += t
    for node, i in owners:
      kids = trie.children[node]
      for m, child in enumerate(kids.values()):
        edge[child] = logp[i, m]
      if trie.member[node] and n_eos:
        eos[node] = np.logaddexp.reduce(logp[i, len(kids):len(kids) + n_eos])
  cost.seconds = time.perf_counter() - t0
  return edge, eos, cost


def log_phi(trie: TokenTrie, edge: np.ndarray, eos: np.ndarray) -> np.ndarray:
  """log Φ(node) = log(p(EOS | node)·[member] + Σ_t p(t | node)·Φ(child_t)), f64[N].

  Children always have larger depth than their parent: one sweep per depth, deepest first.
  """
  acc = eos.copy()
  for d in range(int(trie.depth.max(initial=0)), 0, -1):
    idx = np.flatnonzero(trie.depth == d)
    np.logaddexp.at(acc, trie.parent[idx], edge[idx] + acc[idx])
  return acc
