"""Grammar-faithful sampling laws: μ*(y) ∝ p(y)·[y ∈ L] instead of the locally projected law.

`trie.build` walks a constraint session into the token trie of a finite language;
`law.ExactFiniteLaw.compute` runs the target over it (batched cached forwards) and holds the
exact future validity Φ, the Doob-transformed next-token law p*, sampling and greedy;
`LawCache` builds both for one engine request (the engine's `sampling_law='exact-finite'`).
"""

from infernix_jax.faithful.law import GREEDY_BLOCK, LAWS, ExactFiniteLaw
from infernix_jax.faithful.request import LawCache
from infernix_jax.faithful.target import ForwardCost, log_phi, node_logprobs
from infernix_jax.faithful.trie import (DEFAULT_MAX_DEPTH, DEFAULT_MAX_NODES,
                                        LanguageTooLargeError, TokenTrie, build,
                                        check_finite_kind)

__all__ = [
    "DEFAULT_MAX_DEPTH", "DEFAULT_MAX_NODES", "GREEDY_BLOCK", "LAWS", "ExactFiniteLaw",
    "ForwardCost", "LanguageTooLargeError", "LawCache", "TokenTrie", "build",
    "check_finite_kind", "log_phi", "node_logprobs",
]
