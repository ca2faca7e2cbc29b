"""Pure functions of one decoder layer: RMSNorm, RoPE, grouped attention, SwiGLU.

Axis letters (docs/CONTRACTS.md): B rows, T query length, S key length, N query heads, G kv
heads, Q = N / G query heads per kv head, H head dim, D model width, F SwiGLU width.
"""

from __future__ import annotations

from typing import Mapping

import jax
import jax.numpy as jnp

from infernix_jax.models import cpu_kernels, packed_gemm
from infernix_jax.models.config import ModelConfig

NEG_INF = -1e30  # finite "minus infinity": a fully masked row gives a uniform, not NaN, softmax


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
  """RMSNorm over the last axis, statistics in f32, scaled in x.dtype (as HF does)."""
  x32 = x.astype(jnp.float32)
  normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
  return weight * normed.astype(x.dtype)


def rope_tables(positions: jax.Array, head_dim: int, theta: float):
  """cos and sin tables for positions [B, T] -> two f32 [B, T, 1, H] arrays."""
  inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
  angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, H/2]
  angles = jnp.concatenate([angles, angles], axis=-1)[:, :, None, :]  # [B, T, 1, H]
  return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
  """Rotary embedding in the half-split (HF "rotate_half") layout; x is [B, T, *, H]."""
  half = x.shape[-1] // 2
  x32 = x.astype(jnp.float32)
  rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
  return (x32 * cos + rotated * sin).astype(x.dtype)


ATTENTION_KERNEL_MAX_ROWS = 64  # new rows T; more (prefill): XLA's batched dots


def attention_kernel_applies(q: jax.Array, k: jax.Array) -> bool:
  """Whether `attention` / `span_attention` run the span attention kernel (`cpu_kernels`):
  float32, H a multiple of 16, at most `ATTENTION_KERNEL_MAX_ROWS` new rows, on CPU."""
  return (q.shape[1] <= ATTENTION_KERNEL_MAX_ROWS and q.shape[-1] % 16 == 0
          and q.dtype == jnp.float32 and k.dtype == jnp.float32 and cpu_kernels.available())


def attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
  """Grouped-query attention (`attention_reference`), through the span attention kernel
  where it applies (`attention_kernel_applies`; its rows do not depend on T or on the span;
  gradients go through the reference)."""
  if attention_kernel_applies(q, k) and v.dtype == jnp.float32:
    return _span_kernel(q, k[None], v[None], mask.astype(bool), jnp.zeros((), jnp.int32))
  return attention_reference(q, k, v, mask)


def cache_span(cache: jax.Array, layer, span: int) -> jax.Array:
  """Layer `layer`'s first `span` slots of cache [L, B, S, G, H] -> [B, span, G, H]."""
  if isinstance(layer, int):
    return cache[layer, :, :span]
  zero = jnp.zeros((), jnp.int32)
  corner = (jnp.asarray(layer, jnp.int32),) + (zero,) * (cache.ndim - 1)
  return jax.lax.dynamic_slice(cache, corner, (1, cache.shape[1], span) + cache.shape[3:])[0]


def span_attention(q: jax.Array, cache_k: jax.Array, cache_v: jax.Array, layer,
                   mask: jax.Array) -> jax.Array:
  """`attention` of q [B, T, N, H] over the first S' slots of layer `layer` (int or i32
  scalar) of caches [L, B, S, G, H], mask bool [B, T, S']: the kernel reads the caches in
  place where it applies, else the span is sliced out for `attention_reference`."""
  if attention_kernel_applies(q, cache_k) and cache_v.dtype == jnp.float32:
    return _span_kernel(q, cache_k, cache_v, mask.astype(bool), jnp.asarray(layer, jnp.int32))
  span = mask.shape[-1]
  keys, values = (cache_span(c, layer, span).astype(q.dtype) for c in (cache_k, cache_v))
  return attention_reference(q, keys, values, mask)


@jax.custom_vjp
def _span_kernel(q, cache_k, cache_v, mask, layer):
  out = jax.ShapeDtypeStruct(q.shape, jnp.float32)
  return jax.ffi.ffi_call(cpu_kernels.SPAN_ATTENTION, out, vmap_method="sequential")(
      q, cache_k, cache_v, mask, layer)


def _span_kernel_fwd(q, cache_k, cache_v, mask, layer):
  return _span_kernel(q, cache_k, cache_v, mask, layer), (q, cache_k, cache_v, mask, layer)


def _span_kernel_bwd(saved, grad):
  q, cache_k, cache_v, mask, layer = saved
  span = mask.shape[-1]

  def reference(q, cache_k, cache_v):
    keys, values = (cache_span(c, layer, span) for c in (cache_k, cache_v))
    return attention_reference(q, keys, values, mask)

  _, pullback = jax.vjp(reference, q, cache_k, cache_v)
  return (*pullback(grad), None, None)


_span_kernel.defvjp(_span_kernel_fwd, _span_kernel_bwd)


