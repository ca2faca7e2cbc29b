"""The CPU kernels against FP64 numpy oracles: the panel-packed product and the span attention
equal their FP64 functions, their rows do not depend on the row count (or the span), the
attention's gradients are the reference's; packed models equal unpacked ones and round-trip."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from infernix_jax import models as im
from infernix_jax.models import cpu_kernels, layers, packed_gemm, unrolled

needs_kernel = pytest.mark.skipif(not cpu_kernels.available(),
                                  reason="CPU kernels not built here (no compiler)")


def _weights(k, n, seed=0):
  return np.random.default_rng(seed).normal(size=(k, n)).astype(np.float32) / np.sqrt(k)


def test_pack_unpack_round_trip_and_panel_widths():
  w = _weights(7, 96)
  assert packed_gemm.panel_width(96) == 32 and packed_gemm.panel_width(128) == 64
  assert packed_gemm.panel_width(48) == 16 and packed_gemm.panel_width(97) is None
  wp = packed_gemm.pack(w)
  assert wp.shape == (3, 7, 32)
  np.testing.assert_array_equal(wp[1, :, 5], w[:, 32 + 5])
  np.testing.assert_array_equal(packed_gemm.unpack(wp), w)
  with pytest.raises(ValueError, match="N=97 must be a multiple of one of"):
    packed_gemm.pack(_weights(4, 97))
  with pytest.raises(ValueError, match="must end in K=7"):
    packed_gemm.matmul(jnp.zeros((1, 8)), jnp.asarray(wp))


@needs_kernel
@pytest.mark.parametrize("n", [64 * 5, 32 * 3, 16 * 7])  # every panel width
def test_kernel_equals_fp64_product_and_rows_do_not_depend_on_row_count(n):
  k = 53  # odd: no vector-length assumption on K
  w = _weights(k, n, seed=n)
  wp = jnp.asarray(packed_gemm.pack(w))
  x = np.random.default_rng(1).normal(size=(packed_gemm.KERNEL_MAX_ROWS + 1, k))
  x = x.astype(np.float32)
  want = x.astype(np.float64) @ w.astype(np.float64)
  product = jax.jit(packed_gemm.matmul)
  assert cpu_kernels.PACKED_GEMM in product.lower(jnp.asarray(x[:5]), wp).as_text()
  assert cpu_kernels.PACKED_GEMM not in product.lower(jnp.asarray(x), wp).as_text()
  full = np.asarray(product(jnp.asarray(x[:packed_gemm.KERNEL_MAX_ROWS]), wp))
  np.testing.assert_allclose(full, want[:packed_gemm.KERNEL_MAX_ROWS], atol=2e-5, rtol=2e-5)
  for rows in (1, 5, 6, 7, 20):  # below, at and across the kernel's six-row blocks
    got = np.asarray(product(jnp.asarray(x[:rows]), wp))
    np.testing.assert_array_equal(got, full[:rows], err_msg=f"{rows} rows")
  batched = np.asarray(product(jnp.asarray(x[:12].reshape(2, 3, 2, k)), wp))
  np.testing.assert_array_equal(batched.reshape(12, n), full[:12])
  # Above the kernel's row limit XLA's dot takes over: same product, within rounding.
  above = np.asarray(product(jnp.asarray(x), wp))
  np.testing.assert_allclose(above, want, atol=2e-5, rtol=2e-5)


def _model():
  # D=48 and Vm=128 have panel widths: every matrix and the LM head are packed.
  cfg = im.ModelConfig(vocab_size=128, dim=48, num_layers=2, num_heads=4, num_kv_heads=2,
                       head_dim=16, ffn_dim=80, qk_norm=True, tie_embeddings=True)
  return im.Transformer(cfg, rngs=nnx.Rngs(3))


def _logits(model, tokens):
  graphdef, state = nnx.split(model)
  logits, _ = im.forward(graphdef, state, jnp.asarray(tokens))
  return np.asarray(logits)


@needs_kernel
def test_packed_model_equals_stacked_and_round_trips():
  model = _model()
  tokens = np.random.default_rng(4).integers(0, 128, (2, 9)).astype(np.int32)
  want = _logits(model, tokens)
  before = {name: np.asarray(value) for name, value in model.layers.params().items()}
  fast = unrolled.unroll(nnx.merge(*nnx.split(model)))
  assert fast.layers.packed and fast.packed_head is not None
  assert {layer.qkv[...].ndim for layer in fast.layers.layers} == {3}
  np.testing.assert_allclose(_logits(fast, tokens), want, atol=2e-5, rtol=1e-5)
  plain = unrolled.unroll(nnx.merge(*nnx.split(fast)), packed=False)
  assert not plain.layers.packed and plain.packed_head is None
  np.testing.assert_allclose(_logits(plain, tokens), want, atol=2e-5, rtol=1e-5)
  back = unrolled.stack(fast)
  assert back.packed_head is None
  for name, value in before.items():
    np.testing.assert_array_equal(np.asarray(back.layers.params()[name]), value, err_msg=name)


def test_packing_needs_float32_weights():
  model = _model()
  with pytest.raises(ValueError, match="packed products need float32 weights"):
    unrolled.unroll(model, "bfloat16", packed=True)
  assert not unrolled.packs_by_default(model.cfg, "int8")


def _attention_fp64(q, k, v, mask):
  """Grouped-query attention in FP64: q [B, T, N, H], k/v [B, S, G, H], mask [B, T, S]."""
  b, t, n, h = q.shape
  g = k.shape[2]
  qg = q.reshape(b, t, g, n // g, h).astype(np.float64)
  scores = np.einsum("btgqh,bsgh->bgqts", qg, k.astype(np.float64)) / np.sqrt(h)
  scores = np.where(mask[:, None, None], scores, layers.NEG_INF)
  probs = np.exp(scores - scores.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  return np.einsum("bgqts,bsgh->btgqh", probs, v.astype(np.float64)).reshape(b, t, n, h)


@needs_kernel
def test_span_attention_equals_fp64_in_place_for_any_rows_and_span():
  rng = np.random.default_rng(5)
  lanes, rows, capacity, span, heads, kv_heads, h = 2, 7, 48, 40, 6, 2, 32
  q = rng.normal(size=(lanes, rows, heads, h)).astype(np.float32)
  cache_k, cache_v = (rng.normal(size=(3, lanes, capacity, kv_heads, h)).astype(np.float32)
                      for _ in range(2))
  mask = rng.random((lanes, rows, span)) < 0.5
  mask[1, 3] = False  # a row that may read nothing: uniform over the span, as the reference
  mask[0, 4, 30:] = False  # a row whose last slots are masked (a shorter span gives the same)
  attend = jax.jit(layers.span_attention, static_argnums=3)
  assert cpu_kernels.SPAN_ATTENTION in attend.lower(q, cache_k, cache_v, 2, mask).as_text()
  got = np.asarray(attend(q, cache_k, cache_v, 2, mask))
  want = _attention_fp64(q, cache_k[2, :, :span], cache_v[2, :, :span], mask)
  np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-5)
  traced_layer = jax.jit(layers.span_attention)(q, cache_k, cache_v, jnp.int32(2), mask)
  np.testing.assert_array_equal(np.asarray(traced_layer), got)
  one_row = attend(q[:, 4:5], cache_k, cache_v, 2, mask[:, 4:5])
  np.testing.assert_array_equal(np.asarray(one_row), got[:, 4:5])
  shorter = attend(q[:1, 4:5], cache_k[:, :1], cache_v[:, :1], 2, mask[:1, 4:5, :30])
  np.testing.assert_array_equal(np.asarray(shorter), got[:1, 4:5])
  plain = jax.jit(layers.attention)(q, cache_k[2, :, :span], cache_v[2, :, :span], mask)
  np.testing.assert_array_equal(np.asarray(plain), got)

  def loss(fn):
    return lambda q, k, v: (fn(q, k, v) * np.arange(h)).sum()

  kernel = jax.grad(loss(lambda q, k, v: layers.span_attention(q, k, v, 2, mask)), (0, 1, 2))
  ref = jax.grad(loss(lambda q, k, v: layers.attention_reference(
      q, k[2, :, :span], v[2, :, :span], mask)), (0, 1, 2))
  for g, r in zip(kernel(q, cache_k, cache_v), ref(q, cache_k, cache_v)):
    np.testing.assert_allclose(np.asarray(g), np.asarray(r), atol=1e-5, rtol=1e-5)
