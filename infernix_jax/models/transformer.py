"""Flax NNX decoder of the Qwen family with layer-stacked weights and an explicit KV cache.

Axis letters: B rows, T query length, S cache capacity, L layers, D model width,
Vm logits width, N/G query/kv heads, H head dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from infernix_jax.models import layers, packed_gemm
from infernix_jax.models.config import ModelConfig
from infernix_jax.models.kv_cache import KVCache

_INIT_STD = 0.02  # matches the HF initializer_range default


def init_param(name: str, shape, dtype, key) -> jax.Array:
  """Random init: ones for norm scales, zeros for biases, N(0, 0.02) for matrices."""
  if name.endswith("norm"):
    return jnp.ones(shape, dtype)
  if name.endswith("bias"):
    return jnp.zeros(shape, dtype)
  return (_INIT_STD * jax.random.normal(key, shape, jnp.float32)).astype(dtype)


class DecoderLayers(nnx.Module):
  """`num_layers` pre-norm decoder layers whose parameters are stacked on a leading L axis.

  Stacking lets one `lax.scan` run all layers, so compile time does not grow with depth.
  Matrices are stored [in, out] (x @ W).
  """

  def __init__(self, cfg: ModelConfig, num_layers: int, *, rngs: nnx.Rngs):
    self.names = tuple(sorted(layers.layer_param_shapes(cfg)))
    for name, shape in sorted(layers.layer_param_shapes(cfg).items()):
      value = init_param(name, (num_layers, *shape), cfg.jnp_dtype, rngs.params())
      setattr(self, name, nnx.Param(value))

  def params(self) -> dict[str, jax.Array]:
    """Parameter arrays by name, each [L, ...]."""
    return {name: getattr(self, name)[...] for name in self.names}

  def run(self, cfg: ModelConfig, x, cache_k, cache_v, starts, collect: bool = False,
          span: int | None = None, tree=None):
    """`cached_layers` over these layers (same arguments and results)."""
    return cached_layers(cfg, self.params(), x, cache_k, cache_v, starts, collect=collect,
                         span=span, tree=tree)


def decoder_layer(cfg: ModelConfig, p, x: jax.Array, past_k: jax.Array, past_v: jax.Array,
                  cos, sin, mask: jax.Array):
  """One pre-norm decoder layer over T new tokens; their keys/values are returned, not stored.

  The training objectives' form (keys gathered by the caller); inference goes through
  `cached_layer`, which writes into the cache first.

  Args:
    p: this layer's parameters (either layout, see `layers.project_qkv`).
    x: activations [B, T, D].
    past_k, past_v: keys/values the new tokens may read, [B, S', G, H] (read only).
    cos, sin: rope tables of the new positions.
    mask: bool [B, T, S' + T]: which past entries and which new tokens each new token reads.

  Returns:
    (x [B, T, D], k [B, T, G, H], v [B, T, G, H]) -- the new keys/values, rotated.
  """
  h = layers.rms_norm(x, p["attn_norm"], cfg.norm_eps)
  q, k, v = layers.project_qkv(cfg, p, h, cos, sin)
  keys = jnp.concatenate([past_k.astype(q.dtype), k], axis=1)  # [B, S' + T, G, H]
  values = jnp.concatenate([past_v.astype(q.dtype), v], axis=1)
  return _attend_and_mlp(cfg, p, x, q, keys, values, mask), k, v


def _attend_and_mlp(cfg: ModelConfig, p, x, q, keys, values, mask):
  """The rest of a layer once its queries and keys are known -> x [B, T, D]."""
  return _mlp_after_attention(cfg, p, x, layers.attention(q, keys, values, mask))


def _mlp_after_attention(cfg: ModelConfig, p, x, o):
  """The rest of a layer once its attention output o [B, T, N, H] is known -> x [B, T, D]."""
  x = x + layers.attn_out(cfg, p, o)
  return x + layers.mlp(cfg, p, x)


def cached_layer(cfg: ModelConfig, p, x: jax.Array, cache_k: jax.Array, cache_v: jax.Array,
                 layer, starts: jax.Array, cos, sin, mask: jax.Array):
  """One pre-norm decoder layer over T new tokens that writes their keys/values into the cache
  first, then attends over the cache's first S' slots (which then hold them).

  Writing before reading keeps the cache update in place: every later read is of the updated
  buffer, so XLA needs no defensive copy of the whole cache, and a step costs what its span
  costs, whatever the capacity.

  Args:
    p: this layer's parameters (either layout).
    x: activations [B, T, D].
    cache_k, cache_v: [L, B, S, G, H]; slot starts[b] + t of layer `layer` receives new token
      t of row b (slots >= S are dropped).
    layer: the layer index (int, or a traced i32 scalar inside a scan).
    starts: i32[B].
    cos, sin: rope tables of the new positions.
    mask: bool [B, T, S'] over cache slots (`layer_inputs`), S' <= S.

  Returns:
    (x [B, T, D], cache_k, cache_v).
  """
  h = layers.rms_norm(x, p["attn_norm"], cfg.norm_eps)
  q, k, v = layers.project_qkv(cfg, p, h, cos, sin)
  cache_k = write_kv(cache_k, k, layer, starts)
  cache_v = write_kv(cache_v, v, layer, starts)
  o = layers.span_attention(q, cache_k, cache_v, layer, mask)
  return _mlp_after_attention(cfg, p, x, o), cache_k, cache_v


def layer_inputs(cfg: ModelConfig, x: jax.Array, capacity: int, starts: jax.Array,
                 span: int | None = None, tree: tuple[jax.Array, jax.Array] | None = None):
  """What every layer shares: (cos, sin, mask bool [B, T, S']) over cache slots.

  New token t of row b is stored at cache slot starts[b] + t. S' = span (default: the
  capacity S). Row b's new token t reads its committed slots (< starts[b]; later ones are
  scratch) and the new tokens' slots starts[b] + u with u <= t, each token at position = its
  slot.

  With `tree` = (depth i32[B, T], ancestors bool [B, T, T]) the new tokens are the nodes of a
  token tree instead of a sequence: token t sits at position starts[b] + depth[b, t] and
  reads the new tokens u with ancestors[b, t, u] (its root path, itself included), so one
  call scores every root-to-node path of the tree (tree attention).
  """
  b, t, _ = x.shape
  slots = starts[:, None] + jnp.arange(t, dtype=jnp.int32)  # [B, T]
  positions = slots if tree is None else starts[:, None] + tree[0]
  cos, sin = layers.rope_tables(positions, cfg.head_dim, cfg.rope_theta)
  s = min(span or capacity, capacity)
  new = (jnp.arange(s, dtype=jnp.int32)[None, None, :] - starts[:, None, None])  # [B, 1, S']
  committed = new < 0
  if tree is None:
    reads = (new >= 0) & (new <= jnp.arange(t, dtype=jnp.int32)[None, :, None])  # [B, T, S']
  else:
    index = jnp.broadcast_to(jnp.clip(new, 0, t - 1), (b, t, s))
    reads = (new >= 0) & (new < t) & jnp.take_along_axis(tree[1], index, axis=2)
  return cos, sin, committed | reads


def write_kv(cache: jax.Array, new: jax.Array, layer, starts: jax.Array) -> jax.Array:
  """Stores one layer's new keys (or values) new [B, T, G, H] at slots starts[b] + t of
  cache [L, B, S, G, H] layer `layer`; slots >= S are dropped.

  Every row rewrites a window of T slots that lies inside the capacity (its start clamped to
  S - T), keeping the old entries where no new token lands, in one in-bounds scatter: XLA
  updates the donated cache in place, a write costs O(B T), not O(S), and the step's program
  does not grow with the lanes. A chunk longer than the capacity (T > S) falls back to a
  dropping scatter.
  """
  b, t = new.shape[:2]
  capacity = cache.shape[2]
  new = new.astype(cache.dtype)
  rows = jnp.arange(b, dtype=jnp.int32)[:, None]  # [B, 1]
  if t > capacity:
    slots = starts[:, None] + jnp.arange(t, dtype=jnp.int32)
    return cache.at[layer, rows, slots].set(new, mode="drop")
  window = jnp.clip(starts, 0, capacity - t)[:, None] + jnp.arange(t, dtype=jnp.int32)  # [B, T]
  index = window - starts[:, None]  # the new token landing in each window slot
  lands = ((index >= 0) & (index < t))[..., None, None]
  arriving = jnp.take_along_axis(new, jnp.clip(index, 0, t - 1)[..., None, None], axis=1)
  put = jnp.where(lands, arriving, cache[layer, rows, window])
  return cache.at[layer, rows, window].set(put, mode="promise_in_bounds")


def cached_layers(cfg: ModelConfig, params: dict[str, jax.Array], x: jax.Array,
                  cache_k: jax.Array, cache_v: jax.Array, starts: jax.Array,
                  collect: bool = False, span: int | None = None,
                  tree: tuple[jax.Array, jax.Array] | None = None):
  """Runs stacked causal layers (one `lax.scan`) over T new tokens at each row's offset.

  Args:
    cfg: the model (or drafter) config.
    params: stacked layer parameters, each [L, ...].
    x: input activations [B, T, D].
    cache_k: keys [L, B, S, K, H]; updated at positions starts[b] .. starts[b] + T - 1
      (positions beyond S are dropped).
    cache_v: values, same layout.
    starts: first position of each row's new tokens, i32[B].
    collect: also return every layer's output (for feature taps).
    span: attend over the first `span` cache positions only (static; every row's
      starts[b] + T must be <= span); None: the whole capacity.
    tree: (depth i32[B, T], ancestors bool [B, T, T]): the new tokens form a token tree
      (`layer_inputs`); None: a sequence.

  Returns:
    (output activations [B, T, D], cache_k, cache_v), plus the per-layer outputs
    [L, B, T, D] when `collect`.
  """
  cos, sin, mask = layer_inputs(cfg, x, cache_k.shape[2], starts, span, tree)

  def body(carry, xs):
    x, cache_k, cache_v = carry
    p, layer = xs
    x, cache_k, cache_v = cached_layer(cfg, p, x, cache_k, cache_v, layer, starts, cos, sin,
                                       mask)
    return (x, cache_k, cache_v), x if collect else None

  layer_ids = jnp.arange(cache_k.shape[0], dtype=jnp.int32)
  (x, cache_k, cache_v), per_layer = jax.lax.scan(body, (x, cache_k, cache_v),
                                                  (params, layer_ids))
  return (x, cache_k, cache_v, per_layer) if collect else (x, cache_k, cache_v)


class Transformer(nnx.Module):
  """Decoder-only transformer: Qwen2/2.5, Qwen3 and Llama-style (SmolLM2) checkpoints.

  Call it through the jitted phases in `infernix_jax.models.phases` (`prefill`, `decode`,
  `verify`) over `nnx.split(model)`; the methods here are the traced building blocks.
  """

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    dtype = cfg.jnp_dtype
    self.embed = nnx.Param(init_param("embed", (cfg.vocab_size, cfg.dim), dtype, rngs.params()))
    self.layers = DecoderLayers(cfg, cfg.num_layers, rngs=rngs)
    self.final_norm = nnx.Param(jnp.ones((cfg.dim,), dtype))
    if not cfg.tie_embeddings:
      self.lm_head = nnx.Param(init_param("lm_head", (cfg.dim, cfg.vocab_size), dtype,
                                     rngs.params()))

    self.packed_head = nnx.data(None)

  def pack_head(self, packed: bool) -> None:
    """Keeps a panel-packed copy of the LM head ([D, Vm] as `packed_gemm.pack` panels) for
    `logits`, or drops it; a head width with no panel width is never packed."""
    head = self.embed[...].T if self.cfg.tie_embeddings else self.lm_head[...]
    packed = packed and packed_gemm.panel_width(head.shape[1]) is not None
    self.packed_head = nnx.data(
        nnx.Param(jnp.asarray(packed_gemm.pack(np.asarray(head, np.float32)))) if packed else None)

  def embed_tokens(self, tokens: jax.Array) -> jax.Array:
    """Token ids [B, T] -> embeddings [B, T, D].

    An id outside 0..Vm-1 (a draft a drafter proposed outside the vocabulary: negative or
    past the logits) reads a clipped row instead of NaN: such a draft is rejected at its
    position, and a NaN input there would poison the earlier positions' attention through
    the zero-weighted values.
    """
    return jnp.take(self.embed[...], tokens, axis=0, mode="clip")

  def logits(self, hidden: jax.Array) -> jax.Array:
    """Pre-norm hidden [..., D] -> f32 logits [..., Vm] (final RMSNorm, then the LM head)."""
    h = layers.rms_norm(hidden, self.final_norm[...], self.cfg.norm_eps)
    if self.packed_head is not None:
      return packed_gemm.matmul(h, self.packed_head[...])
    if self.cfg.tie_embeddings:
      return jnp.einsum("...D,VD->...V", h, self.embed[...],
                        preferred_element_type=jnp.float32)
    return jnp.einsum("...D,DV->...V", h, self.lm_head[...],
                      preferred_element_type=jnp.float32)

  def __call__(self, tokens: jax.Array, cache: KVCache,
               taps: tuple[int, ...] | None = None,
               span: int | None = None,
               tree: tuple[jax.Array, jax.Array] | None = None) -> tuple[jax.Array, KVCache]:
    """Runs tokens [B, T] at positions cache.lengths[b] + t and writes their keys/values.

    Args:
      tokens: i32[B, T].
      cache: the KV cache; entries are written, lengths are left unchanged.
      taps: layers whose outputs to return as features (e.g. (1, L // 2, L - 1) for
        DFlash/EAGLE-3-style drafters); None returns the last layer's output.
      span: static; attention reads only the first `span` cache positions (every row's
        length + T must fit in it); None: the whole capacity.
      tree: (depth i32[B, T], ancestors bool [B, T, T]): the tokens are the nodes of a token
        tree, not a sequence (`layer_inputs`); None: a sequence.

    Returns:
      (hidden [B, T, D * max(1, len(taps))] before the final norm, cache with new entries
      and unchanged lengths). Callers commit by `cache.with_lengths(...)`.
    """
    x = self.embed_tokens(tokens)
    out = self.layers.run(self.cfg, x, cache.k, cache.v, cache.lengths,
                          collect=taps is not None, span=span, tree=tree)
    x, k, v = out[:3]
    if taps is not None:
      for t in taps:
        if not 0 <= t < self.cfg.num_layers:
          raise ValueError(f"tap {t} is not a layer index of a {self.cfg.num_layers}-layer model")
      x = jnp.concatenate([out[3][t] for t in taps], axis=-1)  # [B, T, D * len(taps)]
    return x, KVCache(k=k, v=v, lengths=cache.lengths)
