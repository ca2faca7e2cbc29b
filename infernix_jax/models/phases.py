"""Jitted inference phases over `nnx.split(model)`: prefill, decode, verify, forward.

One jit boundary per phase, caches donated. Axis letters: B rows, T prompt length,
P verified positions (K drafts + anchor), D model width, Vm logits width.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from infernix_jax.models.kv_cache import KVCache

DEFAULT_CHUNK = 256  # prefill tokens per compiled call; longer prompts loop over chunks


@functools.partial(jax.jit, static_argnums=(0,), static_argnames=("taps", "span"),
                   donate_argnums=(2,))
def _prefill_chunk(graphdef, state, cache: KVCache, tokens, counts, last_logits, taps=None,
                   span=None):
  """One chunk: tokens [B, T] (T the chunk length), counts i32[B] valid tokens per row."""
  model = nnx.merge(graphdef, state)
  if taps is None:
    hidden, cache = model(tokens, cache, span=span)  # [B, T, D]
    final = hidden
  else:  # the logits still need the last layer: tap it too, split it off
    both, cache = model(tokens, cache, taps=(*taps, model.cfg.num_layers - 1), span=span)
    hidden, final = both[..., :-model.cfg.dim], both[..., -model.cfg.dim:]
  last = jnp.take_along_axis(final, jnp.maximum(counts - 1, 0)[:, None, None], axis=1)
  logits = model.logits(last[:, 0])  # [B, Vm]
  last_logits = jnp.where((counts > 0)[:, None], logits, last_logits)
  return last_logits, hidden, cache.with_lengths(cache.lengths + counts)


def prefill(graphdef, state, cache: KVCache, tokens, lengths, *, chunk: int = DEFAULT_CHUNK,
            taps: tuple[int, ...] | None = None, span: int | None = None):
  """Appends right-padded prompts to the cache in chunks of at most `chunk` tokens.

  Row b appends tokens[b, :lengths[b]] at its own offset cache.lengths[b]; padding is
  written to scratch positions and never committed.

  Args:
    graphdef: static graph of the model (`nnx.split`).
    state: model parameters.
    cache: donated KV cache.
    tokens: i32[B, T], right padded.
    lengths: i32[B], valid tokens per row (0 leaves a row untouched).
    chunk: tokens per compiled call; prompts longer than it are padded to a multiple.
    taps: layers whose outputs form `hidden` (see `Transformer.__call__`); None: the last.
    span: static; attention reads only the first `span` cache positions, which must hold
      every row's cache.lengths[b] + T (a prompt into empty rows: span = T); None: the whole
      capacity.

  Returns:
    (logits f32[B, Vm] at each row's last appended token (zeros for rows with
    lengths 0), hidden [B, T, D] (D * len(taps) with taps) before the final norm,
    cache with lengths advanced).
  """
  tokens = jnp.asarray(tokens, jnp.int32)
  lengths = jnp.asarray(lengths, jnp.int32)
  b, t = tokens.shape
  if t > chunk:
    padded = -(-t // chunk) * chunk
    tokens = jnp.pad(tokens, ((0, 0), (0, padded - t)))
  else:
    chunk = t
  vm = state["embed"][...].shape[0]
  last_logits = jnp.zeros((b, vm), jnp.float32)
  hiddens = []
  for start in range(0, tokens.shape[1], chunk):
    counts = jnp.clip(lengths - start, 0, chunk)
    last_logits, hidden, cache = _prefill_chunk(
        graphdef, state, cache, tokens[:, start:start + chunk], counts, last_logits, taps=taps,
        span=span)
    hiddens.append(hidden)
  hidden = hiddens[0] if len(hiddens) == 1 else jnp.concatenate(hiddens, axis=1)
  return last_logits, hidden[:, :t], cache


@functools.partial(jax.jit, static_argnums=(0,), static_argnames=("span",),
                   donate_argnums=(2,))
def decode(graphdef, state, cache: KVCache, tokens, span: int | None = None):
  """Appends one token per row and commits it.

  Args:
    tokens: i32[B], written at position cache.lengths[b].
    span: attend over the first `span` cache positions only (every row's length + 1 must
      fit); None: the whole capacity. Static: one compile per value.

  Returns:
    (logits f32[B, Vm], hidden [B, D], cache with lengths + 1).
  """
  model = nnx.merge(graphdef, state)
  hidden, cache = model(tokens[:, None], cache, span=span)  # [B, 1, D]
  return model.logits(hidden[:, 0]), hidden[:, 0], cache.with_lengths(cache.lengths + 1)


@functools.partial(jax.jit, static_argnums=(0,), static_argnames=("taps", "span"),
                   donate_argnums=(2,))
def verify(graphdef, state, cache: KVCache, tokens, taps: tuple[int, ...] | None = None,
           span: int | None = None, tree=None):
  """Scores P tokens per row ([anchor, d1..dK], or the nodes of a token tree) at each row's
  own offset.

  Keys/values are written at positions lengths[b] .. lengths[b] + P - 1 but lengths stay
  unchanged: the engine commits the accepted prefix with `cache.with_lengths(...)`.

  Args:
    tokens: i32[B, P].
    taps: layers whose outputs form `hidden` (drafter features); None: the last layer.
    span: attend over the first `span` cache positions only (every row's length + P must
      fit); None: the whole capacity. Static: one compile per value.
    tree: None (a sequence) or (depth i32[B, P], ancestors bool[B, P, P]): the tokens are
      the nodes of a token tree, as in `tree_verify` (node t at position lengths[b] +
      depth[b, t], K/V in slot lengths[b] + t).

  Returns:
    (logits f32[B, P, Vm], hidden [B, P, D] (D * len(taps) with taps) before the final
    norm, cache).
  """
  model = nnx.merge(graphdef, state)
  if taps is None:
    hidden, cache = model(tokens, cache, span=span, tree=tree)
    return model.logits(hidden), hidden, cache
  both, cache = model(tokens, cache, taps=(*taps, model.cfg.num_layers - 1), span=span,
                      tree=tree)
  d = model.cfg.dim
  return model.logits(both[..., -d:]), both[..., :-d], cache


@functools.partial(jax.jit, static_argnums=(0,), donate_argnums=(2,))
def tree_verify(graphdef, state, cache: KVCache, tokens, depth, ancestors):
  """Scores the nodes of a token tree in one call (tree attention) at each row's offset.

  Token t of row b is a tree node at position lengths[b] + depth[b, t] that reads the row's
  committed entries and the nodes u with ancestors[b, t, u] (its path from the tree's root,
  itself included), so its logits are the target's distribution after that path. Keys/values
  go to scratch slots lengths[b] .. lengths[b] + T - 1; lengths stay unchanged.

  Args:
    tokens: i32[B, T] the nodes' tokens (each ancestor before its descendants).
    depth: i32[B, T] each node's depth (the tree's root at 0).
    ancestors: bool[B, T, T].

  Returns:
    (logits f32[B, T, Vm], cache).
  """
  model = nnx.merge(graphdef, state)
  hidden, cache = model(tokens, cache, tree=(depth, ancestors))
  return model.logits(hidden), cache


@functools.partial(jax.jit, static_argnums=(0,))
def forward(graphdef, state, tokens):
  """Full causal forward without a persistent cache (tests, scoring): tokens [B, T].

  Returns:
    (logits f32[B, T, Vm], hidden [B, T, D]).
  """
  model = nnx.merge(graphdef, state)
  b, t = tokens.shape
  cache = KVCache.init(model.cfg, batch=b, capacity=t)
  hidden, _ = model(tokens, cache)
  return model.logits(hidden), hidden
