"""EAGLE-3 draft head (Li et al., arXiv 2503.01840): fused target features, one decoder layer,
a reduced draft vocabulary.

A context token x_j arrives with the target's features at the position before it (the
outputs of the `taps` layers, low / middle / high, concatenated: f [F] = [D * len(taps)]),
fused to the width of the layer: h = fc(f). The layer's attention reads
a = [RMSNorm_in(Emb(x)); RMSNorm_hidden(h)] ([2D]) while its residual stream starts at h;
then the usual SwiGLU block. Its output g (before the final norm) predicts the next token
through final_norm and the head's own LM head over the draft vocabulary (Vd ids), mapped to
the target's ids by d2t (target = draft + d2t[draft]). Drafting chains it: (g, the drafted
token) is the next step's (h, x), one query at the next position reading the cache.

Axis letters: B rows, C context, T new tokens, K drafts, D width, F fused feature width,
Vd draft vocabulary, Vm target vocabulary.
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
from infernix_jax.models.drafters.base import (DraftContext, OneHotQ, SparseQ, choose_sparse,
                                               last_valid)
from infernix_jax.models.kv_cache import KVCache
from infernix_jax.models.transformer import (_attend_and_mlp, _mlp_after_attention, init_param,
                                             layer_inputs, write_kv)


def default_taps(num_layers: int) -> tuple[int, ...]:
  """EAGLE-3's low / middle / high features: the inputs of layers 2, L // 2 and L - 3 (the
  convention of published heads and of vLLM / SGLang), i.e. the outputs of layers 1,
  L // 2 - 1 and L - 4; a model of fewer than 6 layers reads its first, middle and last."""
  return (1, num_layers // 2 - 1, num_layers - 4) if num_layers >= 6 else (
      0, num_layers // 2, num_layers - 1)


def layer_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
  """Shapes of the decoder layer's parameters: attention reads [2D] inputs."""
  d, n, g, h, f = cfg.dim, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.ffn_dim
  shapes = {"input_norm": (d,), "hidden_norm": (d,), "q": (2 * d, n * h), "k": (2 * d, g * h),
            "v": (2 * d, g * h), "o": (n * h, d), "mlp_norm": (d,), "gate": (d, f),
            "up": (d, f), "down": (f, d)}
  if cfg.qkv_bias:
    shapes.update(q_bias=(n * h,), k_bias=(g * h,), v_bias=(g * h,))
  if cfg.o_bias:
    shapes["o_bias"] = (d,)
  if cfg.qk_norm:
    shapes.update(q_norm=(h,), k_norm=(h,))
  return shapes


def attention_input(cfg: ModelConfig, p, h: jax.Array, emb: jax.Array) -> jax.Array:
  """[RMSNorm_in(emb); RMSNorm_hidden(h)]: [..., D] x 2 -> [..., 2D]."""
  return jnp.concatenate([layers.rms_norm(emb, p["input_norm"], cfg.norm_eps),
                          layers.rms_norm(h, p["hidden_norm"], cfg.norm_eps)], axis=-1)


def layer_forward(cfg: ModelConfig, p, h, emb, past_k, past_v, cos, sin, mask):
  """The decoder layer over T new entries, keys given (the training form).

  Args:
    p: the layer's parameters (`layer_shapes`).
    h: hidden inputs [B, T, D] (fused features, or the previous draft step's g).
    emb: token embeddings [B, T, D].
    past_k, past_v: keys/values the entries may read besides their own, [B, S', G, H].
    cos, sin: rope tables of the entries' positions; mask bool [B, T, S' + T].

  Returns:
    (g [B, T, D], k [B, T, G, H], v [B, T, G, H]).
  """
  q, k, v = layers.project_qkv(cfg, p, attention_input(cfg, p, h, emb), cos, sin)
  keys = jnp.concatenate([past_k.astype(q.dtype), k], axis=1)
  values = jnp.concatenate([past_v.astype(q.dtype), v], axis=1)
  return _attend_and_mlp(cfg, p, h, q, keys, values, mask), k, v


class Eagle3Net(nnx.Module):
  """Parameters of an EAGLE-3 head.

  Attributes:
    cfg: the decoder layer's dims (`dim` = the target's D; num_layers 1).
    taps: the target layers (outputs, 0-based) whose features it reads, in order.
    fc: [F, D]; layer parameters (`layer_shapes`) each stacked [1, ...]; final_norm [D];
    lm_head: [D, Vd]; d2t: i32[Vd] offsets to target ids (not trained); embed: [Vm, D] the
      head's own token embedding, or None (it reads the target's).
  """

  def __init__(self, cfg: ModelConfig, taps: tuple[int, ...], draft_vocab: int, *,
               rngs: nnx.Rngs, own_embedding: bool = False):
    self.cfg = cfg.replace(num_layers=1)
    self.taps = tuple(int(t) for t in taps)
    d, dtype = cfg.dim, cfg.jnp_dtype
    self.fc = nnx.Param(init_param("fc", (d * len(self.taps), d), dtype, rngs.params()))
    self.names = tuple(sorted(layer_shapes(self.cfg)))
    for name, shape in layer_shapes(self.cfg).items():
      setattr(self, name, nnx.Param(init_param(name, (1, *shape), dtype, rngs.params())))
    self.final_norm = nnx.Param(jnp.ones((d,), dtype))
    self.lm_head = nnx.Param(init_param("lm_head", (d, draft_vocab), dtype, rngs.params()))
    self.d2t = nnx.Variable(jnp.zeros((draft_vocab,), jnp.int32))
    self.embed = (nnx.Param(init_param("embed", (cfg.vocab_size, d), dtype, rngs.params()))
                  if own_embedding else None)

  @property
  def draft_vocab(self) -> int:
    return self.lm_head[...].shape[1]

  def layer_params(self) -> dict[str, jax.Array]:
    """The decoder layer's parameters by name, unstacked."""
    return {name: getattr(self, name)[...][0] for name in self.names}

  def fuse(self, feats: jax.Array) -> jax.Array:
    """Target features [..., F] -> hidden inputs [..., D]."""
    return feats.astype(self.fc[...].dtype) @ self.fc[...]

  def embedding(self, target_embed: jax.Array) -> jax.Array:
    return target_embed if self.embed is None else self.embed[...]

  def __call__(self, h: jax.Array, tokens: jax.Array, target_embed: jax.Array, cache: KVCache,
               tree=None):
    """h [B, T, D] hidden inputs, tokens [B, T] target ids, written at slots
    cache.lengths[b] + t -> (g [B, T, D], cache); `tree` = (depth, ancestors) as in
    `transformer.layer_inputs` (tree attention)."""
    cfg, p = self.cfg, self.layer_params()
    emb = jnp.take(self.embedding(target_embed), tokens, axis=0).astype(h.dtype)
    starts = cache.lengths
    cos, sin, mask = layer_inputs(cfg, h, cache.k.shape[2], starts, None, tree)
    q, k, v = layers.project_qkv(cfg, p, attention_input(cfg, p, h, emb), cos, sin)
    ck, cv = write_kv(cache.k, k, 0, starts), write_kv(cache.v, v, 0, starts)
    g = _mlp_after_attention(cfg, p, h, layers.span_attention(q, ck, cv, 0, mask))
    return g, KVCache(k=ck, v=cv, lengths=cache.lengths)

  def logits(self, g: jax.Array) -> jax.Array:
    """g [..., D] -> f32 logits over the draft vocabulary [..., Vd]."""
    h = layers.rms_norm(g, self.final_norm[...], self.cfg.norm_eps)
    return jnp.einsum("...D,DV->...V", h, self.lm_head[...],
                      preferred_element_type=jnp.float32)

  def to_target(self, ids: jax.Array) -> jax.Array:
    """Draft-vocabulary ids -> target ids."""
    return (ids + jnp.take(self.d2t[...], ids)).astype(jnp.int32)

  def target_logits(self, g: jax.Array, vocab_size: int) -> jax.Array:
    """Logits over the target vocabulary [..., Vm]: the draft vocabulary's, -inf elsewhere."""
    lg = self.logits(g)
    full = jnp.full(lg.shape[:-1] + (vocab_size,), -jnp.inf, jnp.float32)
    return full.at[..., self.to_target(jnp.arange(self.draft_vocab))].set(lg)


def _pick(net: Eagle3Net, g, temperature: float, key):
  """One draft per row: greedy (argmax) or sampled from the top-16 of the draft
  distribution at `temperature` -> (target ids i32[B], q ids i32[B, J] | None, q probs)."""
  logits = net.logits(g)
  if temperature == 0:
    return net.to_target(jnp.argmax(logits, axis=-1)), None, None
  ids, cand, probs = choose_sparse(logits, temperature, key)
  return net.to_target(ids), net.to_target(cand), probs


@functools.partial(jax.jit, static_argnames=("graphdef", "k", "temperature"),
                   donate_argnames=("cache",))
def propose_eagle3(graphdef, state, embed, cache: KVCache, ctx: DraftContext, keys,
                   forced=None, n_forced=None, *, k: int, temperature: float):
  """Appends the context (tokens with their fused features) to the head's cache, then chains
  K draft steps.

  Args:
    embed: the target's embedding [Vm, D].
    ctx: tokens [B, C] with the target's features [B, C, F] at the position before each.
    keys: per-row PRNG keys [B] (sampling only).
    forced, n_forced: i32[B, K], i32[B]: tokens the grammar forces next (jump-forward); the
      first n_forced[b] drafts of row b are those tokens (q one-hot there) and the chain
      continues after them, conditioned on them. None: nothing forced.
    temperature: static; 0 = greedy (q one-hot), else drafts are drawn from the top-16 of
      the draft distribution at this temperature (q sparse, exactly that distribution).

  Returns:
    (ids i32[B, K] target ids, q (OneHotQ | SparseQ [B, K, 16]), cache with lengths
    advanced by ctx.counts).
  """
  net = nnx.merge(graphdef, state)
  dt = net.fc[...].dtype
  g, cache = net(net.fuse(ctx.hidden).astype(dt), ctx.tokens, embed, cache)
  committed = cache.lengths + ctx.counts
  g = last_valid(g, ctx.counts)  # [B, D]
  step_keys = jnp.swapaxes(jax.vmap(lambda key: jax.random.split(key, k))(keys), 0, 1)
  b = g.shape[0]
  if forced is None:
    forced, n_forced = jnp.zeros((b, k), jnp.int32), jnp.zeros((b,), jnp.int32)
  forced_at = jnp.arange(k)[:, None] < n_forced[None, :]  # [K, B]

  def pick(g, i, key):
    ids, cand, probs = _pick(net, g, temperature, key)
    ids = jnp.where(forced_at[i], forced[:, i], ids)
    if cand is not None:  # a forced position's q is one-hot on the forced token
      cand = jnp.where(forced_at[i][:, None], -1, cand).at[:, 0].set(
          jnp.where(forced_at[i], forced[:, i], cand[:, 0]))
      probs = jnp.where(forced_at[i][:, None], 0.0, probs).at[:, 0].set(
          jnp.where(forced_at[i], 1.0, probs[:, 0]))
    return ids, cand, probs

  first, c0, p0 = pick(g, 0, step_keys[0])

  def step(carry, xs):
    g, token, c = carry
    i, key = xs
    out, c = net(g[:, None], token[:, None], embed, c)
    g = out[:, 0]
    nxt, cand, probs = pick(g, i, key)
    return (g, nxt, c.with_lengths(c.lengths + 1)), (nxt, cand, probs)

  (_, _, cache), (rest, cands, probs) = jax.lax.scan(
      step, (g, first, cache.with_lengths(committed)), (jnp.arange(1, k), step_keys[1:]))
  ids = jnp.concatenate([first[None], rest], axis=0).T  # [B, K]
  if temperature == 0:
    return ids, OneHotQ(), cache.with_lengths(committed)
  q_ids = jnp.concatenate([c0[None], cands], axis=0).swapaxes(0, 1)  # [B, K, J]
  q_probs = jnp.concatenate([p0[None], probs], axis=0).swapaxes(0, 1)
  return ids, SparseQ(ids=q_ids, probs=q_probs), cache.with_lengths(committed)


@functools.partial(jax.jit, static_argnames=("graphdef", "k", "width", "shape", "vocab_size"),
                   donate_argnames=("cache",))
def propose_eagle3_tree(graphdef, state, embed, cache: KVCache, ctx: DraftContext, limit, *,
                        k: int, width: int, shape: str, vocab_size: int):
  """Appends the context, then grows a greedy token tree of up to K nodes (`trees.grow`,
  EAGLE-2's dynamic tree): a node's g comes from the head over (its parent's g, its token),
  one tree-attention call over the tree so far.

  Returns:
    (ids i32[B, K], parents i32[B, K], n_nodes i32[B], cache with lengths advanced by
    ctx.counts).
  """
  net = nnx.merge(graphdef, state)
  dt = net.fc[...].dtype
  g, cache = net(net.fuse(ctx.hidden).astype(dt), ctx.tokens, embed, cache)
  committed = cache.lengths + ctx.counts
  root = last_valid(g, ctx.counts)  # [B, D]
  b, d = root.shape
  rows = jnp.arange(b)[:, None]

  def expand(c, ids, parents, depth, anc, j):
    cache, gs = c
    up = jnp.where((parents >= 0)[..., None], gs[rows, jnp.maximum(parents, 0)],
                   root[:, None])  # [B, K, D]
    out, cache = net(up, ids, embed, cache.with_lengths(committed), tree=(depth - 1, anc))
    return net.target_logits(out[:, j], vocab_size), (cache, out)

  carry = (cache.with_lengths(committed), jnp.zeros((b, k, d), root.dtype))
  ids, parents, count, (cache, _) = trees.grow(net.target_logits(root, vocab_size), expand,
                                               carry, limit, n=k, width=width, shape=shape)
  return ids, parents, count, cache.with_lengths(committed)


@dataclasses.dataclass(frozen=True)
class Eagle3Drafter:
  """EAGLE-3 drafting on the device.

  Attributes:
    graphdef, state: the `Eagle3Net` split.
    embed: the target's token embedding [Vm, D] (shared, never copied).
    cfg: the head's layer config; taps: the target layers it reads; k: K drafts per call.
    temperature: 0 = greedy (q one-hot); > 0 = sampled from the top-16 (q sparse).
  """

  graphdef: Any
  state: Any
  embed: jax.Array
  cfg: ModelConfig
  taps: tuple[int, ...]
  k: int
  temperature: float = 0.0

  @classmethod
  def create(cls, net: Eagle3Net, target_embed: jax.Array, k: int,
             temperature: float = 0.0) -> "Eagle3Drafter":
    """Wraps an `Eagle3Net` (random, or restored by `eagle3_checkpoint.load`)."""
    if target_embed.shape[1] != net.cfg.dim:
      raise ValueError(f"EAGLE-3 width {net.cfg.dim} must equal the target's "
                       f"{target_embed.shape[1]}")
    if temperature < 0:
      raise ValueError(f"{temperature=} must be >= 0")
    graphdef, state = nnx.split(net)
    return cls(graphdef, state, target_embed, net.cfg, net.taps, k, float(temperature))

  def init_state(self, batch: int, capacity: int) -> KVCache:
    """An empty one-layer KV cache."""
    return KVCache.init(self.cfg, batch=batch, capacity=capacity)

  conditions_on_forced = True  # propose takes jump-forward's forced tokens

  def propose(self, dstate: KVCache, ctx: DraftContext, keys: jax.Array, forced=None,
              n_forced=None):
    """See `Drafter.propose` -> (ids i32[B, K], q, cache); forced / n_forced as in
    `propose_eagle3` (the chain drafts after the forced prefix)."""
    return propose_eagle3(self.graphdef, self.state, self.embed, dstate, ctx, keys, forced,
                          n_forced, k=self.k, temperature=self.temperature)

  def propose_tree(self, dstate: KVCache, ctx: DraftContext, limit, *, width: int,
                   shape: str):
    """A greedy token tree of K nodes -> (ids, parents, n_nodes, cache)."""
    return propose_eagle3_tree(self.graphdef, self.state, self.embed, dstate, ctx,
                               jnp.asarray(limit, jnp.int32), k=self.k, width=width,
                               shape=shape, vocab_size=self.embed.shape[0])
