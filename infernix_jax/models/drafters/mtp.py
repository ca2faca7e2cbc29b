"""Multi-token-prediction head (DeepSeek-V3 style) as a greedy drafter.

One step: u = W [RMSNorm(h); RMSNorm(Emb(x))] fuses the target's hidden state h that
predicted token x with x's embedding; one causal decoder layer (with its own KV cache)
turns u into g; the target's LM head over RMSNorm(g) predicts the token after x. Drafting
chains it: (g, argmax) feeds the next step. Axis letters: B rows, C context, K drafts, D.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from infernix_jax.models import layers
from infernix_jax.models.config import ModelConfig
from infernix_jax.models.drafters import trees
from infernix_jax.models.drafters.base import DraftContext, OneHotQ, TargetHead, last_valid
from infernix_jax.models.kv_cache import KVCache
from infernix_jax.models.transformer import DecoderLayers, cached_layers, init_param


class MTPHead(nnx.Module):
  """Parameters of one MTP module: two input norms, the fusing projection, one layer.

  `cfg` gives the layer's dimensions; its `dim` must equal the target's D (the
  embedding and LM head are the target's) and `num_layers` is ignored (always 1).
  """

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg.replace(num_layers=1)
    d, dtype = cfg.dim, cfg.jnp_dtype
    self.hidden_norm = nnx.Param(jnp.ones((d,), dtype))
    self.embed_norm = nnx.Param(jnp.ones((d,), dtype))
    self.proj = nnx.Param(init_param("proj", (2 * d, d), dtype, rngs.params()))  # [2D, D]
    self.layers = DecoderLayers(self.cfg, 1, rngs=rngs)
    self.final_norm = nnx.Param(jnp.ones((d,), dtype))

  def __call__(self, hidden: jax.Array, tokens: jax.Array, head: TargetHead, cache: KVCache,
               tree=None):
    """hidden [B, T, D] (state that predicted tokens), tokens [B, T] -> g [B, T, D], cache;
    `tree` = (depth, ancestors): the tokens are a token tree's nodes (tree attention)."""
    eps = self.cfg.norm_eps
    emb = jnp.take(head.embed, tokens, axis=0).astype(hidden.dtype)
    fused = jnp.concatenate([layers.rms_norm(hidden, self.hidden_norm[...], eps),
                             layers.rms_norm(emb, self.embed_norm[...], eps)], axis=-1)
    x = fused @ self.proj[...]  # [B, T, D]
    x, k, v = cached_layers(self.cfg, self.layers.params(), x, cache.k, cache.v,
                            cache.lengths, tree=tree)
    return x, KVCache(k=k, v=v, lengths=cache.lengths)

  def logits(self, g: jax.Array, head: TargetHead) -> jax.Array:
    """g [..., D] -> f32 logits [..., Vm] through the target's LM head."""
    return head.logits(layers.rms_norm(g, self.final_norm[...], self.cfg.norm_eps))


@functools.partial(jax.jit, static_argnames=("graphdef", "k"), donate_argnames=("cache",))
def propose_mtp(graphdef, state, head: TargetHead, cache: KVCache, ctx: DraftContext,
                forced=None, n_forced=None, *, k: int):
  """Appends the context pairs to the MTP cache, then chains K greedy steps.

  forced i32[B, K], n_forced i32[B]: tokens the grammar forces next (jump-forward): the
  first n_forced[b] drafts are those tokens and the chain continues after them,
  conditioned on them (None: nothing forced).

  Returns:
    (ids i32[B, K], cache with lengths advanced by ctx.counts).
  """
  mtp = nnx.merge(graphdef, state)
  g, cache = mtp(ctx.hidden.astype(mtp.cfg.jnp_dtype), ctx.tokens, head, cache)
  committed = cache.lengths + ctx.counts
  g = last_valid(g, ctx.counts)  # [B, D]
  if forced is None:
    forced = jnp.zeros((g.shape[0], k), jnp.int32)
    n_forced = jnp.zeros((g.shape[0],), jnp.int32)

  def pick(g, i):
    best = jnp.argmax(mtp.logits(g, head), axis=-1).astype(jnp.int32)
    return jnp.where(i < n_forced, forced[:, i], best)

  first = pick(g, 0)

  def step(carry, i):
    g, token, c = carry
    out, c = mtp(g[:, None], token[:, None], head, c)
    g = out[:, 0]
    nxt = pick(g, i)
    return (g, nxt, c.with_lengths(c.lengths + 1)), nxt

  (_, _, cache), rest = jax.lax.scan(step, (g, first, cache.with_lengths(committed)),
                                     jnp.arange(1, k))
  ids = jnp.concatenate([first[None], rest], axis=0).T  # [B, K]
  return ids, cache.with_lengths(committed)


@functools.partial(jax.jit, static_argnames=("graphdef", "k", "width", "shape"),
                   donate_argnames=("cache",))
def propose_mtp_tree(graphdef, state, head: TargetHead, cache: KVCache, ctx: DraftContext,
                     limit, *, k: int, width: int, shape: str):
  """Appends the context pairs to the MTP cache, then grows a greedy token tree of up to K
  nodes (`trees.grow`): a node's state g comes from the head over (its parent's g, its
  token), one tree-attention call over the tree so far, as the chain's steps do one by one.

  Returns:
    (ids i32[B, K], parents i32[B, K], n_nodes i32[B], cache with lengths advanced by
    ctx.counts).
  """
  mtp = nnx.merge(graphdef, state)
  g, cache = mtp(ctx.hidden.astype(mtp.cfg.jnp_dtype), ctx.tokens, head, cache)
  committed = cache.lengths + ctx.counts
  root = last_valid(g, ctx.counts)  # [B, D]
  b, d = root.shape
  rows = jnp.arange(b)[:, None]

  def expand(c, ids, parents, depth, anc, j):
    cache, gs = c
    up = jnp.where((parents >= 0)[..., None], gs[rows, jnp.maximum(parents, 0)],
                   root[:, None])                                              # [B, K, D]
    out, cache = mtp(up, ids, head, cache.with_lengths(committed), tree=(depth - 1, anc))
    return mtp.logits(out[:, j], head), (cache, out)

  carry = (cache.with_lengths(committed), jnp.zeros((b, k, d), root.dtype))
  ids, parents, count, (cache, _) = trees.grow(mtp.logits(root, head), expand, carry, limit,
                                               n=k, width=width, shape=shape)
  return ids, parents, count, cache.with_lengths(committed)


@dataclasses.dataclass(frozen=True)
class MTPDrafter:
  """Greedy MTP drafting (q one-hot).

  Attributes:
    graphdef: static graph of the `MTPHead`.
    state: its parameters.
    head: the target's embedding and LM head.
    cfg: the head's layer config.
    k: K, drafts per call.
  """

  graphdef: Any
  state: Any
  head: TargetHead
  cfg: ModelConfig
  k: int

  @classmethod
  def create(cls, mtp: MTPHead, head: TargetHead, k: int) -> "MTPDrafter":
    """Wraps MTP weights (random, or restored with `models.restore_params`)."""
    if head.embed.shape[1] != mtp.cfg.dim:
      raise ValueError(f"MTP width {mtp.cfg.dim} must equal the target's {head.embed.shape[1]}")
    graphdef, state = nnx.split(mtp)
    return cls(graphdef, state, head, mtp.cfg, k)

  def init_state(self, batch: int, capacity: int) -> KVCache:
    """An empty one-layer KV cache."""
    return KVCache.init(self.cfg, batch=batch, capacity=capacity)

  def propose_tree(self, dstate: KVCache, ctx: DraftContext, limit, *, width: int,
                   shape: str):
    """A greedy token tree of K nodes (`propose_mtp_tree`) -> (ids, parents, n_nodes,
    cache)."""
    return propose_mtp_tree(self.graphdef, self.state, self.head, dstate, ctx,
                            jnp.asarray(limit, jnp.int32), k=self.k, width=width,
                            shape=shape)

  conditions_on_forced = True  # propose takes jump-forward's forced tokens

  def propose(self, dstate: KVCache, ctx: DraftContext, keys: jax.Array | None = None,
              forced=None, n_forced=None):
    """See `Drafter.propose`; keys are unused (greedy); forced / n_forced as in
    `propose_mtp` (the chain drafts after the forced prefix)."""
    del keys
    ids, cache = propose_mtp(self.graphdef, self.state, self.head, dstate, ctx, forced,
                             n_forced, k=self.k)
    return ids, OneHotQ(), cache
