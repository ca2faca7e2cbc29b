"""Transitional alias of `infernix_jax.pallas.rng` (the public module) for importers that
still use the old private name; new code imports `infernix_jax.pallas.rng`."""

from infernix_jax.pallas.rng import (ACCEPT_COUNTER, gumbel, random_bits, small_uniform,
                                     stream_key, uniform)

__all__ = ["ACCEPT_COUNTER", "gumbel", "random_bits", "small_uniform", "stream_key", "uniform"]
