"""Draft-model drafter: a smaller Qwen-family model sharing the target's vocabulary."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from infernix_jax.models.drafters import trees
from infernix_jax.models.drafters.base import (DenseQ, DraftContext, OneHotQ, choose,
                                               last_valid, split_keys)
from infernix_jax.models.config import ModelConfig
from infernix_jax.models.kv_cache import KVCache
from infernix_jax.models.transformer import Transformer


@functools.partial(jax.jit, static_argnames=("graphdef", "k", "temperature", "width"),
                   donate_argnames=("cache",))
def propose_draft_model(graphdef, state, cache: KVCache, tokens, counts, keys, *, k: int,
                        temperature: float, width: int):
  """Appends context tokens [B, C] (counts i32[B]) to the draft cache, then drafts K tokens.

  Returns:
    (ids i32[B, K], probs f32[B, K, width] or None when greedy, cache with lengths
    advanced by counts; the K - 1 draft positions after them are scratch).
  """
  model = nnx.merge(graphdef, state)
  hidden, cache = model(tokens, cache)  # [B, C, D]
  committed = cache.lengths + counts
  logits = model.logits(last_valid(hidden, counts))  # [B, Vm]
  step_keys = split_keys(keys, k) if temperature > 0 else jnp.zeros((k, 0))

  def step(carry, key):
    logits, c = carry
    ids, probs = choose(logits, temperature, key)
    h, c = model(ids[:, None], c)
    return (model.logits(h[:, 0]), c.with_lengths(c.lengths + 1)), (ids, probs)

  (logits, cache), (ids, probs) = jax.lax.scan(
      step, (logits, cache.with_lengths(committed)), step_keys[:k - 1])
  last_ids, last_probs = choose(logits, temperature, step_keys[k - 1])
  ids = jnp.concatenate([ids, last_ids[None]], axis=0).T  # [B, K]
  if temperature > 0:
    probs = jnp.concatenate([probs, last_probs[None]], axis=0).swapaxes(0, 1)  # [B, K, Vm]
    probs = jnp.pad(probs, ((0, 0), (0, 0), (0, width - probs.shape[-1])))
  return ids, probs, cache.with_lengths(committed)


@functools.partial(jax.jit, static_argnames=("graphdef", "n", "width", "shape"),
                   donate_argnames=("cache",))
def propose_draft_tree(graphdef, state, cache: KVCache, tokens, counts, limit, *, n: int,
                       width: int, shape: str):
  """Appends context tokens [B, C] (counts i32[B]) to the draft cache, then grows a greedy
  token tree of up to n nodes (`trees.grow`); each new node's distribution comes from one
  tree-attention forward of the draft model over the tree so far (K/V in the scratch slots
  after the committed context).

  Returns:
    (ids i32[B, n], parents i32[B, n] (-1: under the anchor), n_nodes i32[B], cache with
    lengths advanced by counts).
  """
  model = nnx.merge(graphdef, state)
  hidden, cache = model(tokens, cache)  # [B, C, D]
  committed = cache.lengths + counts

  def expand(c, ids, parents, depth, anc, j):
    h, c = model(ids, c.with_lengths(committed), tree=(depth - 1, anc))        # [B, N, D]
    return model.logits(h[:, j]), c

  ids, parents, count, cache = trees.grow(
      model.logits(last_valid(hidden, counts)), expand, cache.with_lengths(committed), limit,
      n=n, width=width, shape=shape)
  return ids, parents, count, cache.with_lengths(committed)


@dataclasses.dataclass(frozen=True)
class DraftModelDrafter:
  """Autoregressive drafting with a separate Qwen-family model.

  Greedy (temperature 0) gives one-hot q; temperature > 0 samples and returns the dense
  distribution it sampled from (DenseQ), padded to the target's logits width.

  Attributes:
    graphdef: static graph of the draft model.
    state: its parameters.
    cfg: its config.
    k: K, drafts per call.
    temperature: 0 for greedy drafting.
    target_width: Vm of the target's logits (q width); >= the draft model's Vm.
  """

  graphdef: Any
  state: Any
  cfg: ModelConfig
  k: int
  temperature: float = 0.0
  target_width: int | None = None

  @classmethod
  def from_model(cls, model: Transformer, k: int, temperature: float = 0.0,
                 target_width: int | None = None) -> "DraftModelDrafter":
    """Wraps a loaded draft model (e.g. Qwen3-0.6B for a Qwen3-8B target)."""
    graphdef, state = nnx.split(model)
    width = target_width or model.cfg.vocab_size
    if width < model.cfg.vocab_size:
      raise ValueError(f"target_width={width} is narrower than the draft model's logits "
                       f"({model.cfg.vocab_size}); the drafter must share the vocabulary")
    if k < 1:
      raise ValueError(f"{k=} must be >= 1")
    return cls(graphdef, state, model.cfg, k, float(temperature), width)

  def init_state(self, batch: int, capacity: int) -> KVCache:
    """An empty draft KV cache."""
    return KVCache.init(self.cfg, batch=batch, capacity=capacity)

  def propose_tree(self, dstate: KVCache, ctx: DraftContext, limit: jax.Array, *,
                   width: int, shape: str):
    """A greedy token tree of K nodes (`propose_draft_tree`) -> (ids i32[B, K], parents
    i32[B, K], n_nodes i32[B], cache)."""
    if self.temperature > 0:
      raise ValueError("token trees are drafted greedily (temperature 0)")
    return propose_draft_tree(self.graphdef, self.state, dstate, ctx.tokens, ctx.counts,
                              jnp.asarray(limit, jnp.int32), n=self.k, width=width,
                              shape=shape)

  def propose(self, dstate: KVCache, ctx: DraftContext, keys: jax.Array | None = None):
    """See `Drafter.propose`; ctx.hidden is ignored."""
    if self.temperature > 0 and keys is None:
      raise ValueError("a sampling draft model needs per-row keys")
    keys = keys if keys is not None else jnp.zeros((ctx.tokens.shape[0],), jnp.uint32)
    ids, probs, cache = propose_draft_model(
        self.graphdef, self.state, dstate, ctx.tokens, ctx.counts, keys, k=self.k,
        temperature=self.temperature, width=self.target_width)
    q = DenseQ(probs) if self.temperature > 0 else OneHotQ()
    return ids, q, cache