def attention_reference(q: jax.Array, k: jax.Array, v: jax.Array,
                        mask: jax.Array) -> jax.Array:
  """Grouped-query attention with XLA's ops.

  Args:
    q: queries [B, T, N, H].
    k: keys [B, S, G, H].
    v: values [B, S, G, H].
    mask: bool [B, T, S], True where query t may read key s.

  Returns:
    [B, T, N, H] in q.dtype; softmax in f32.
  """
  b, t, n, h = q.shape
  kh = k.shape[2]
  q = q.reshape(b, t, kh, n // kh, h)  # [B, T, G, Q, H]
  scores = jnp.einsum("BTGQH,BSGH->BGQTS", q, k, preferred_element_type=jnp.float32)
  scores = scores * (h ** -0.5)
  scores = jnp.where(mask[:, None, None, :, :], scores, NEG_INF)
  probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
  out = jnp.einsum("BGQTS,BSGH->BTGQH", probs, v)  # [B, T, G, Q, H]
  return out.reshape(b, t, n, h)


def dense(x: jax.Array, p: Mapping[str, jax.Array], name: str) -> jax.Array:
  """x [..., in] @ p[name] [in, out] in x.dtype.

  Weights stored in another dtype (bf16, int8) are converted to x.dtype for the product;
  int8 weights carry a per-output-column scale p[name + "_scale"] f32[out], applied after.
  A 3-D weight is panel-packed ([out / C, in, C], `packed_gemm.pack`) and runs through
  `packed_gemm.matmul`.
  """
  w = p[name]
  if w.ndim == 3:
    return packed_gemm.matmul(x, w)
  y = x @ (w if w.dtype == x.dtype else w.astype(x.dtype))
  scale = p.get(name + "_scale")
  return y if scale is None else y * scale.astype(y.dtype)


def project_qkv(cfg: ModelConfig, p: Mapping[str, jax.Array], h: jax.Array, cos, sin):
  """Normed input [B, T, D] -> rotated q [B, T, N, H], k, v [B, T, G, H].

  Reads separate "q", "k", "v" matrices (stacked layout) or one fused "qkv" [D, (N + 2G)H]
  (unrolled layout, `infernix_jax.models.unrolled`).
  """
  b, t, _ = h.shape
  if "qkv" in p:
    qkv = dense(h, p, "qkv")
    if cfg.qkv_bias:
      qkv = qkv + p["qkv_bias"]
    nh, gh = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    q, k, v = qkv[..., :nh], qkv[..., nh:nh + gh], qkv[..., nh + gh:]
  else:
    q, k, v = dense(h, p, "q"), dense(h, p, "k"), dense(h, p, "v")
    if cfg.qkv_bias:
      q, k, v = q + p["q_bias"], k + p["k_bias"], v + p["v_bias"]
  q = q.reshape(b, t, cfg.num_heads, cfg.head_dim)  # [B, T, N, H]
  k = k.reshape(b, t, cfg.num_kv_heads, cfg.head_dim)  # [B, T, G, H]
  v = v.reshape(b, t, cfg.num_kv_heads, cfg.head_dim)  # [B, T, G, H]
  if cfg.qk_norm:
    q = rms_norm(q, p["q_norm"], cfg.norm_eps)
    k = rms_norm(k, p["k_norm"], cfg.norm_eps)
  return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


def attn_out(cfg: ModelConfig, p: Mapping[str, jax.Array], o: jax.Array) -> jax.Array:
  """Attention output [B, T, N, H] -> residual update [B, T, D]."""
  b, t = o.shape[:2]
  out = dense(o.reshape(b, t, cfg.num_heads * cfg.head_dim), p, "o")
  return out + p["o_bias"] if cfg.o_bias else out


def mlp(cfg: ModelConfig, p: Mapping[str, jax.Array], x: jax.Array) -> jax.Array:
  """Pre-normed SwiGLU block: x [B, T, D] -> residual update [B, T, D].

  Reads "gate" and "up" [D, F] or one fused "gate_up" [D, 2F].
  """
  h = rms_norm(x, p["mlp_norm"], cfg.norm_eps)
  if "gate_up" in p:
    gate_up = dense(h, p, "gate_up")
    gate, up = gate_up[..., :cfg.ffn_dim], gate_up[..., cfg.ffn_dim:]
  else:
    gate, up = dense(h, p, "gate"), dense(h, p, "up")
  return dense(jax.nn.silu(gate) * up, p, "down")


def layer_param_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
  """Shape of every parameter of one decoder layer (stacked layers prepend L)."""
  d, n, kh, h, f = cfg.dim, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.ffn_dim
  shapes = {
      "attn_norm": (d,), "q": (d, n * h), "k": (d, kh * h), "v": (d, kh * h),
      "o": (n * h, d), "mlp_norm": (d,), "gate": (d, f), "up": (d, f), "down": (f, d),
  }
  if cfg.qkv_bias:
    shapes.update(q_bias=(n * h,), k_bias=(kh * h,), v_bias=(kh * h,))
  if cfg.o_bias:
    shapes["o_bias"] = (d,)
  if cfg.qk_norm:
    shapes.update(q_norm=(h,), k_norm=(h,))
  return shapes


# Logical axes of each layer parameter (after the leading "layers" axis); see sharding.py.
LAYER_PARAM_AXES = {
    "attn_norm": ("embed",), "q": ("embed", "q_heads"), "k": ("embed", "kv_heads"),
    "v": ("embed", "kv_heads"), "o": ("q_heads", "embed"), "mlp_norm": ("embed",),
    "gate": ("embed", "mlp"), "up": ("embed", "mlp"), "down": ("mlp", "embed"),
    "q_bias": ("q_heads",), "k_bias": ("kv_heads",), "v_bias": ("kv_heads",),
    "o_bias": ("embed",), "q_norm": (None,), "k_norm": (None,),
}
