"""Adapters to the other packages' APIs (models/, pallas/): the one place the engine calls them.

If a dependency's API drifts from docs/CONTRACTS.md, only this file changes.
"""

from __future__ import annotations


def verify(graphdef, state, cache, tokens, span=None, tree=None, taps=None):
  """Target verify over tokens [B, P] at each row's cache length, attending over the first
  `span` cache positions (None: all); `tree` = (depth, ancestors) scores a token tree's
  nodes instead of a sequence; `taps`: the layers whose outputs form `hidden` (None: the
  last) -> (logits, hidden, cache)."""
  from infernix_jax import models as im
  return im.verify(graphdef, state, cache, tokens, span=span, tree=tree, taps=taps)


def tree_accept(logits, mask, mask_enabled, states, tokens, parents, n_nodes, params, seed,
                position, vocab_size):
  """pallas tree_accept (one-hot q: tree drafters choose their nodes deterministically)."""
  from infernix_jax import pallas as ip
  return ip.tree_accept(logits, mask, mask_enabled, states, tokens, parents, n_nodes,
                        ip.OneHotQ(), params, seed, position, vocab_size=vocab_size)


def prefill(graphdef, state, cache, tokens, lengths, span=None, taps=None):
  """Target prefill of tokens [B, T] (lengths real), attending over the first `span` cache
  positions (None: all); `taps` as in `verify` -> (logits, hidden, cache)."""
  from infernix_jax import models as im
  return im.prefill(graphdef, state, cache, tokens, lengths, span=span, taps=taps)


def kv_cache_init(cfg, batch: int, capacity: int, dtype=None):
  from infernix_jax import models as im
  return im.KVCache.init(cfg, batch=batch, capacity=capacity, dtype=dtype)


def spec_accept(logits, mask, mask_enabled, states, drafts, n_drafts, q, params, seed,
                position, vocab_size):
  """pallas spec_accept (kernel on GPU, jnp reference on CPU)."""
  from infernix_jax import pallas as ip
  return ip.spec_accept(logits, mask, mask_enabled, states, drafts, n_drafts, q, params, seed,
                        position, vocab_size=vocab_size)


def token_logprobs(logits, mask, mask_enabled, tokens, params, vocab_size, top):
  """pallas token_logprobs_reference: log p of the produced tokens and the top-N per position."""
  from infernix_jax import pallas as ip
  return ip.token_logprobs_reference(logits, mask, mask_enabled, tokens, params,
                                     vocab_size=vocab_size, top=top)


def sampling_params(temperature, top_k, top_p, min_p, presence, frequency, history_ids,
                    history_counts, repetition, prompt_mask):
  """Per-row pallas SamplingParams from host arrays ([B] each; history [B, M]; prompt_mask
  [B, Wp], Wp = 0 when no lane has a repetition penalty)."""
  import jax.numpy as jnp
  from infernix_jax.pallas import SamplingParams
  return SamplingParams(
      temperature=jnp.asarray(temperature, jnp.float32), top_k=jnp.asarray(top_k, jnp.int32),
      top_p=jnp.asarray(top_p, jnp.float32), min_p=jnp.asarray(min_p, jnp.float32),
      presence_penalty=jnp.asarray(presence, jnp.float32),
      frequency_penalty=jnp.asarray(frequency, jnp.float32),
      history_ids=jnp.asarray(history_ids, jnp.int32),
      history_counts=jnp.asarray(history_counts, jnp.int32),
      repetition_penalty=jnp.asarray(repetition, jnp.float32),
      prompt_mask=jnp.asarray(prompt_mask, jnp.int32))


def pack_ids(ids, rows: int, width: int):
  """pallas `pack_ids`: packed bitsets i32[rows, ceil(width / 32)] of per-row id lists."""
  from infernix_jax.pallas import pack_ids as pack
  return pack(ids, rows, width)
