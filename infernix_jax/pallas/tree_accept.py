"""Speculative acceptance over a token tree (SpecInfer multi-step speculative sampling).

Axis letters: B rows, T = 1 + (drafted nodes) tree positions (node 0 is the root), Vm logits
width, V vocabulary, W = ceil(V / 32) mask words, Wm = ceil(Vm / 32) padded words.

Tree layout: node t >= 1 holds a drafted token ``tokens[b, t]`` hanging off
``parents[b, t]`` in [0, t) (a parent precedes its children); node 0 is the anchor (the last
committed token; its token and parent are ignored). Nodes >= n_nodes[b] are padding, never
visited; a node whose parent is outside [0, t) hangs off nothing (never visited either).
depth(0) = 0, depth(t) = depth(parent) + 1. Position t (logits, mask, state) is the position
after node t's root path. A chain (parents[t] = t - 1) is exactly ``spec_accept``.

Randomness: the j-th visited child of a node c (j = 0, 1, ... in increasing index among c's
valid children) is accepted with the uniform ``rng.uniform(seed, position + depth(c),
purpose, counter=sibling_counter(j))``: counter ACCEPT_COUNTER - j, so j = 0 is the chain's
uniform and no counter is ever a token id (the Gumbel draws' counters). Residual and bonus
draws at c use the chain's Gumbel stream ``stream_key(seed, position + depth(c), purpose)``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

from infernix_jax.mask_layout import DEAD_END, UNREACHABLE
from infernix_jax.pallas import _sampling, _stream, rng
from infernix_jax.pallas._types import (FLAG_DEAD_END, DenseQ, OneHotQ, PURPOSE_SAMPLE,
                                        SamplingParams)
from infernix_jax.pallas.masked_sample import (BlockSizes, _gpu_params, _prepare_logits,
                                               block_words_for, pack_row_params, pad_mask,
                                               pad_vocab)
from infernix_jax.pallas.spec_accept import (_dense_q, _q_block, _q_of_draft, _q_scalar,
                                             _repeat_params)


class TreeResult(NamedTuple):
  """Result of one tree verification round per row."""
  accepted: jax.Array  # i32[B]: accepted draft nodes = depth of the last accepted node
  path: jax.Array      # i32[B, T]: accepted node indices by depth (path[:, j] at depth j + 1)
  tokens: jax.Array    # i32[B, T]: accepted nodes' tokens, then the correction or bonus
  flags: jax.Array     # i32[B]: FLAG_DEAD_END | FLAG_NONFINITE | FLAG_EMPTY


def sibling_counter(j):
  """uint32 counter of the acceptance uniform of a node's j-th visited child.

  ACCEPT_COUNTER - j: j = 0 is the chain's counter; token-id counters are < 2**31, so the
  two kinds never collide for any tree smaller than 2**31 nodes.
  """
  return np.uint32(rng.ACCEPT_COUNTER) - jnp.asarray(j).astype(jnp.uint32)


def _check(logits, mask, mask_enabled, states, tokens, parents, n_nodes, q, vocab_size):
  if logits.ndim != 3:
    raise ValueError(f"{logits.shape=} must be [B, T, Vm]")
  b, t, vm = logits.shape
  if tokens.shape != (b, t) or parents.shape != (b, t):
    raise ValueError(f"{tokens.shape=} and {parents.shape=} must both be [B={b}, T={t}] "
                     f"(node 0 is the root)")
  if not 0 < vocab_size <= vm:
    raise ValueError(f"{vocab_size=} must be in (0, Vm={vm}]")
  w = -(-vocab_size // 32)
  if mask is not None and mask.shape != (b, t, w):
    raise ValueError(f"{mask.shape=} must be [B={b}, T={t}, W={w}]")
  if mask is not None and (states is None or states.shape != (b, t)):
    raise ValueError(f"states must be int8[B={b}, T={t}] when a mask is given")
  if n_nodes.shape != (b,) or (mask_enabled is not None and mask_enabled.shape != (b,)):
    raise ValueError(f"{n_nodes.shape=} and mask_enabled must be [B={b}]")
  if isinstance(q, DenseQ) and q.probs.shape != (b, t, vm):
    raise ValueError(f"{q.probs.shape=} must be [B={b}, T={t}, Vm={vm}] (row 0 unused)")
  if not isinstance(q, (OneHotQ, DenseQ)):
    raise ValueError(f"q must be OneHotQ or DenseQ, got {type(q).__name__} (a sparse "
                     f"proposal can be scattered into a DenseQ)")
  return b, t, vm


class TreeShape(NamedTuple):
  """Structure of B trees of T nodes."""
  parent: jax.Array     # i32[B, T]: parent of each visitable node; -1 for the root, padding
                        # and nodes under a parent outside [0, t)
  ancestors: jax.Array  # bool[B, T, T]: ancestors[b, t, s]: s on t's root path (s = t and
                        # s = 0 included) for valid nodes
  depth: jax.Array      # i32[B, T]
  rank: jax.Array       # i32[B, T]: index of a node among its parent's valid children


def tree_shape(parents, n_nodes) -> TreeShape:
  """Parents i32[B, T], n_nodes i32[B] -> TreeShape (padding and orphans: no parent)."""
  b, t = parents.shape
  idx = jnp.arange(t, dtype=jnp.int32)
  n = jnp.clip(n_nodes, 1, t).astype(jnp.int32)
  ok = (idx[None, :] >= 1) & (idx[None, :] < n[:, None]) & (parents >= 0) & (
      parents < idx[None, :])
  par = jnp.where(ok, parents, -1).astype(jnp.int32)                          # [B, T]

  def body(i, anc):
    up = jnp.take_along_axis(anc, jnp.maximum(par[:, i], 0)[:, None, None], axis=1)[:, 0]
    row = jnp.where((par[:, i] >= 0)[:, None], up, False) | (idx[None, :] == i)
    return anc.at[:, i].set(row)

  root = jnp.zeros((b, t, t), bool).at[:, 0, 0].set(True)
  anc = jax.lax.fori_loop(1, t, body, root)                                    # [B, T, T]
  reached = anc[:, :, 0]                 # False under an orphan: never visited, no parent
  anc = anc & reached[:, :, None]
  par = jnp.where(reached, par, -1)
  depth = jnp.sum(anc[:, :, 1:], axis=-1).astype(jnp.int32)
  same = (par[:, :, None] == par[:, None, :]) & (par[:, :, None] >= 0)         # [B, T, T]
  rank = jnp.sum(same & (idx[None, None, :] < idx[None, :, None]), -1).astype(jnp.int32)
  return TreeShape(par, anc, depth, rank)


def penalty_prefix(tokens, shape: TreeShape):
  """i32[B, T, T-1]: the tokens of node t's root path (root excluded, t included) at their
  node columns (column s - 1 for node s), -1 elsewhere: the hypothetical history of position
  t. For a chain this is spec_accept's drafts[:i] at position i."""
  return jnp.where(shape.ancestors[:, :, 1:], tokens[:, None, 1:], -1).astype(jnp.int32)


