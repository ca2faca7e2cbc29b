"""The GPU path lowers to Triton IR on any machine (cross-platform lowering, no GPU needed).

This catches primitives the Pallas Triton backend cannot lower (and literal branch results)
before a GPU session; compiling and running the IR is ``scripts/gpu_check.sh``'s job.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from infernix_jax import pallas as ip

R, B, K, V, VM = 4, 2, 3, 1000, 1024


def _lower(fn, *args):
  return jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_masked_sample_lowers_to_triton(dtype):
  text = _lower(lambda *a: ip.masked_sample_kernel(*a, vocab_size=V),
                jnp.zeros((R, VM), dtype), jnp.zeros((R, 32), jnp.int32),
                jnp.ones((R,), bool), ip.SamplingParams.create(R),
                jnp.zeros((R,), jnp.uint32), jnp.zeros((R,), jnp.int32))
  assert "xla.gpu.triton" in text and 'name = "masked_sample"' in text


@pytest.mark.parametrize("q", [ip.OneHotQ(),
                               ip.SparseQ(jnp.zeros((B, K, 16), jnp.int32),
                                          jnp.zeros((B, K, 16), jnp.float32)),
                               ip.DenseQ(jnp.zeros((B, K, VM), jnp.float32))],
                         ids=["onehot", "sparse", "dense"])
def test_spec_accept_lowers_to_triton(q):
  text = _lower(lambda *a: ip.spec_accept_kernel(*a[:6], q, *a[6:], vocab_size=V),
                jnp.zeros((B, K + 1, VM), jnp.bfloat16), jnp.zeros((B, K + 1, 32), jnp.int32),
                jnp.ones((B,), bool), jnp.zeros((B, K + 1), jnp.int8),
                jnp.zeros((B, K), jnp.int32), jnp.full((B,), K, jnp.int32),
                ip.SamplingParams.create(B), jnp.zeros((B,), jnp.uint32),
                jnp.zeros((B,), jnp.int32))
  assert "xla.gpu.triton" in text and 'name = "spec_accept"' in text
