"""The faithful study's local law: μ_proj rebuilt from the trie's node probabilities equals the
FP64 enumeration of ordinary (locally renormalized) decoding."""

from __future__ import annotations

import numpy as np
from flax import nnx

from experiments.studies import faithful as study
from infernix_jax import constrain as ic
from infernix_jax import faithful
from infernix_jax.testing import exact_oracle as h

CHOICES = (b"abc", b"ab", b"ba1", b"cab", b"x{y}")
PROMPT = (1, 1, 2, 1, 1, 2, 1)


def test_local_law_matches_fp64_ordinary_decoding():
  cfg, model = h.tiny_model()
  vocab = h.toy_vocab()
  spec = ic.OutputConstraint.choice([c.decode() for c in CHOICES])
  trie = faithful.build(ic.ConstraintCompiler(vocab).compile(spec).new_session(), vocab)
  graphdef, state = nnx.split(model)
  law = faithful.ExactFiniteLaw.compute(graphdef, state, cfg, PROMPT, trie, vocab, 1.0)
  local = study._local_law(law)
  got = {tuple(trie.path(int(i))): float(np.exp(local[i])) for i in np.flatnonzero(trie.member)}
  want = h.exact_distribution(cfg, model, PROMPT, vocab, 6, 1.0, choices=CHOICES)
  assert set(got) == set(want)
  np.testing.assert_allclose([got[k] for k in want], [want[k] for k in want], atol=2e-5)
  star = law.distribution()
  assert abs(sum(star.values()) - 1) < 1e-9 and study._tv(got, star) > 0.01  # they differ