def _prepared(logits, params, tokens, shape):
  b, t, vm = logits.shape
  rp = _repeat_params(params, t)
  extra = penalty_prefix(tokens, shape).reshape(b * t, t - 1) if t > 1 else None
  return _prepare_logits(logits.reshape(b * t, vm), rp, extra), rp


class Nodes(NamedTuple):
  """Every node's statistics, computed for all nodes at once (both tree rules read them)."""
  shape: TreeShape
  s: _sampling.Support   # [B * T] rows: the masked, processed target law at each node
  key: jax.Array         # u32[B, T]: Gumbel stream key of the draws at each node
  greedy: jax.Array      # i32[B, T]
  sampling: jax.Array    # bool[B]: temperature > 0
  probs: jax.Array       # f32[B, T, Vm]: target p at each node
  u: jax.Array           # f32[B, T]: acceptance uniform of each node (as its parent's child)
  q_d: jax.Array         # f32[B, T]: q of each node's own token
  legal_d: jax.Array     # bool[B, T]: the node's token is in [0, V)
  dead: jax.Array        # bool[B, T]: DeadEnd position of a constrained row
  unreach: jax.Array     # bool[B, T]: Unreachable position of a constrained row
  pflags: jax.Array      # i32[B, T]: FLAG_NONFINITE / FLAG_EMPTY of each position


