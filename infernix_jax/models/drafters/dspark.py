"""DSpark-style drafter: a DFlash block backbone with a small sequential head.

The backbone (`DFlashNet.block`) runs the block [anchor, MASK x K] once over the target's
context features and gives one hidden state h_i per draft position i = 1..K. The head then
drafts the positions in order, each conditioned on the token drafted before it:

  e_i      = RMSNorm(Emb(t_{i-1}))           t_0 = the anchor, t_{i-1} = draft i - 1
  [g; u]   = [RMSNorm(h_i); e_i] @ W_in      W_in [2D, 2R]
  o_i      = h_i + (silu(g) * u) @ W_out     W_out [R, D]
  logits_i = LM_head(RMSNorm(o_i))           (the target's head, through the final norm)

so one block forward plus K tiny gated-MLP steps (a `lax.scan` on the device) make the K
drafts. Because position i is scored only after t_{i-1} is known, a grammar mask can apply to
its logits before it is drafted (`DraftMasks`): greedy drafting takes the argmax of the
masked logits (q one-hot), sampled drafting draws from the top-16 of the masked, tempered
and renormalized law and returns exactly that law as q (SparseQ). Behind jump-forward the
head conditions on the forced tokens (they become t_{i-1} of the positions after them).
Training teacher-forces the head: t_{i-1} is the sequence's own token (`train.objectives`).

Axis letters: B rows, K drafts, D width, R head width (= D), W mask words, Vm logits width,
N tree nodes (= K).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import nnx

from infernix_jax.models import layers
from infernix_jax.models.config import ModelConfig
from infernix_jax.models.drafters import trees
from infernix_jax.models.drafters.base import (DraftContext, OneHotQ, SparseQ, TargetHead,
                                               choose_sparse, last_valid, split_keys)
from infernix_jax.models.drafters.dflash import DFlashNet
from infernix_jax.models.kv_cache import KVCache
from infernix_jax.models.transformer import init_param

HEAD_PARAMS = ("hidden_norm", "embed_norm", "head_in", "head_out", "final_norm")


class DSparkNet(DFlashNet):
  """Block backbone (`DFlashNet`'s parameters) plus the sequential head's.

  Args:
    cfg: backbone layer dims (`dim` = target D, `num_layers` = backbone depth).
    feature_dim: F, width of the target features (as `DFlashNet`).
  """

  def __init__(self, cfg: ModelConfig, feature_dim: int, *, rngs: nnx.Rngs):
    super().__init__(cfg, feature_dim, rngs=rngs)
    d, dtype = cfg.dim, cfg.jnp_dtype
    self.hidden_norm = nnx.Param(jnp.ones((d,), dtype))
    self.embed_norm = nnx.Param(jnp.ones((d,), dtype))
    self.head_in = nnx.Param(init_param("head_in", (2 * d, 2 * d), dtype,
                                        rngs.params()))  # [2D, 2R]
    self.head_out = nnx.Param(init_param("head_out", (d, d), dtype, rngs.params()))  # [R, D]

  def head_params(self) -> dict:
    """The head's arrays by name (what `head_logits` reads)."""
    return {name: getattr(self, name)[...] for name in HEAD_PARAMS}


def head_logits(params, cfg: ModelConfig, head: TargetHead, h, prev, *, draft: bool = False):
  """The sequential head at one or more positions.

  Args:
    params: name -> array for `HEAD_PARAMS` (a `DSparkNet`'s, or its pure dict).
    cfg: the backbone's config (norm eps, dtype).
    head: the target's embedding and LM head.
    h: [..., D] backbone hidden states of the positions (before the final norm).
    prev: i32[...] the token before each position (the anchor for position 1).
    draft: True: logits over the head's own columns (`TargetHead.draft_logits`, training);
      False: over the target's Vm ids (-inf outside a draft vocabulary).

  Returns:
    f32[..., Vd or Vm] logits.
  """
  eps, dt = cfg.norm_eps, cfg.jnp_dtype
  h = h.astype(dt)
  emb = jnp.take(head.embed, prev, axis=0).astype(dt)  # [..., D]
  both = jnp.concatenate([layers.rms_norm(h, params["hidden_norm"], eps),
                          layers.rms_norm(emb, params["embed_norm"], eps)], axis=-1)
  gate, up = jnp.split(both @ params["head_in"], 2, axis=-1)  # [..., R] each
  out = h + (jax.nn.silu(gate) * up) @ params["head_out"]  # [..., D]
  normed = layers.rms_norm(out, params["final_norm"], eps)
  return head.draft_logits(normed) if draft else head.logits(normed)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DraftMasks:
  """Grammar masks applied while drafting, one mask per draft position, from a per-row state.

  The mask of a position comes from the row's state there; drafting a token advances it.
  Two sources share this form:
    * masks known before drafting: `words` i32[B, K, W] (`mask_layout` words) with `nodes`
      = 0 (the state is the position index);
    * a device automaton (`runtime.device_automaton.DeviceAutomaton`, a trie): `automaton`
      with `nodes` i32[B] each row's automaton state before draft 1; the mask of position
      i is that of the state after drafts 1..i-1, so it follows the drafts themselves.
  A position whose mask allows nothing (a dead end, or a state after an illegal forced
  token) drafts from the unmasked logits: the target rejects the draft there anyway.

  Attributes:
    enabled: bool[B] rows under a grammar (the others draft unmasked).
    nodes: i32[B] each row's state before draft 1.
    words: i32[B, K, W] per-position masks (None with an automaton).
    automaton: the device automaton (None with `words`).
    vocab_size: V, the tokenizer's vocabulary (ids >= V are never legal).
  """

  enabled: Any
  nodes: Any
  words: Any = None
  automaton: Any = None
  vocab_size: int = dataclasses.field(default=0, metadata=dict(static=True))

  @classmethod
  def per_position(cls, words, enabled, vocab_size: int) -> "DraftMasks":
    """Masks known before drafting: words i32[B, K, W], enabled bool[B]."""
    words = jnp.asarray(words, jnp.int32)
    return cls(enabled=jnp.asarray(enabled, bool),
               nodes=jnp.zeros(words.shape[:1], jnp.int32), words=words,
               vocab_size=int(vocab_size))

  @classmethod
  def from_automaton(cls, automaton, nodes, enabled) -> "DraftMasks":
    """Masks that follow the drafts through a device automaton from states nodes i32[B]."""
    return cls(enabled=jnp.asarray(enabled, bool), nodes=jnp.asarray(nodes, jnp.int32),
               automaton=automaton, vocab_size=int(automaton.vocab_size))

  def legal(self, state, width: int):
    """bool[B, width] legal ids at the rows' states i32[B] (all, on disabled rows)."""
    from infernix_jax.pallas import unpack_legal
    if self.automaton is not None:
      from infernix_jax.runtime import device_automaton
      words = device_automaton.mask(self.automaton, state)  # [B, W]
    else:
      k = self.words.shape[1]
      words = jnp.take_along_axis(self.words, jnp.clip(state, 0, k - 1)[:, None, None],
                                  axis=1)[:, 0]  # [B, W]
    return unpack_legal(words, self.enabled, self.vocab_size, width)

  def advance(self, state, token):
    """The rows' states after drafting token i32[B]."""
    if self.automaton is not None:
      from infernix_jax.runtime import device_automaton
      return device_automaton.step(self.automaton, state, token)
    return state + 1


def apply_mask(logits, masks: DraftMasks | None, state):
  """logits f32[B, Vm] with the ids illegal at the rows' states set to -inf (unchanged
  where nothing is legal)."""
  if masks is None:
    return logits
  legal = masks.legal(state, logits.shape[-1])  # [B, Vm]
  legal = legal | ~jnp.any(legal, axis=-1, keepdims=True)
  return jnp.where(legal, logits, -jnp.inf)


@functools.partial(jax.jit, static_argnames=("graphdef", "k", "sparse", "temperature"),
                   donate_argnames=("cache",))
def propose_dspark(graphdef, state, head: TargetHead, cache: KVCache, ctx: DraftContext,
                   keys, forced=None, n_forced=None, masks: DraftMasks | None = None, *,
                   k: int, sparse: bool, temperature: float):
  """One block forward, then K sequential head steps.

  Args:
    keys: per-row keys [B] (the sparse variant's draws).
    forced: i32[B, K], n_forced: i32[B]: tokens the grammar forces next (jump-forward): the
      first n_forced[b] drafts are those tokens and the head conditions on them (None:
      nothing forced).
    masks: grammar masks applied to each position's logits before it is drafted (None:
      unmasked).

  Returns:
    (ids i32[B, K], cand_ids i32[B, K, 16] | None, cand_probs f32[B, K, 16] | None, cache).
  """
  net = nnx.merge(graphdef, state)
  anchors = last_valid(ctx.tokens, ctx.counts)
  hs, cache = net.block(ctx.hidden, ctx.counts, anchors, head, cache, k)  # [B, K, D]
  params = net.head_params()
  b = anchors.shape[0]
  if forced is None:
    forced = jnp.zeros((b, k), jnp.int32)
    n_forced = jnp.zeros((b,), jnp.int32)
  node0 = jnp.zeros((b,), jnp.int32) if masks is None else masks.nodes

  def step(carry, xs):
    prev, node = carry
    i, h, key = xs
    logits = apply_mask(head_logits(params, net.cfg, head, h, prev), masks, node)  # [B, Vm]
    if sparse:
      tok, cand_ids, cand_probs = choose_sparse(logits, temperature, key)
    else:
      tok, cand_ids, cand_probs = jnp.argmax(logits, axis=-1).astype(jnp.int32), None, None
    tok = jnp.where(i < n_forced, forced[:, i], tok)
    node = node if masks is None else masks.advance(node, tok)
    return (tok, node), (tok, cand_ids, cand_probs)

  xs = (jnp.arange(k, dtype=jnp.int32), jnp.swapaxes(hs, 0, 1), split_keys(keys, k))
  _, (ids, cand_ids, cand_probs) = jax.lax.scan(step, (anchors, node0), xs)
  if not sparse:
    return ids.T, None, None, cache
  return ids.T, jnp.swapaxes(cand_ids, 0, 1), jnp.swapaxes(cand_probs, 0, 1), cache


@functools.partial(jax.jit, static_argnames=("graphdef", "k", "width", "shape"),
                   donate_argnames=("cache",))
def propose_dspark_tree(graphdef, state, head: TargetHead, cache: KVCache, ctx: DraftContext,
                        limit, masks: DraftMasks | None = None, *, k: int, width: int,
                        shape: str):
  """One block forward, then a greedy token tree of up to K nodes (`trees.grow`): a node at
  depth d gets its children from the head at position d + 1 conditioned on its own token, so
  every path is scored as a chain would draft it. With `masks`, each node's children are
  masked by the grammar state after its root path.

  Returns:
    (ids i32[B, K], parents i32[B, K], n_nodes i32[B], cache).
  """
  net = nnx.merge(graphdef, state)
  anchors = last_valid(ctx.tokens, ctx.counts)
  hs, cache = net.block(ctx.hidden, ctx.counts, anchors, head, cache, k)  # [B, K, D]
  params = net.head_params()
  b = anchors.shape[0]
  rows = jnp.arange(b)
  root = jnp.zeros((b,), jnp.int32) if masks is None else masks.nodes
  first = apply_mask(head_logits(params, net.cfg, head, hs[:, 0], anchors), masks, root)

  def expand(nodes, ids, parents, depth, anc, j):  # nodes: i32[B, N] grammar state per node
    up = jnp.where(parents[:, j] >= 0, nodes[rows, jnp.maximum(parents[:, j], 0)], root)
    node = up if masks is None else masks.advance(up, ids[:, j])
    pos = jnp.minimum(depth[:, j], k - 1)  # children of a depth-d node: position d + 1
    logits = head_logits(params, net.cfg, head, hs[rows, pos], ids[:, j])
    return apply_mask(logits, masks, node), nodes.at[:, j].set(node)

  ids, parents, count, _ = trees.grow(first, expand, jnp.zeros((b, k), jnp.int32), limit,
                                      n=k, width=width, shape=shape)
  return ids, parents, jnp.minimum(count, k), cache


@dataclasses.dataclass(frozen=True)
class DSparkDrafter:
  """Block backbone + sequential head drafting.

  Attributes:
    graphdef: static graph of the `DSparkNet`.
    state: its parameters.
    head: the target's embedding and LM head.
    cfg: the backbone's layer config.
    k: K, drafts per call.
    temperature: 0: greedy (OneHotQ); > 0: drafts drawn from the top-16 of each position's
      tempered law, q = SparseQ of exactly that law.
  """

  graphdef: Any
  state: Any
  head: TargetHead
  cfg: ModelConfig
  k: int
  temperature: float = 0.0

  conditions_on_forced: ClassVar[bool] = True  # propose takes jump-forward's forced tokens

  @classmethod
  def create(cls, net: DSparkNet, head: TargetHead, k: int,
             temperature: float = 0.0) -> "DSparkDrafter":
    """Wraps DSpark weights (random, or restored with `models.drafters.weights.load`)."""
    if head.embed.shape[1] != net.cfg.dim:
      raise ValueError(f"drafter width {net.cfg.dim} must equal the target's "
                       f"{head.embed.shape[1]} (it shares the target's embedding and head)")
    if temperature < 0:
      raise ValueError(f"{temperature=} must be >= 0 (0: greedy)")
    graphdef, state = nnx.split(net)
    return cls(graphdef, state, head, net.cfg, k, float(temperature))

  def init_state(self, batch: int, capacity: int) -> KVCache:
    """An empty context cache (one K/V per backbone layer and context entry)."""
    return KVCache.init(self.cfg, batch=batch, capacity=capacity)

  def propose(self, dstate: KVCache, ctx: DraftContext, keys: jax.Array | None = None,
              forced=None, n_forced=None, masks: DraftMasks | None = None):
    """See `Drafter.propose`; keys are needed when sampling; forced / n_forced and masks as
    in `propose_dspark`. Returns (ids i32[B, K], q, cache)."""
    sparse = self.temperature > 0
    if sparse and keys is None:
      raise ValueError("the sampling DSpark drafter draws its drafts; pass per-row keys")
    keys = keys if keys is not None else jax.random.split(jax.random.key(0),
                                                          ctx.tokens.shape[0])
    ids, cand_ids, cand_probs, cache = propose_dspark(
        self.graphdef, self.state, self.head, dstate, ctx, keys, forced, n_forced, masks,
        k=self.k, sparse=sparse, temperature=self.temperature)
    q = SparseQ(ids=cand_ids, probs=cand_probs) if sparse else OneHotQ()
    return ids, q, cache

  def propose_tree(self, dstate: KVCache, ctx: DraftContext, limit, *, width: int,
                   shape: str, masks: DraftMasks | None = None):
    """A greedy token tree of K nodes (`propose_dspark_tree`) -> (ids, parents, n_nodes,
    cache)."""
    if self.temperature > 0:
      raise ValueError("token trees are drafted greedily (this DSpark drafter samples)")
    return propose_dspark_tree(self.graphdef, self.state, self.head, dstate, ctx,
                               jnp.asarray(limit, jnp.int32), masks, k=self.k, width=width,
                               shape=shape)
