"""Picks the Pallas kernel on GPU and the jnp reference elsewhere (overridable).

Override per call with ``impl="kernel" | "reference" | "interpret"`` or process-wide with the
environment variable ``INFERNIX_PALLAS_IMPL`` (same values, or ``auto``).
"""

from __future__ import annotations

import os

import jax

from infernix_jax.pallas import masked_sample as _ms
from infernix_jax.pallas import spec_accept as _sa
from infernix_jax.pallas import tree_accept as _ta
from infernix_jax.pallas._types import PURPOSE_SAMPLE, SamplingParams

_IMPLS = ("auto", "kernel", "reference", "interpret")


def resolve_impl(impl: str | None = None) -> str:
  """'kernel', 'reference' or 'interpret' for this process and backend."""
  impl = impl or os.environ.get("INFERNIX_PALLAS_IMPL", "auto")
  if impl not in _IMPLS:
    raise ValueError(f"{impl=} must be one of {_IMPLS} (argument or INFERNIX_PALLAS_IMPL)")
  if impl == "auto":
    return "kernel" if jax.default_backend() == "gpu" else "reference"
  return impl


def masked_sample(logits, mask, mask_enabled, params: SamplingParams, seed, position,
                  purpose: int = PURPOSE_SAMPLE, *, vocab_size: int, impl: str | None = None):
  """Masked sampling of one token per row (see ``masked_sample_reference`` for arguments).

  Returns:
    (tokens i32[R], flags i32[R]); flagged rows (FLAG_EMPTY, FLAG_NONFINITE) have token -1.
  """
  impl = resolve_impl(impl)
  if impl == "reference":
    return _ms.masked_sample_reference(logits, mask, mask_enabled, params, seed, position,
                                       purpose=purpose, vocab_size=vocab_size)
  return _ms.masked_sample_kernel(logits, mask, mask_enabled, params, seed, position,
                                  purpose=purpose, vocab_size=vocab_size,
                                  interpret=impl == "interpret")


def spec_accept(logits, mask, mask_enabled, states, drafts, n_drafts, q, params, seed,
                position, *, vocab_size: int, purpose: int = PURPOSE_SAMPLE,
                impl: str | None = None) -> _sa.SpecResult:
  """Speculative acceptance under masks (see ``spec_accept_reference`` for the math).

  Returns:
    SpecResult(accepted i32[B], tokens i32[B, P], flags i32[B]).
  """
  impl = resolve_impl(impl)
  if impl == "reference":
    return _sa.spec_accept_reference(logits, mask, mask_enabled, states, drafts, n_drafts, q,
                                     params, seed, position, vocab_size=vocab_size,
                                     purpose=purpose)
  return _sa.spec_accept_kernel(logits, mask, mask_enabled, states, drafts, n_drafts, q, params,
                                seed, position, vocab_size=vocab_size, purpose=purpose,
                                interpret=impl == "interpret")


def tree_accept(logits, mask, mask_enabled, states, tokens, parents, n_nodes, q, params, seed,
                position, *, vocab_size: int, purpose: int = PURPOSE_SAMPLE,
                impl: str | None = None) -> _ta.TreeResult:
  """Speculative acceptance over a token tree (see ``tree_accept_reference`` for the math).

  Returns:
    TreeResult(accepted i32[B], path i32[B, T], tokens i32[B, T], flags i32[B]).
  """
  impl = resolve_impl(impl)
  if impl == "reference":
    return _ta.tree_accept_reference(logits, mask, mask_enabled, states, tokens, parents,
                                     n_nodes, q, params, seed, position, vocab_size=vocab_size,
                                     purpose=purpose)
  return _ta.tree_accept_kernel(logits, mask, mask_enabled, states, tokens, parents, n_nodes, q,
                                params, seed, position, vocab_size=vocab_size, purpose=purpose,
                                interpret=impl == "interpret")