def node_stats(logits, mask, mask_enabled, states, tokens, parents, n_nodes, q, params, seed,
               position, *, vocab_size: int, purpose: int) -> Nodes:
  """Checks the inputs and computes every node's statistics (tokens i32)."""
  b, t, vm = _check(logits, mask, mask_enabled, states, tokens, parents, n_nodes, q,
                    vocab_size)
  shape = tree_shape(parents, n_nodes)
  if mask is None:
    mask = jnp.zeros((b, t, 1), jnp.int32)
    mask_enabled, states = jnp.zeros((b,), bool), jnp.zeros((b, t), jnp.int8)
  z, rp = _prepared(logits, params, tokens, shape)
  legal = _sampling.unpack_legal(mask.reshape(b * t, -1).astype(jnp.int32),
                                 jnp.repeat(mask_enabled, t), vocab_size, vm)
  s = _sampling.support(z.astype(jnp.float32), legal, rp.temperature, rp.top_k, rp.top_p,
                        rp.min_p)
  pos = position[:, None] + shape.depth                                        # [B, T]
  key = rng.stream_key(seed[:, None], pos, purpose)                            # [B, T]
  probs = _sampling.probabilities(s, rp.temperature).reshape(b, t, vm)
  u = rng.uniform(seed[:, None], pos - 1, purpose, sibling_counter(shape.rank))  # [B, T]
  st = states.astype(jnp.int32)
  return Nodes(shape, s, key, s.greedy.reshape(b, t), params.temperature > 0, probs, u,
               _q_of_draft(q, tokens, vm), (tokens >= 0) & (tokens < vocab_size),
               mask_enabled[:, None] & (st == int(DEAD_END)),
               mask_enabled[:, None] & (st == int(UNREACHABLE)), s.flags.reshape(b, t))


def sibling_residuals(nodes: Nodes, tokens, q_dense, naive):
  """Acceptance of every node given its earlier siblings rejected (the only way it is
  tested), node by node in index order: r_0 = p_c, r_{j+1} = norm(max(r_j - q_j, 0)), kept
  unnormalised as R_j = S_j r_j with S_0 = 1 exactly, so the first child repeats the chain's
  arithmetic bit for bit. The naive rule tests every sibling against p_c and keeps the last
  rejection's residual.

  Returns:
    (res f32[B, T, Vm]: each node's residual after all its children, acc bool[B, T]).
  """
  b, t, vm = nodes.probs.shape
  par, probs, greedy, sampling = nodes.shape.parent, nodes.probs, nodes.greedy, nodes.sampling
  rows = jnp.arange(b)

  def body(i, carry):
    res, tot, acc = carry
    c = jnp.maximum(par[:, i], 0)
    child = par[:, i] >= 0
    r = jnp.where(naive, probs[rows, c], res[rows, c])
    sc = jnp.where(naive, jnp.float32(1.0), tot[rows, c])
    d = tokens[:, i]
    r_d = jnp.where(nodes.legal_d[:, i], jnp.take_along_axis(
        r, jnp.clip(d, 0, vm - 1)[:, None], -1)[:, 0], 0.0)
    ok = jnp.where(sampling, nodes.u[:, i] * nodes.q_d[:, i] * sc < r_d,
                   d == greedy[rows, c])
    new = jnp.maximum(r - sc[:, None] * q_dense[:, i], 0.0)                    # [B, Vm]
    res = res.at[rows, c].set(jnp.where(child[:, None], new, res[rows, c]))
    tot = tot.at[rows, c].set(jnp.where(child, jnp.sum(new, -1), tot[rows, c]))
    return res, tot, acc.at[:, i].set(child & ok)

  res, _, acc = jax.lax.fori_loop(
      1, t, body, (probs, jnp.ones((b, t), jnp.float32), jnp.zeros((b, t), bool)))
  return res, acc


