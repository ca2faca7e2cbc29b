"""The roofline projection: the published shapes give the published parameter counts, and the
speedup has its closed form where one roofline term dominates."""

from __future__ import annotations

import pytest

from experiments.runner import projection as pj
from infernix_jax.models import config as presets


def test_shapes_give_the_published_parameter_counts():
  def matmul(shape):
    return shape.num_layers * pj.layer_weights(shape) + pj.head_weights(shape)

  assert matmul(presets.SMOLLM2_135M) == pytest.approx(134.5e6, rel=0.01)  # tied: the head is it
  assert matmul(presets.QWEN3_0_6B) == pytest.approx(0.596e9, rel=0.02)  # 0.6B, tied embeddings
  # 8.2B in all with the untied embedding (0.62B) that a step does not multiply.
  untied = pj.head_weights(presets.QWEN3_8B)
  assert matmul(presets.QWEN3_8B) + untied == pytest.approx(8.19e9, rel=0.01)


def test_memory_bound_speedup_is_the_accepted_length():
  """One lane of an 8B target on an H200 is weight-bound: a verify over 5 positions costs a
  decode step, so a host drafter's speedup is its accepted length (less the KV term)."""
  s = pj.speedup(2.0, pj.H200, presets.QWEN3_8B, "ngram", 4, drafted_per_round=4.0, lanes=1,
                 context=256)
  assert 1.99 < s <= 2.0
  # A chain drafter pays K steps of one layer plus the head: (layer + head) / target weights.
  w = presets.QWEN3_8B
  draft_share = 4 * (pj.layer_weights(w) + pj.head_weights(w)) / (
      w.num_layers * pj.layer_weights(w) + pj.head_weights(w))
  s_mtp = pj.speedup(2.0, pj.H200, presets.QWEN3_8B, "mtp", 4, drafted_per_round=4.0, lanes=1,
                     context=256)
  assert s_mtp == pytest.approx(2.0 / (1 + draft_share), rel=0.02)


def test_compute_bound_verify_costs_its_positions():
  """Many lanes on a TPU v5e are compute-bound: a verify over P positions costs P decode
  steps, so drafting more than is accepted loses."""
  s = pj.speedup(1.5, pj.TPU_V5E, presets.QWEN3_8B, "ngram", 4, drafted_per_round=4.0, lanes=512,
                 context=128)
  assert s == pytest.approx(1.5 / 5, rel=0.05)
  with pytest.raises(ValueError, match="drafter 'mystery': no cost model"):
    pj.draft_seconds(pj.H200, presets.QWEN3_8B, "mystery", 4, lanes=1, context=1)


def test_dspark_pays_a_block_pass_and_k_head_steps():
  """DSpark: the backbone's two layers over K positions once, then per draft its gated-MLP
  head (W_in [2D, 2D], W_out [D, D]) and the LM head at one position."""
  w, hw = presets.QWEN3_8B, pj.H200
  step = lambda weights, positions, layers: (  # noqa: E731  the roofline, one lane
      max((2 * weights + 256 * layers * 2 * w.num_kv_heads * w.head_dim * 2)
          / hw.hbm_bytes_per_s,
          (2 * weights * positions + 4 * positions * 256 * layers * w.num_heads * w.head_dim)
          / hw.bf16_flops) + hw.step_overhead_s)
  want = (step(2 * pj.layer_weights(w), 4, 2)
          + 4 * step(5 * w.dim * w.dim + pj.head_weights(w), 1, 0))
  got = pj.draft_seconds(hw, w, "dspark", 4, lanes=1, context=256)
  assert got == pytest.approx(want, rel=1e-12)
  assert pj.draft_seconds(hw, w, "dflash", 4, lanes=1, context=256) < got
