"""DFlash-style block drafter: one forward proposes K tokens from target hidden features.

The block is [anchor, MASK x K] at positions Lc .. Lc + K (Lc = context length). Every
drafter layer attends, bidirectionally inside the block, over the block and over context
keys/values computed from the target's hidden features (projected by `fc`, normed, then by
that layer's own k/v projections; cached across calls). Positions 1..K read out through
the target's LM head. Greedy gives one-hot q; the sparse variant (DFlash2 style) samples
from its top-16 candidates per position and returns them as SparseQ.

Axis letters: B rows, C context entries, T = K + 1 block positions, S cache capacity,
F feature width, D width, Vm logits width.
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
from infernix_jax.models.drafters.base import (DraftContext, OneHotQ, SparseQ, TargetHead,
                                               choose_sparse, last_valid, split_keys)
from infernix_jax.models.kv_cache import KVCache
from infernix_jax.models.transformer import DecoderLayers, init_param


class DFlashNet(nnx.Module):
  """Block drafter weights.

  Args:
    cfg: drafter layer dims (`dim` = target D, `num_layers` = drafter depth).
    feature_dim: F, width of the target features in `DraftContext.hidden` (D for the last
      layer; several tapped layers concatenated give a multiple).
  """

  def __init__(self, cfg: ModelConfig, feature_dim: int, *, rngs: nnx.Rngs):
    self.cfg = cfg
    d, dtype = cfg.dim, cfg.jnp_dtype
    self.fc = nnx.Param(init_param("fc", (feature_dim, d), dtype, rngs.params()))  # [F, D]
    self.feature_norm = nnx.Param(jnp.ones((d,), dtype))
    self.mask_embed = nnx.Param(init_param("mask_embed", (d,), dtype, rngs.params()))
    self.layers = DecoderLayers(cfg, cfg.num_layers, rngs=rngs)
    self.final_norm = nnx.Param(jnp.ones((d,), dtype))

  def __call__(self, features, counts, anchors, head: TargetHead, cache: KVCache, k: int):
    """`block`, then the final norm and the target's LM head: (logits f32[B, K, Vm] for
    block positions 1..K, cache with lengths + counts)."""
    x, cache = self.block(features, counts, anchors, head, cache, k)
    return head.logits(layers.rms_norm(x, self.final_norm[...], self.cfg.norm_eps)), cache

  def block(self, features, counts, anchors, head: TargetHead, cache: KVCache, k: int):
    """Appends context features and runs one block.

    Args:
      features: [B, C, F] target features of the new context entries.
      counts: i32[B] valid entries.
      anchors: i32[B] the anchor token of each row.
      head: the target's embedding / LM head.
      cache: context keys/values [L, B, S, K, H]; lengths = context entries so far.
      k: K.

    Returns:
      (hidden [B, K, D] of block positions 1..K before the final norm, cache with
      lengths + counts).
    """
    cfg = self.cfg
    b, c, _ = features.shape
    feats = layers.rms_norm(features.astype(cfg.jnp_dtype) @ self.fc[...],
                             self.feature_norm[...], cfg.norm_eps)  # [B, C, D]
    starts = cache.lengths
    committed = starts + counts
    ctx_pos = starts[:, None] + jnp.arange(c, dtype=jnp.int32)  # [B, C]
    blk_pos = committed[:, None] + jnp.arange(k + 1, dtype=jnp.int32)  # [B, T]
    cos_c, sin_c = layers.rope_tables(ctx_pos, cfg.head_dim, cfg.rope_theta)
    cos_b, sin_b = layers.rope_tables(blk_pos, cfg.head_dim, cfg.rope_theta)
    anchor_emb = jnp.take(head.embed, anchors, axis=0).astype(cfg.jnp_dtype)  # [B, D]
    x = jnp.concatenate([anchor_emb[:, None],
                         jnp.broadcast_to(self.mask_embed[...], (b, k, cfg.dim))], axis=1)
    s = cache.capacity
    ctx_mask = jnp.arange(s, dtype=jnp.int32)[None, :] < committed[:, None]  # [B, S]
    mask = jnp.concatenate([jnp.broadcast_to(ctx_mask[:, None], (b, k + 1, s)),
                            jnp.ones((b, k + 1, k + 1), bool)], axis=-1)  # [B, T, S + T]
    rows = jnp.arange(b, dtype=jnp.int32)[:, None]

    def body(carry, xs):
      x, ck, cv = carry
      p, layer = xs
      _, kc, vc = layers.project_qkv(cfg, p, feats, cos_c, sin_c)
      ck = ck.at[layer, rows, ctx_pos].set(kc.astype(ck.dtype), mode="drop")
      cv = cv.at[layer, rows, ctx_pos].set(vc.astype(cv.dtype), mode="drop")
      h = layers.rms_norm(x, p["attn_norm"], cfg.norm_eps)
      q, kb, vb = layers.project_qkv(cfg, p, h, cos_b, sin_b)
      keys = jnp.concatenate([ck[layer].astype(kb.dtype), kb], axis=1)  # [B, S + T, K, H]
      values = jnp.concatenate([cv[layer].astype(vb.dtype), vb], axis=1)
      x = x + layers.attn_out(cfg, p, layers.attention(q, keys, values, mask))
      x = x + layers.mlp(cfg, p, x)
      return (x, ck, cv), None

    layer_ids = jnp.arange(cfg.num_layers, dtype=jnp.int32)
    (x, ck, cv), _ = jax.lax.scan(body, (x, cache.k, cache.v),
                                  (self.layers.params(), layer_ids))
    return x[:, 1:], KVCache(k=ck, v=cv, lengths=committed)  # [B, K, D]


@functools.partial(jax.jit, static_argnames=("graphdef", "k", "sparse", "temperature"),
                   donate_argnames=("cache",))
def propose_dflash(graphdef, state, head: TargetHead, cache: KVCache, ctx: DraftContext,
                   keys, *, k: int, sparse: bool, temperature: float):
  """One block forward. Returns (ids i32[B, K], cand_ids, cand_probs or None, cache)."""
  net = nnx.merge(graphdef, state)
  anchors = last_valid(ctx.tokens, ctx.counts)
  logits, cache = net(ctx.hidden, ctx.counts, anchors, head, cache, k)  # [B, K, Vm]
  if not sparse:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32), None, None, cache
  ids, cand_ids, cand_probs = jax.vmap(
      lambda lg, key: choose_sparse(lg, temperature, key), in_axes=(1, 0), out_axes=1)(
          logits, split_keys(keys, k))
  return ids, cand_ids, cand_probs, cache


@functools.partial(jax.jit, static_argnames=("graphdef", "k", "width", "shape"),
                   donate_argnames=("cache",))
def propose_dflash_tree(graphdef, state, head: TargetHead, cache: KVCache, ctx: DraftContext,
                        limit, *, k: int, width: int, shape: str):
  """One block forward, then a greedy tree of up to K nodes from its K per-position
  distributions (`trees.grow`; a node at depth d takes its children from position d, as
  Medusa trees do). Returns (ids i32[B, K], parents i32[B, K], n_nodes i32[B], cache)."""
  net = nnx.merge(graphdef, state)
  anchors = last_valid(ctx.tokens, ctx.counts)
  logits, cache = net(ctx.hidden, ctx.counts, anchors, head, cache, k)  # [B, K, Vm]
  rows = jnp.arange(logits.shape[0])

  def expand(c, ids, parents, depth, anc, j):  # a node at depth d: position d's top-w
    return logits[rows, jnp.minimum(depth[:, j], k - 1)], c

  ids, parents, count, _ = trees.grow(logits[:, 0], expand, (), limit, n=k, width=width,
                                      shape=shape)
  return ids, parents, jnp.minimum(count, k), cache


@dataclasses.dataclass(frozen=True)
class DFlashDrafter:
  """Block drafter; `sparse=True` is the DFlash2-style variant with top-16 sparse q.

  Attributes:
    graphdef: static graph of the `DFlashNet`.
    state: its parameters.
    head: the target's embedding and LM head.
    cfg: the drafter's layer config.
    k: K, block size (drafts per call).
    sparse: False: greedy, OneHotQ. True: sample from the top-16 at `temperature`, SparseQ.
    temperature: temperature of the sparse proposal.
  """

  graphdef: Any
  state: Any
  head: TargetHead
  cfg: ModelConfig
  k: int
  sparse: bool = False
  temperature: float = 1.0

  @classmethod
  def create(cls, net: DFlashNet, head: TargetHead, k: int, sparse: bool = False,
             temperature: float = 1.0) -> "DFlashDrafter":
    """Wraps block-drafter weights (random, or restored with `models.restore_params`)."""
    if head.embed.shape[1] != net.cfg.dim:
      raise ValueError(f"drafter width {net.cfg.dim} must equal the target's "
                       f"{head.embed.shape[1]} (it shares the target's embedding and head)")
    if sparse and temperature <= 0:
      raise ValueError(f"{temperature=} must be > 0 for the sparse variant")
    graphdef, state = nnx.split(net)
    return cls(graphdef, state, head, net.cfg, k, sparse, float(temperature))

  def init_state(self, batch: int, capacity: int) -> KVCache:
    """An empty context cache (one K/V per drafter layer and context entry)."""
    return KVCache.init(self.cfg, batch=batch, capacity=capacity)

  def propose_tree(self, dstate: KVCache, ctx: DraftContext, limit, *, width: int,
                   shape: str):
    """A greedy token tree of K nodes from one block call (`propose_dflash_tree`) -> (ids,
    parents, n_nodes, cache)."""
    if self.sparse:
      raise ValueError("token trees are drafted greedily (the sparse variant samples)")
    return propose_dflash_tree(self.graphdef, self.state, self.head, dstate, ctx,
                               jnp.asarray(limit, jnp.int32), k=self.k, width=width,
                               shape=shape)

  def propose(self, dstate: KVCache, ctx: DraftContext, keys: jax.Array | None = None):
    """See `Drafter.propose`; keys are needed by the sparse variant only."""
    if self.sparse and keys is None:
      raise ValueError("the sparse DFlash drafter samples; pass per-row keys")
    keys = keys if keys is not None else jnp.zeros((ctx.tokens.shape[0],), jnp.uint32)
    ids, cand_ids, cand_probs, cache = propose_dflash(
        self.graphdef, self.state, self.head, dstate, ctx, keys, k=self.k,
        sparse=self.sparse, temperature=self.temperature)
    q = SparseQ(ids=cand_ids, probs=cand_probs) if self.sparse else OneHotQ()
    return ids, q, cache