@functools.partial(jax.jit, static_argnames=["vocab_size", "purpose"])
def _accept_reference(logits, mask, mask_enabled, states, tokens, parents, n_nodes, q, params,
                      seed, position, naive, *, vocab_size: int, purpose: int):
  """Both rules in one program (``naive`` a traced bool: one compile serves the tests of
  both; the rule is a select between two gathers, no conditional)."""
  tokens = tokens.astype(jnp.int32)
  nodes = node_stats(logits, mask, mask_enabled, states, tokens, parents, n_nodes, q, params,
                     seed, position, vocab_size=vocab_size, purpose=purpose)
  b, t, vm = nodes.probs.shape
  s, key, greedy, sampling = nodes.s, nodes.key, nodes.greedy, nodes.sampling
  draw = _sampling.gumbel_argmax(s.zt, s.cand, key.reshape(-1)).reshape(b, t)  # bonus draws
  par = nodes.shape.parent
  res, acc = sibling_residuals(nodes, tokens, _dense_q(q, tokens, vm), naive)

  # Every child rejected: a draw from the final residual (the draw from p_c if it is zero).
  ok = res > 0
  res_draw = _sampling.gumbel_argmax(jnp.log(jnp.where(ok, res, 1.0)).reshape(b * t, vm),
                                     ok.reshape(b * t, vm), key.reshape(-1)).reshape(b, t)
  idx = jnp.arange(t, dtype=jnp.int32)
  is_child = par[:, None, :] == idx[None, :, None]                             # [B, c, t]
  has_child = jnp.any(is_child, -1)
  final = jnp.where(sampling[:, None],
                    jnp.where(has_child & (res_draw >= 0), res_draw, draw), greedy)
  nxt = jnp.min(jnp.where(is_child & acc[:, None, :], idx[None, None, :], t), -1)
  nxt = jnp.where(nxt < t, nxt, -1)                                            # [B, T]

  # Walk from the root along the accepted children.
  dead, unreach, pflags = nodes.dead, nodes.unreach, nodes.pflags
  at = lambda x, c: jnp.take_along_axis(x, c[:, None], -1)[:, 0]

  def walk(_, carry):
    c, depth, done, path, out, flags = carry
    stop = at(dead, c) | at(unreach, c) | (at(pflags, c) != 0)
    nx = at(nxt, c)
    move = ~done & ~stop & (nx >= 0)
    emit = ~done & ~stop & (nx < 0)
    here = idx[None, :] == depth[:, None]
    path = jnp.where(move[:, None] & here, nx[:, None], path)
    tok = jnp.where(move, at(tokens, jnp.maximum(nx, 0)), at(final, c))
    out = jnp.where((move | emit)[:, None] & here, tok[:, None], out)
    flags = jnp.where(~done & stop, jnp.where(at(dead, c), FLAG_DEAD_END, jnp.where(
        at(unreach, c), 0, at(pflags, c))), flags)
    return (jnp.where(move, nx, c), depth + move, done | ~move, path, out, flags)

  minus = jnp.full((b, t), -1, jnp.int32)
  zero = jnp.zeros((b,), jnp.int32)
  _, depth, _, path, out, flags = jax.lax.fori_loop(
      0, t, walk, (zero, zero, jnp.zeros((b,), bool), minus, minus, zero))
  return TreeResult(depth, path, out, flags.astype(jnp.int32))


