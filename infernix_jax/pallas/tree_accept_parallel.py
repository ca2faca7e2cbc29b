"""Tree acceptance with every node's statistics in parallel and one residual draw per row.

Axis letters as in ``tree_accept``: B rows, T tree positions (node 0 is the root), Vm logits
width, V vocabulary.

``tree_accept_one_residual`` returns ``tree_accept_reference``'s results token for token: the
same target law at each node, the same counter-based uniforms and Gumbel keys, the same f32
arithmetic for every quantity a decision reads. What changes is the order of work:

1. The acceptance statistics of every node as a child (p or the residual at its token, the
   residual's scale, q of the token, the uniform) for all nodes at once. A one-hot proposal
   needs no sequential update: after the rejection of siblings d_0..d_{j-1} the reference's
   residual max(R - S q, 0) is p_c with those tokens set to exactly 0 (R(d) <= S: p <= 1 and a
   float sum of non-negative terms is at least each term), so each node's residual and its
   scale S = sum(R) come from one masked pass over [B, T, Vm]. A dense proposal changes the
   residual everywhere: its sibling updates run node by node (``sibling_residuals``, the
   reference's own loop), the one part that stays serial.
2. The walk from the root along the first accepted child, in parallel over the nodes: a node
   is visited when every edge of its root path was its parent's first accepted child and no
   strict ancestor stopped the row (DeadEnd, Unreachable, a flagged position).
3. One Gumbel draw per row at its stopping node: from the residual left by its rejected
   children, else from p there (the bonus); the reference draws both at every node.

One limit of "token for token": a later sibling's scale S_j is a float sum over the
vocabulary, and XLA may order that sum differently in two programs at large Vm (on CPU the
two differ in the last bit at Vm = 151936, not at Vm <= 32000). A later sibling whose uniform
lands within that last bit of its threshold can then go the other way (about 1e-7 per such
test). First children, greedy rows and the one-hot draws read no such sum; a dense
proposal's residual does (R - S q), where a last-bit change moves the draw only at a near tie.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from infernix_jax.pallas import _sampling
from infernix_jax.pallas._types import FLAG_DEAD_END, OneHotQ, PURPOSE_SAMPLE, SamplingParams
from infernix_jax.pallas.spec_accept import _dense_q
from infernix_jax.pallas.tree_accept import (Nodes, TreeResult, node_stats,
                                             sibling_residuals)


def _one_hot_siblings(nodes: Nodes, tokens):
  """Each node's test as a child under a one-hot proposal, for all nodes at once.

  Returns:
    (r_d f32[B, T]: the parent's residual at the node's token, scale f32[B, T]: its sum
    S_j, 1 for a first child).
  """
  b, t, vm = nodes.probs.shape
  par, rank = nodes.shape.parent, nodes.shape.rank
  idx = jnp.arange(t)
  # before[b, i, s]: s is an earlier sibling of i (same parent, smaller index).
  before = ((par[:, :, None] == par[:, None, :]) & (par[:, :, None] >= 0)
            & (idx[None, None, :] < idx[None, :, None]))                       # [B, T, T]
  inside = (tokens >= 0) & (tokens < vm)
  col = jnp.where(before & inside[:, None, :], tokens[:, None, :], vm)         # [B, T, T]
  bi = jnp.broadcast_to(jnp.arange(b)[:, None, None], col.shape)
  ii = jnp.broadcast_to(idx[None, :, None], col.shape)
  taken = jnp.zeros((b, t, vm), bool).at[bi, ii, col].set(True, mode="drop")   # [B, T, Vm]
  p_parent = jnp.take_along_axis(nodes.probs, jnp.maximum(par, 0)[:, :, None], 1)
  residual = jnp.where(taken, 0.0, p_parent)                                   # [B, T, Vm]
  scale = jnp.where(rank == 0, jnp.float32(1.0), jnp.sum(residual, -1))
  dup = jnp.any(before & (tokens[:, None, :] == tokens[:, :, None]), -1)
  p_d = jnp.take_along_axis(p_parent, jnp.clip(tokens, 0, vm - 1)[:, :, None], -1)[..., 0]
  return jnp.where(nodes.legal_d & ~dup, p_d, 0.0), scale


def _walk(nodes: Nodes, acc):
  """The visited nodes: bool[B, T] (a root path), from each node's first accepted child."""
  b, t, _ = nodes.probs.shape
  par, anc = nodes.shape.parent, nodes.shape.ancestors
  idx = jnp.arange(t)
  is_child = par[:, None, :] == idx[None, :, None]                             # [B, c, t]
  nxt = jnp.min(jnp.where(is_child & acc[:, None, :], idx[None, None, :], t), -1)
  entered = (idx[None, :] == 0) | ((par >= 0) & (
      jnp.take_along_axis(nxt, jnp.maximum(par, 0), -1) == idx[None, :]))     # [B, T]
  clear = ~nodes.dead & ~nodes.unreach & (nodes.pflags == 0)
  strict = anc & (idx[:, None] != idx[None, :])[None]                          # [B, t, s]
  return (anc[:, :, 0] & jnp.all(~strict | clear[:, None, :], -1)
          & jnp.all(~anc | entered[:, None, :], -1))


