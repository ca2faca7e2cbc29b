"""Grammar-faithful sampling laws: μ*(y) ∝ p(y)·[y ∈ L] instead of the locally projected law
(p: the product of the per-token tempered distributions softmax(logits / T)).

`trie.build` walks a constraint session into the token trie of a finite language;
`law.ExactFiniteLaw.compute` runs the target over it (tree-attention forwards) and holds the
exact future validity Φ, the Doob-transformed next-token law p*, sampling and greedy;
`law.ExactFiniteLaw.search` grows the trie best first instead (`search.expand`): greedy's
exact argmax without the whole trie, or sampling within a certified TV tolerance;
`LawCache` builds the law of one engine request (`sampling_law='exact-finite'` or, as
`onestep.OneStepLaw`, the one-step estimate for any constraint with forwards while decoding).
"""

from infernix_jax.faithful.law import GREEDY_BLOCK, LAWS, ExactFiniteLaw
from infernix_jax.faithful.onestep import OneStepLaw
from infernix_jax.faithful.request import LawCache, target_fingerprint
from infernix_jax.faithful.target import ForwardCost, log_phi, node_logprobs
from infernix_jax.faithful.trie import (DEFAULT_MAX_DEPTH, DEFAULT_MAX_NODES,
                                        LanguageTooLargeError, MaxTokensTooSmallError,
                                        TokenTrie, build, check_finite_kind,
                                        check_max_tokens)

__all__ = [
    "DEFAULT_MAX_DEPTH", "DEFAULT_MAX_NODES", "GREEDY_BLOCK", "LAWS", "ExactFiniteLaw",
    "ForwardCost", "LanguageTooLargeError", "LawCache", "MaxTokensTooSmallError", "OneStepLaw",
    "TokenTrie", "build", "check_finite_kind", "check_max_tokens", "log_phi", "node_logprobs",
    "target_fingerprint",
]