def tree_accept_reference(logits, mask, mask_enabled, states, tokens, parents, n_nodes, q,
                          params: SamplingParams, seed, position, *, vocab_size: int,
                          purpose: int = PURPOSE_SAMPLE) -> TreeResult:
  """Speculative acceptance over a token tree in plain jnp (jitted; the production path off
  GPU).

  Multi-step speculative sampling of Miao et al., "SpecInfer: Accelerating Generative LLM
  Serving with Tree-based Speculative Inference and Verification" (arXiv 2305.09781), which
  reduces to the rejection sampling of Leviathan et al. (arXiv 2211.17192) on a chain. The
  target p at node t is spec_accept's (DESIGN.md section 5) with the hypothetical history =
  the tokens of t's root path. From c = root: a DeadEnd position sets FLAG_DEAD_END, an
  Unreachable one (after an accepted EOS) ends the row, a flagged one (non-finite, empty)
  sets its flag, each with no token. Otherwise, at temperature > 0, with r = p_c, the valid
  children u of c are visited in increasing index: u is accepted with probability
  min(1, r(d_u) / q_u(d_u)) (then c = u, next level), else r = norm(max(r - q_u, 0)); when
  all are rejected the correction is drawn from r (from p_c if r is zero), and a leaf's
  bonus from p_c. An illegal node has p = 0 and is rejected with its real q. At temperature
  0 the first child whose token is the masked argmax x is accepted, else x is emitted. The
  output law is p's, provided each child's token was drawn from its q independently of its
  siblings.

  Args:
    logits: [B, T, Vm] target logits (f32 or bf16) at each node's position.
    mask: i32[B, T, W] packed legal sets, or None when no row is constrained.
    mask_enabled: bool[B]; False rows are unconstrained (mask and states ignored).
    states: int8[B, T] mask_layout states (READY, DEAD_END, UNREACHABLE).
    tokens: i32[B, T] drafted tokens (column 0 ignored); parents: i32[B, T] (column 0
      ignored); n_nodes: i32[B] valid nodes (>= 1, the root included).
    q: OneHotQ() or DenseQ(probs [B, T, Vm]): the law node t's token was drawn from (row 0
      unused).
    params: SamplingParams with leading axis B.
    seed: u32[B]; position: i32[B] logical position of the first produced token.
    vocab_size: V. purpose: stream of the token draws (see the module docstring).

  Returns:
    TreeResult(accepted i32[B], path i32[B, T], tokens i32[B, T], flags i32[B]).
  """
  return _accept_reference(logits, mask, mask_enabled, states, tokens, parents, n_nodes, q,
                           params, seed, position, jnp.asarray(False), vocab_size=vocab_size,
                           purpose=purpose)


def tree_accept_naive_reference(logits, mask, mask_enabled, states, tokens, parents, n_nodes,
                                q, params: SamplingParams, seed, position, *, vocab_size: int,
                                purpose: int = PURPOSE_SAMPLE) -> TreeResult:
  """A WRONG tree rule, kept for tests and studies: no residual update between siblings.

  Each child of c is tested against the unchanged p_c (min(1, p_c(d) / q(d))); when all are
  rejected the draw comes from norm(max(p_c - q_last, 0)) (p_c if zero). Its output law is
  not p as soon as a node has two sampled children. Same arguments as
  ``tree_accept_reference``.
  """
  return _accept_reference(logits, mask, mask_enabled, states, tokens, parents, n_nodes, q,
                           params, seed, position, jnp.asarray(True), vocab_size=vocab_size,
                           purpose=purpose)


