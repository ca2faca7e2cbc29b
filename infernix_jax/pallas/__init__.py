"""Kernels that consume packed grammar masks: masked sampling, speculative acceptance over
chains and trees."""

from infernix_jax.pallas import rng
from infernix_jax.pallas._sampling import unpack_legal
from infernix_jax.pallas._types import (FLAG_DEAD_END, FLAG_EMPTY, FLAG_NONFINITE,
                                        PURPOSE_SAMPLE, SPARSE_Q_WIDTH, DenseQ, OneHotQ,
                                        SamplingParams, SparseQ, pack_ids)
from infernix_jax.pallas.dispatch import masked_sample, resolve_impl, spec_accept, tree_accept
from infernix_jax.pallas.masked_sample import (BlockSizes, masked_probs_reference,
                                               masked_sample_kernel,
                                               masked_sample_reference)
from infernix_jax.pallas.spec_accept import (SpecResult, spec_accept_kernel,
                                             spec_accept_one_residual, spec_accept_reference)
from infernix_jax.pallas.token_logprobs import TokenLogprobs, token_logprobs_reference
from infernix_jax.pallas.tree_accept import (TreeResult, tree_accept_kernel,
                                             tree_accept_reference)
from infernix_jax.pallas.tree_accept_parallel import tree_accept_one_residual

__all__ = [
    "FLAG_DEAD_END", "FLAG_EMPTY", "FLAG_NONFINITE", "PURPOSE_SAMPLE", "SPARSE_Q_WIDTH",
    "BlockSizes", "DenseQ", "OneHotQ", "SamplingParams", "SparseQ", "SpecResult",
    "masked_probs_reference", "masked_sample", "masked_sample_kernel",
    "masked_sample_reference", "pack_ids", "resolve_impl",
    "rng", "spec_accept", "spec_accept_kernel", "spec_accept_one_residual",
    "spec_accept_reference", "unpack_legal",
    "TokenLogprobs", "token_logprobs_reference",
    "TreeResult", "tree_accept", "tree_accept_kernel", "tree_accept_one_residual",
    "tree_accept_reference",
]