@functools.partial(jax.jit, static_argnames=["vocab_size", "purpose"])
def tree_accept_one_residual(logits, mask, mask_enabled, states, tokens, parents, n_nodes, q,
                             params: SamplingParams, seed, position, *, vocab_size: int,
                             purpose: int = PURPOSE_SAMPLE) -> TreeResult:
  """``tree_accept_reference`` (same arguments and results, token for token) with every
  node's statistics in parallel, the walk in jnp over [B, T] arrays, and one residual or
  bonus draw per row at its stopping node (see the module docstring).

  Returns:
    TreeResult(accepted i32[B], path i32[B, T], tokens i32[B, T], flags i32[B]).
  """
  tokens = tokens.astype(jnp.int32)
  nodes = node_stats(logits, mask, mask_enabled, states, tokens, parents, n_nodes, q, params,
                     seed, position, vocab_size=vocab_size, purpose=purpose)
  b, t, vm = nodes.probs.shape
  par, depth = nodes.shape.parent, nodes.shape.depth
  rows = jnp.arange(b)
  if isinstance(q, OneHotQ):
    r_d, scale = _one_hot_siblings(nodes, tokens)
    c = jnp.maximum(par, 0)
    acc = (par >= 0) & jnp.where(
        nodes.sampling[:, None], nodes.u * nodes.q_d * scale < r_d,
        tokens == jnp.take_along_axis(nodes.greedy, c, -1))
    res = None
  else:
    res, acc = sibling_residuals(nodes, tokens, _dense_q(q, tokens, vm), jnp.asarray(False))

  visited = _walk(nodes, acc)
  e = jnp.argmax(jnp.where(visited, depth, -1), -1).astype(jnp.int32)          # stop node
  at = lambda x: x[rows, e]
  accepted = at(depth)
  clear = ~at(nodes.dead) & ~at(nodes.unreach) & (at(nodes.pflags) == 0)
  flags = jnp.where(clear, 0, jnp.where(at(nodes.dead), FLAG_DEAD_END, jnp.where(
      at(nodes.unreach), 0, at(nodes.pflags))))

  # The one draw: from the residual left by e's rejected children, else from p_e.
  kids = par == e[:, None]                                                     # [B, T]
  if res is None:                  # p_e with the children's tokens at exactly 0
    col = jnp.where(kids & (tokens >= 0) & (tokens < vm), tokens, vm)
    r_e = at(nodes.probs).at[rows[:, None], col].set(0.0, mode="drop")
  else:
    r_e = res[rows, e]
  ok = r_e > 0                                                                 # [B, Vm]
  use_res = jnp.any(kids, -1) & jnp.any(ok, -1)
  s = nodes.s
  zt, cand = s.zt.reshape(b, t, vm)[rows, e], s.cand.reshape(b, t, vm)[rows, e]
  draw = _sampling.gumbel_argmax(
      jnp.where(use_res[:, None], jnp.log(jnp.where(ok, r_e, 1.0)), zt),
      jnp.where(use_res[:, None], ok, cand), at(nodes.key))
  final = jnp.where(nodes.sampling, draw, at(nodes.greedy))

  # Outputs: the visited nodes by depth, their tokens, then the draw where e emits.
  idx = jnp.arange(t, dtype=jnp.int32)
  path = jnp.max(jnp.where(visited[:, None, :] & (depth[:, None, :] == idx[None, :, None] + 1),
                           idx[None, None, :], -1), -1)                        # [B, T]
  out = jnp.where(path >= 0, jnp.take_along_axis(tokens, jnp.maximum(path, 0), -1), -1)
  out = jnp.where((idx[None, :] == accepted[:, None]) & clear[:, None], final[:, None], out)
  return TreeResult(accepted, path.astype(jnp.int32), out.astype(jnp.int32),
                    flags.astype(jnp.int32))