def _kernel(*refs, vocab_size: int, block_words: int, purpose: int, q_kind: str,
            has_mask: bool, nodes: int, lanes: int):
  """One program per row; walks the tree from the root, streaming each node's vocabulary.

  Refs, in order: logits [T, Wm, 32]; mask [T, Wm] and states [T] (if has_mask); tokens [T];
  parents [T] (-1: no parent); q probs [T, Wm, 32] (dense only); fp [4] f32 (temperature,
  top_p, min_p, -); ip [8] i32 (top_k, enabled, seed bits, position, n_nodes, -, -, -);
  out [O] i32 (path at 0..T-1, tokens at T..2T-1, accepted at 2T, flags at 2T+1). The
  residual after j rejected siblings is recomputed per block from p_c, the siblings' q and
  their scales S_i (the siblings and scales live in vectors of ``lanes`` >= T - 1 entries).
  """
  refs = list(refs)
  logits_ref = refs.pop(0)
  mask_ref, states_ref = (refs.pop(0), refs.pop(0)) if has_mask else (None, None)
  tokens_ref, parents_ref = refs.pop(0), refs.pop(0)
  q_refs = [refs.pop(0) for _ in range({"onehot": 0, "dense": 1}[q_kind])]
  fp_ref, ip_ref, out_ref = refs
  temperature, top_p, min_p = fp_ref[0], fp_ref[1], fp_ref[2]
  top_k, enabled, seed, position, n = ip_ref[0], ip_ref[1] != 0, ip_ref[2], ip_ref[3], ip_ref[4]
  seed = jax.lax.bitcast_convert_type(seed, jnp.uint32)
  words = logits_ref.shape[-2]
  # Traced constants: the Triton lowering cannot yield bare literals out of cond/while.
  zero = n - n
  one = zero + 1
  fzero = zero.astype(jnp.float32)
  positive = temperature > 0
  inv_t = jnp.where(positive, 1.0 / jnp.where(positive, temperature, 1.0), 1.0)
  lane = jax.lax.broadcasted_iota(jnp.int32, (lanes,), 0)
  pick = lambda vec, i: jnp.sum(jnp.where(lane == i, vec, 0))
  for i in range(2 * nodes):
    out_ref[i] = zero - 1

  def level(carry):
    c, depth, flags, _ = carry
    row = _stream.Row(logits_ref, mask_ref, (c,), enabled, vocab_size, words, block_words)
    key = rng.stream_key(seed, position + depth, purpose)
    state = states_ref[c] if has_mask else zero
    dead = enabled & (state == int(DEAD_END))
    unreach = enabled & (state == int(UNREACHABLE))

    def verify(st, pflags):
      sampling = positive                      # flagged positions stopped in checked()
      th = _stream.thresholds(row, st, sampling, inv_t, top_k, top_p, min_p)
      total, draw = jax.lax.cond(sampling, lambda: _stream.support_draw(row, th, key),
                                 lambda: (fzero, zero - 1))
      norm = jnp.maximum(total, 1e-38)

      def residual(b: _stream.Block, m, scales, sibs):
        """R_m over block b: p_c minus the first m rejected siblings' scaled q."""
        _, w = _stream.in_support(b, th)

        def sub(i, r):
          s_i = pick(scales, i)
          return jnp.maximum(r - s_i * _q_block(q_kind, q_refs, pick(sibs, i),
                                                tokens_ref[pick(sibs, i)], b), 0.0)

        return jax.lax.fori_loop(0, m, sub, w / norm)

      def scan_body(s):
        t, j, nxt, scales, sibs = s

        def test():
          d = tokens_ref[t]

          def first():
            dblk = _stream.load_one(row, d)
            _, w_d = _stream.in_support(dblk, th)
            return jnp.where(dblk.legal, w_d / norm, 0.0), one.astype(jnp.float32)

          def later():   # one pass: S_j = sum R_j and R_j(d)
            def fn(b, acc):
              r = residual(b, j, scales, sibs)
              return acc[0] + jnp.sum(jnp.where(b.ids == d, r, 0.0)), acc[1] + jnp.sum(r)
            return _stream.fold(row, fn, (fzero, fzero))

          r_d, s_j = jax.lax.cond(sampling & (j > 0), later, first)
          q_d = _q_scalar(q_kind, q_refs, t, d, words)
          u = rng.uniform(seed, position + depth, purpose, sibling_counter(j))
          ok = jnp.where(sampling, u * q_d * s_j < r_d, d == st.greedy)
          return (jnp.where(ok, t, nxt), j + 1, jnp.where(lane == j, s_j, scales),
                  jnp.where(lane == j, t, sibs))

        nxt, j, scales, sibs = jax.lax.cond(parents_ref[t] == c, test,
                                            lambda: (nxt, j, scales, sibs))
        return t + 1, j, nxt, scales, sibs

      _, m, nxt, scales, sibs = jax.lax.while_loop(
          lambda s: (s[0] < n) & (s[2] < 0), scan_body,
          (c + 1, zero, zero - 1, jnp.zeros((lanes,), jnp.float32), lane * 0))

      def move():
        out_ref[depth] = nxt
        out_ref[nodes + depth] = tokens_ref[nxt]
        return nxt, depth + 1, zero

      def emit():
        def residual_draw():
          def fn(b, best):
            r = residual(b, m, scales, sibs)
            ok = r > 0
            score = jnp.log(jnp.where(ok, r, 1.0)) + _stream.gumbel_block(b, key)
            return _stream._merge_max(best, _stream._first_max(score, ok, b.ids))
          best = _stream.fold(row, fn, (_stream.F32_NEG_INF + fzero, _sampling.INT_MAX + zero))
          return jnp.where(best[1] == _sampling.INT_MAX, draw, best[1])

        tok = jax.lax.cond(sampling & (m > 0), residual_draw,
                           lambda: jnp.where(sampling, draw, st.greedy))
        out_ref[nodes + depth] = tok
        return c, depth, one

      c2, d2, done = jax.lax.cond(nxt >= 0, move, emit)
      return c2, d2, done, pflags

    def checked():
      st = _stream.stats(row, key, inv_t)
      pflags = _stream.row_flags(st)
      return jax.lax.cond(pflags != 0, lambda: (c, depth, one, pflags),
                          lambda: verify(st, pflags))

    c2, d2, done, pflags = jax.lax.cond(dead | unreach, lambda: (c, depth, one, zero), checked)
    flags = flags | jnp.where(dead, jnp.int32(FLAG_DEAD_END), pflags)
    return c2, d2, flags, done

  _, accepted, flags, _ = jax.lax.while_loop(
      lambda s: s[3] == 0, level, (zero, zero, zero, zero))
  out_ref[2 * nodes] = accepted
  out_ref[2 * nodes + 1] = flags


