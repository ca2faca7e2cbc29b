"""Adapters to the other packages' APIs (models/, pallas/): the one place the engine touches them.

If a dependency's API drifts from docs/CONTRACTS.md, only this file changes.
"""

from __future__ import annotations

import numpy as np


def verify(graphdef, state, cache, tokens):
  """Target verify over tokens [B, P] at each row's cache length -> (logits, hidden, cache)."""
  from infernix_jax import models as im
  return im.verify(graphdef, state, cache, tokens)


def prefill(graphdef, state, cache, tokens, lengths):
  """Target prefill of tokens [B, T] (lengths real) -> (logits, hidden, cache)."""
  from infernix_jax import models as im
  return im.prefill(graphdef, state, cache, tokens, lengths)


def kv_cache_init(cfg, batch: int, capacity: int, dtype=None):
  from infernix_jax import models as im
  return im.KVCache.init(cfg, batch=batch, capacity=capacity, dtype=dtype)


def spec_accept(logits, mask, mask_enabled, states, drafts, n_drafts, q, params, seed,
                position, vocab_size):
  from infernix_jax import pallas as ip
  fn = getattr(ip, "spec_accept", None)
  if fn is None or not callable(fn):  # not exported yet: the jnp reference
    from infernix_jax.pallas.spec_accept import spec_accept_reference as fn
  return fn(logits, mask, mask_enabled, states, drafts, n_drafts, q, params, seed,
                        position, vocab_size=vocab_size)


def onehot_q():
  from infernix_jax.pallas._types import OneHotQ
  return OneHotQ()


def sparse_q(ids, probs):
  from infernix_jax.pallas._types import SparseQ
  return SparseQ(ids=ids, probs=probs)


def dense_q(probs):
  from infernix_jax.pallas._types import DenseQ
  return DenseQ(probs=probs)


def flag_bits() -> tuple[int, int, int]:
  """(DeadEnd reached, non-finite logits, empty legal set) flag bits of spec_accept."""
  from infernix_jax.pallas import _types as ip
  return (int(ip.FLAG_DEAD_END), int(ip.FLAG_NONFINITE), int(ip.FLAG_EMPTY))


def sampling_params(temperature, top_k, top_p, min_p, presence, frequency, history_ids,
                    history_counts):
  """Per-row pallas SamplingParams from host arrays ([B] each; history [B, Hmax])."""
  import jax.numpy as jnp
  from infernix_jax.pallas._types import SamplingParams
  return SamplingParams(
      temperature=jnp.asarray(temperature, jnp.float32), top_k=jnp.asarray(top_k, jnp.int32),
      top_p=jnp.asarray(top_p, jnp.float32), min_p=jnp.asarray(min_p, jnp.float32),
      presence_penalty=jnp.asarray(presence, jnp.float32),
      frequency_penalty=jnp.asarray(frequency, jnp.float32),
      history_ids=jnp.asarray(history_ids, jnp.int32),
      history_counts=jnp.asarray(history_counts, jnp.int32))


def np_i32(x) -> np.ndarray:
  return np.ascontiguousarray(np.asarray(x, dtype=np.int32))
