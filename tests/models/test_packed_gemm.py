"""The panel-packed product kernel equals an FP64 numpy product; its rows do not depend on the
row count; packed models equal unpacked ones and round-trip to the stacked layout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from infernix_jax import models as im
from infernix_jax.models import packed_gemm, unrolled

needs_kernel = pytest.mark.skipif(not packed_gemm.available(),
                                  reason="packed-weight kernel not built here (no compiler)")


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
  assert packed_gemm.TARGET in product.lower(jnp.asarray(x[:5]), wp).as_text()
  assert packed_gemm.TARGET not in product.lower(jnp.asarray(x), wp).as_text()
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