@functools.partial(jax.jit, static_argnames=["vocab_size", "purpose", "block", "interpret",
                                             "debug"])
def tree_accept_kernel(logits, mask, mask_enabled, states, tokens, parents, n_nodes, q,
                       params: SamplingParams, seed, position, *, vocab_size: int,
                       purpose: int = PURPOSE_SAMPLE, block: BlockSizes | None = None,
                       interpret: bool = False, debug: bool = False) -> TreeResult:
  """Pallas kernel path of ``tree_accept`` (same arguments and results)."""
  b, t, vm = _check(logits, mask, mask_enabled, states, tokens, parents, n_nodes, q,
                    vocab_size)
  block = block or BlockSizes.get_default()
  tokens = tokens.astype(jnp.int32)
  shape = tree_shape(parents, n_nodes)
  z, _ = _prepared(logits, params, tokens, shape)
  z = pad_vocab(z, -jnp.inf)
  wm = z.shape[-1] // 32
  z = z.reshape(b, t, wm, 32)                                                  # [B, T, Wm, 32]
  enabled = jnp.zeros((b,), bool) if mask_enabled is None or mask is None else mask_enabled
  fp, ip4 = pack_row_params(params, enabled, seed, position)
  ip = jnp.concatenate([ip4, jnp.clip(n_nodes, 1, t).astype(jnp.int32)[:, None],
                        jnp.zeros((b, 3), jnp.int32)], axis=-1)                # [B, 8]
  args = [z]
  specs = [pl.BlockSpec((None, t, wm, 32), lambda r: (r, 0, 0, 0))]
  if mask is not None:
    args += [pad_mask(mask.astype(jnp.int32), wm), states.astype(jnp.int32)]
    specs += [pl.BlockSpec((None, t, wm), lambda r: (r, 0, 0)),
              pl.BlockSpec((None, t), lambda r: (r, 0))]
  args += [tokens, shape.parent]
  specs += [pl.BlockSpec((None, t), lambda r: (r, 0))] * 2
  if isinstance(q, DenseQ):
    args.append(pad_vocab(q.probs, 0.0).reshape(b, t, wm, 32))
    specs.append(pl.BlockSpec((None, t, wm, 32), lambda r: (r, 0, 0, 0)))
    kind = "dense"
  else:
    kind = "onehot"
  args += [fp, ip]
  specs += [pl.BlockSpec((None, 4), lambda r: (r, 0)), pl.BlockSpec((None, 8), lambda r: (r, 0))]
  width = 1 << (2 * t + 1).bit_length()                                      # >= 2T + 2
  kernel = functools.partial(_kernel, vocab_size=vocab_size,
                             block_words=block_words_for(wm, block), purpose=purpose,
                             q_kind=kind, has_mask=mask is not None, nodes=t,
                             lanes=1 << max(t - 1, 1).bit_length())
  out = pl.pallas_call(
      kernel,
      grid=(b,),
      in_specs=specs,
      out_specs=pl.BlockSpec((None, width), lambda r: (r, 0)),
      out_shape=jax.ShapeDtypeStruct((b, width), jnp.int32),
      compiler_params=_gpu_params(block),
      interpret=interpret,
      debug=debug,
      name="tree_accept",
  )(*args)
  return TreeResult(out[:, 2 * t], out[:, :t], out[:, t:2 * t], out[:, 2 * t + 1])
