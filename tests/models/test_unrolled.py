"""The unrolled layout equals the stacked one; reduced-precision storage equals an FP64 numpy
model of the dequantized weights; layouts round-trip and checkpoints stay stacked."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from infernix_jax import models as im
from infernix_jax.models import unrolled
from tests.models import _np_oracle

CONFIGS = {
    "qwen3": im.ModelConfig(vocab_size=97, dim=48, num_layers=3, num_heads=4, num_kv_heads=2,
                            head_dim=16, ffn_dim=80, qk_norm=True, tie_embeddings=False),
    "qwen2": im.ModelConfig(vocab_size=61, dim=32, num_layers=2, num_heads=4, num_kv_heads=1,
                            head_dim=8, ffn_dim=40, qkv_bias=True),
    "llama-bias": im.ModelConfig(vocab_size=50, dim=32, num_layers=2, num_heads=2,
                                 num_kv_heads=2, head_dim=16, ffn_dim=24, o_bias=True),
}


def _model(name, seed=0):
  model = im.Transformer(CONFIGS[name], rngs=nnx.Rngs(seed))
  # Move norms and biases away from 1 / 0 so that fusing them wrongly shows.
  rng = np.random.default_rng(seed)
  for key in model.layers.names:
    if key.endswith(("norm", "bias")):
      value = getattr(model.layers, key)
      value[...] = value[...] + jnp.asarray(0.1 * rng.normal(size=value.shape), jnp.float32)
  return model


def _copy(model):
  return nnx.merge(*nnx.split(model))


def _run(model, tokens, taps=None):
  """prefill 5 tokens, then verify the rest: (prefill logits, verify logits, verify hidden)."""
  graphdef, state = nnx.split(model)
  cfg = model.cfg
  b = tokens.shape[0]
  cache = im.KVCache.init(cfg, b, 16)
  first, _, cache = im.prefill(graphdef, state, cache, tokens[:, :5], np.full((b,), 5))
  logits, hidden, _ = im.verify(graphdef, state, cache, tokens[:, 5:], taps=taps)
  return np.asarray(first), np.asarray(logits), np.asarray(hidden)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_unrolled_equals_stacked(name):
  model = _model(name)
  cfg = model.cfg
  tokens = np.random.default_rng(1).integers(0, cfg.vocab_size, (2, 9)).astype(np.int32)
  taps = (0, cfg.num_layers - 1)
  want = _run(model, tokens, taps)
  fast = unrolled.unroll(_copy(model))
  assert unrolled.layout_of(fast) == "unrolled" and unrolled.layout_of(model) == "stacked"
  got = _run(fast, tokens, taps)
  for w, g in zip(want, got):
    np.testing.assert_allclose(g, w, atol=2e-5, rtol=1e-5)
  graphdef, state = nnx.split(fast)  # decode too
  cache = im.KVCache.init(cfg, 2, 16)
  _, _, cache = im.prefill(graphdef, state, cache, tokens[:, :5], np.full((2,), 5))
  logits, _, cache = im.decode(graphdef, state, cache, jnp.asarray(tokens[:, 5]))
  np.testing.assert_allclose(np.asarray(logits), want[1][:, 0], atol=2e-5, rtol=1e-5)
  np.testing.assert_array_equal(np.asarray(cache.lengths), [6, 6])


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_layouts_round_trip_exactly(name):
  model = _model(name)
  before = {k: np.asarray(v) for k, v in model.layers.params().items()}
  back = unrolled.stack(unrolled.unroll(_copy(model)))
  assert unrolled.layout_of(back) == "stacked"
  after = back.layers.params()
  assert set(after) == set(before)
  for key, value in before.items():
    np.testing.assert_array_equal(np.asarray(after[key]), value, err_msg=key)


def _oracle_logits(cfg, model, tokens):
  """FP64 numpy forward of a model from its (dequantized) stacked parameters."""
  layers = model.layers.stacked_params(cfg)
  embed = np.asarray(model.embed[...], np.float64)
  head = embed.T if cfg.tie_embeddings else np.asarray(model.lm_head[...], np.float64)
  t = tokens.shape[0]
  x = embed[tokens]
  pos = np.arange(t, dtype=np.float64)
  mask = np.tril(np.ones((t, t), bool))
  for i in range(cfg.num_layers):
    x = _np_oracle.layer(cfg, _np_oracle.layer_params(layers, i), x, pos, mask)
  return _np_oracle.rms(x, np.asarray(model.final_norm[...], np.float64), cfg.norm_eps) @ head


@pytest.mark.parametrize("weights", ["bfloat16", "int8"])
@pytest.mark.parametrize("name", ["qwen3", "qwen2"])
def test_reduced_precision_equals_fp64_model_of_its_weights(name, weights):
  model = unrolled.unroll(_model(name), weights)
  cfg = model.cfg
  kinds = {layer.qkv[...].dtype for layer in model.layers.layers}
  assert kinds == {jnp.dtype(weights)}
  tokens = np.random.default_rng(2).integers(0, cfg.vocab_size, (1, 8)).astype(np.int32)
  graphdef, state = nnx.split(model)
  logits, _ = im.forward(graphdef, state, jnp.asarray(tokens))
  want = _oracle_logits(cfg, model, tokens[0])
  np.testing.assert_allclose(np.asarray(logits[0]), want, atol=2e-4, rtol=1e-4)


def test_int8_quantization_error_is_half_a_step():
  w = np.random.default_rng(3).normal(size=(40, 24)).astype(np.float32)
  w[:, 5] = 0.0  # an all-zero column keeps a usable scale
  q, scale = unrolled.quantize_int8(w)
  assert q.dtype == np.int8 and scale.shape == (24,) and np.all(scale > 0)
  assert np.all(np.abs(q.astype(np.float32) * scale - w) <= scale / 2 + 1e-7)
  np.testing.assert_array_equal(q[:, 5], 0)


def test_checkpoint_of_unrolled_model_is_stacked(tmp_path):
  model = _model("qwen3")
  cfg = model.cfg
  fast = unrolled.unroll(_copy(model))
  directory = im.save_checkpoint(tmp_path / "ckpt", cfg, fast)
  assert unrolled.layout_of(fast) == "unrolled"  # saving does not change the caller's model
  _, restored, _ = im.load_checkpoint(directory)
  for key, value in model.layers.params().items():
    np.testing.assert_array_equal(np.asarray(restored.layers.params()[key]), np.asarray(value))
  _, again, _ = im.load_checkpoint(directory, layout="unrolled")
  assert unrolled.layout_of(again) == "unrolled"
  with pytest.raises(ValueError, match="int8 weights"):
    im.save_checkpoint(tmp_path / "q", cfg, unrolled.unroll(_copy(model), "int8"))


def test_relayout_rejects_bad_arguments():
  model = _model("qwen2")
  with pytest.raises(ValueError, match="layout='diagonal' must be one of"):
    unrolled.relayout(model, "diagonal")
  with pytest.raises(ValueError, match="needs layout='unrolled'"):
    unrolled.relayout(model, "stacked", "int8")
  with pytest.raises(ValueError, match="weights='fp4' must be one of"):
    unrolled.relayout(model, "unrolled", "fp4")
