"""The drafter registry: names, errors that list the known drafters, and a drafter written
the way the README shows (one file, no engine hooks) decoding exactly."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax.pallas import OneHotQ
from infernix_jax.runtime import Engine, GenerationRequest, drafters
from infernix_jax.runtime.drafters.base import Drafter, Proposal
from infernix_jax.testing import exact_oracle as h


@dataclasses.dataclass(frozen=True, eq=False)
class Repeat(Drafter):
  """The README's example: drafts the anchor K times."""

  name = "repeat"

  def propose(self, params, state, inp):
    drafts = np.repeat(np.asarray(inp.anchor, np.int32)[:, None], self.k, axis=1)  # [B, K]
    return Proposal(drafts, np.minimum(inp.limit, self.k).astype(np.int32), OneHotQ()), state


def test_names_and_errors():
  assert set(drafters.names()) >= {"none", "ngram", "jump", "draft", "mtp", "dflash", "dflash2"}
  with pytest.raises(ValueError, match="unknown drafter 'magic'.*ngram"):
    drafters.create("magic")
  with pytest.raises(ValueError, match="k=0 must be >= 1"):
    drafters.create("ngram", k=0)
  with pytest.raises(ValueError, match="draft model"):
    drafters.create("draft", k=2)
  with pytest.raises(ValueError, match="target model"):
    drafters.create("mtp", k=2)
  with pytest.raises(ValueError, match="already registered"):
    drafters.register("ngram", lambda o: None, help="")
  d = drafters.create("ngram", k=3, jump_forward=True)
  assert d.name == "jump+ngram" and d.k == 3 and not d.on_device
  assert drafters.create("none", k=2, jump_forward=True).name == "jump"


def test_custom_drafter_is_exact():
  """A drafter written as the README shows reproduces ordinary greedy decoding."""
  cfg, model = h.tiny_model()
  spec = ic.OutputConstraint.choice(["abc", "ab", "ba1", "cab", "x{y}"])
  reqs = lambda: [GenerationRequest([1, 1, 2, 1, 1, 2, 1], max_tokens=6,
                                    constraint=spec if i else None) for i in range(2)]
  want = Engine(model, h.toy_vocab(), None, lanes=2, capacity=32).generate(reqs())
  got = Engine(model, h.toy_vocab(), Repeat(k=3), lanes=2, capacity=32).generate(reqs())
  assert [r.token_ids for r in got] == [r.token_ids for r in want]
  assert sum(r.drafted for r in got) > 0
