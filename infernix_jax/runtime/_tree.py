"""Draft trees in the round: tree shapes for the verify, pruning, the accepted path's KV.

Axis letters (docs/CONTRACTS.md): B lanes, N drafted nodes, P = N + 1 verified positions
(node 0 the anchor, node t >= 1 the drafted node t - 1), W mask words, Vm logits width.

A tree proposal is a `Proposal` with `parents` i32[B, N]: drafted node j hangs off parents[j]
(-1: the anchor), parents first. The verify scores all P positions in one tree-attention call
(node t's K/V in cache slot lengths[b] + t), `pallas.tree_accept` picks the accepted root
path, and `compact` moves that path's K/V to the slots a chain would have used, so the cache
keeps the accepted path only (the rest is scratch past the committed length).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from infernix_jax import mask_layout
from infernix_jax.constrain import tree as _ctree


def positions_parents(parents, n):
  """i32[B, P] parents over the P positions (node 0, the anchor: -1; node t: parents[t-1] + 1);
  padding nodes (t > n) hang off the anchor."""
  b = parents.shape[0]
  full = jnp.concatenate([jnp.full((b, 1), -1, jnp.int32), parents.astype(jnp.int32) + 1], 1)
  t = jnp.arange(full.shape[1])[None, :]
  return jnp.where((t >= 1) & (t > n[:, None]), 0, full)


def tree_shape(parents, n):
  """(depth i32[B, P], ancestors bool[B, P, P]) of the positions' tree for the verify."""
  par = positions_parents(parents, n)                                          # [B, P]
  b, p = par.shape
  depth = jnp.zeros((b, p), jnp.int32)
  anc = jnp.broadcast_to(jnp.eye(p, dtype=bool)[None], (b, p, p))
  rows = jnp.arange(b)
  for t in range(1, p):  # parents first: node t's root path is its parent's plus itself
    up = jnp.clip(par[:, t], 0, p - 1)
    depth = depth.at[:, t].set(depth[rows, up] + 1)
    anc = anc.at[:, t].set(anc[rows, up] | (jnp.arange(p)[None, :] == t))
  return depth, anc


def chain_rows(path, accepted):
  """i32[B, P]: the positions whose outputs produced the round's tokens in order: the anchor,
  then the accepted path's nodes (path i32[B, P] of `tree_accept`, node indices); 0 after."""
  j = jnp.arange(path.shape[1])[None, :]
  prev = jnp.concatenate([jnp.zeros_like(path[:, :1]), path[:, :-1]], axis=1)
  return jnp.where((j >= 1) & (j <= accepted[:, None]), prev, 0).astype(jnp.int32)


def gather_rows(x, rows):
  """x [B, P, ...] at rows i32[B, P] per lane."""
  idx = rows.reshape(rows.shape + (1,) * (x.ndim - 2))
  return jnp.take_along_axis(x, idx, axis=1)


def compact(cache, lengths, path, accepted):
  """The cache with the accepted path's K/V in slots lengths + 1 .. lengths + accepted.

  Node t's entries sit in slot lengths + t after the tree verify; accepted node path[j]
  moves to lengths + 1 + j (the anchor stays at lengths). Only the P slots of each lane are
  read and written (a scatter, in place when the cache is donated)."""
  j = jnp.arange(path.shape[1])[None, :]
  src = jnp.where(j < accepted[:, None], path, j + 1)                           # [B, P]
  src = jnp.concatenate([jnp.zeros_like(src[:, :1]), src[:, :-1]], 1)          # slot offsets
  src = jnp.where(j == 0, 0, src)
  lanes = jnp.arange(path.shape[0])[:, None]
  read = lengths[:, None] + src
  write = lengths[:, None] + j
  cap = cache.k.shape[2]
  read = jnp.minimum(read, cap - 1)
  k = cache.k.at[:, lanes, write].set(cache.k[:, lanes, read], mode="drop")
  v = cache.v.at[:, lanes, write].set(cache.v[:, lanes, read], mode="drop")
  return dataclasses.replace(cache, k=k, v=v)


def prune(drafts, parents, n, mask, states, enabled):
  """Drops the nodes the grammar rules out (host, numpy), before the verify.

  Returns:
    (drafts, parents, n, mask, states, pruned i32[B]): kept nodes renumbered in their order,
    their mask rows moved with them (a kept node's root path is unchanged, so its row is).
  """
  drafts, parents, n = np.array(drafts), np.array(parents), np.array(n)
  mask, states = np.array(mask), np.array(states)
  pruned = np.zeros(len(n), np.int32)
  for b in np.flatnonzero(enabled):
    m = int(n[b])
    bad = _ctree.illegal_nodes(drafts[b], parents[b], m, mask[b], states[b])
    if not bad.any():
      continue
    keep = np.flatnonzero(~bad)
    new_index = np.full(m, -1)
    new_index[keep] = np.arange(len(keep))
    old_par = parents[b, keep]
    drafts[b, :len(keep)] = drafts[b, keep]
    parents[b, :len(keep)] = np.where(old_par >= 0, new_index[np.maximum(old_par, 0)], -1)
    drafts[b, len(keep):], parents[b, len(keep):] = 0, -1
    rows = np.concatenate([[0], keep + 1])
    mask[b, :len(rows)] = mask[b, rows]
    states[b, :len(rows)] = states[b, rows]
    mask[b, len(rows):], states[b, len(rows):] = 0, mask_layout.UNREACHABLE
    pruned[b] = m - len(keep)
    n[b] = len(keep)
  return drafts, parents, n, mask, states, pruned


def truncate(prop, budget: int):
  """The proposal's first `budget` nodes (a tree's nodes come best first, parents first, so
  a prefix is a tree); unchanged when it holds no more. numpy or traced arrays."""
  if prop.drafts.shape[1] <= budget:
    return prop
  n = prop.n
  n = np.minimum(n, budget) if isinstance(n, np.ndarray) else jnp.minimum(n, budget)
  return dataclasses.replace(prop, drafts=prop.drafts[:, :budget],
                             parents=prop.parents[:, :budget], n=n)
