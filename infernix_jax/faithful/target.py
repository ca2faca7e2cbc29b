"""The target's log-probabilities at every node of a token trie, by batched cached forwards.

Axis letters (docs/CONTRACTS.md): R rows (root-to-leaf paths of one call, padded to a power of
two), P positions of a row (the prompt's last token, then the path), Vm logits width, V vocab.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from infernix_jax.faithful.trie import TokenTrie

ROWS_PER_CALL = 64  # root-to-leaf paths per verify call


@dataclasses.dataclass
class ForwardCost:
  """What computing the node distributions cost."""

  forwards: int = 0  # target calls (one prefill + one verify per batch of paths)
  tokens: int = 0  # token positions run through the target (prompt + padded path rows)
  seconds: float = 0.0  # wall seconds of the forwards and the gathering

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)


def _pow2(n: int, minimum: int = 1) -> int:
  size = minimum
  while size < n:
    size *= 2
  return size


def node_logprobs(graphdef: Any, state: Any, cfg: Any, prompt, trie: TokenTrie,
                  vocab_size: int, temperature: float, *, rows_per_call: int = ROWS_PER_CALL):
  """log p(child token | node) and log p(EOS | node) at every node, p = softmax(logits / T).

  The prompt (all but its last token) is prefilled once into a one-row KV cache; the cache is
  then repeated over R rows and each row verifies [prompt[-1], path of one leaf], whose
  logits at position j are the target's distribution after the first j path tokens. Every
  node lies on some root-to-leaf path, so one pass over the leaves covers the trie.

  Args:
    graphdef, state: the target (`nnx.split(model)`).
    cfg: its ModelConfig.
    prompt: the request's prompt ids (at least one).
    trie: the TokenTrie of the constraint.
    vocab_size: V; ids >= V (logits padding) get no mass.
    temperature: T > 0 of the request's law.
    rows_per_call: paths per verify call.

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
  leaves = trie.leaves()
  longest = int(trie.depth.max(initial=0))
  p = longest + 1  # [prompt[-1], path...]
  width = _pow2(p)
  capacity = _pow2(len(prompt) - 1 + width, 16)
  cache = im.KVCache.init(cfg, batch=1, capacity=capacity)
  if len(prompt) > 1:
    head = np.zeros((1, _pow2(len(prompt) - 1, 16)), np.int32)
    head[0, :len(prompt) - 1] = prompt[:-1]
    _, _, cache = im.prefill(graphdef, state, cache, head,
                             np.asarray([len(prompt) - 1], np.int32))
    cost.forwards += 1
    cost.tokens += len(prompt) - 1
  eos_ids = np.asarray(trie.eos_ids, np.int64)

  @jax.jit
  def scores(logits, idx):  # [R, P, Vm], [R, P, C] -> log-softmax at idx over the V real ids
    z = logits[..., :vocab_size].astype(jnp.float32) / temperature
    return jnp.take_along_axis(jax.nn.log_softmax(z, axis=-1), idx, axis=-1)

  # Only the children's and EOS probabilities of each node come back: C ids per position.
  n_eos = len(eos_ids)
  c = _pow2(max(len(k) for k in trie.children) + n_eos)

  edge = np.zeros(trie.size, np.float64)
  eos = np.full(trie.size, -np.inf, np.float64)
  done = np.zeros(trie.size, bool)
  for start in range(0, len(leaves), rows_per_call):
    chunk = leaves[start:start + rows_per_call]
    r = _pow2(len(chunk))
    tokens = np.zeros((r, width), np.int32)  # [R, P]
    tokens[:, 0] = prompt[-1]
    idx = np.zeros((r, width, c), np.int32)  # [R, P, C]: each node's children, then EOS ids
    paths = []
    for i, leaf in enumerate(chunk):
      path = trie.path(int(leaf))
      tokens[i, 1:len(path) + 1] = path
      paths.append(path)
      node = 0
      for j in range(len(path) + 1):
        kids = list(trie.children[node])
        idx[i, j, :len(kids)] = kids
        idx[i, j, len(kids):len(kids) + n_eos] = eos_ids
        if j < len(path):
          node = trie.children[node][path[j]]
    # [L, R, S, G, H] keys/values and i32[R] lengths: the prompt's cache row, R times
    rows = jax.tree_util.tree_map(
        lambda x, r=r: jnp.repeat(x, r, axis=0 if x.ndim == 1 else 1), cache)
    logits, _, _ = im.verify(graphdef, state, rows, jnp.asarray(tokens))
    logp = np.asarray(scores(logits, jnp.asarray(idx)), np.float64)  # [R, P, C]
    cost.forwards += 1
    cost.tokens += r * width
    for i, path in enumerate(paths):
      node = 0
      for j in range(len(path) + 1):
        if not done[node]:
          done[node] = True
          kids = trie.children[node]
          for m, child in enumerate(kids.values()):
            edge[child] = logp[i, j, m]
          if trie.member[node] and n_eos:
            eos[node] = np.logaddexp.reduce(logp[i, j, len(kids):len(kids) + n_eos])
        if j < len(path):
          node = trie.children[node][path[j]]
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
