"""The sampling law of one engine request: exact-finite laws cached across identical requests,
one-step laws created per request (they hold the request's own state)."""

from __future__ import annotations

import collections
import time
from typing import Any

from infernix_jax.faithful.law import ExactFiniteLaw
from infernix_jax.faithful.onestep import DEFAULT_CANDIDATES, OneStepLaw
from infernix_jax.faithful.trie import DEFAULT_MAX_DEPTH, DEFAULT_MAX_NODES, build


class LawCache:
  """Exact-finite laws by (compiled constraint, prompt, temperature); least recently used
  evicted. One-step laws are built fresh for every request (no trie, no forwards yet).

  Args:
    size: laws kept.
    max_nodes, max_depth: the token trie's budgets (`faithful.trie.build`).
    candidates: the tokens per position whose Φ̂ a one-step law evaluates (`OneStepLaw`).
  """

  def __init__(self, size: int = 32, *, max_nodes: int = DEFAULT_MAX_NODES,
               max_depth: int = DEFAULT_MAX_DEPTH, candidates: int = DEFAULT_CANDIDATES):
    self.size, self.max_nodes, self.max_depth = size, max_nodes, max_depth
    self.candidates = candidates
    self._laws: collections.OrderedDict = collections.OrderedDict()

  def get(self, request: Any, compiler: Any, graphdef: Any, state: Any,
          cfg: Any) -> tuple[ExactFiniteLaw | OneStepLaw, float]:
    """The request's law -> (law, seconds spent now: 0 on a cache hit).

    `onestep` gives a new `OneStepLaw` (any constraint; its forwards run while decoding and
    are counted in its `cost`); `exact-finite` an `ExactFiniteLaw` over the token trie.

    Raises:
      ConstraintError: the constraint is invalid; for exact-finite, its language too large
        (`LanguageTooLargeError`) or of probability 0.
    """
    t0 = time.perf_counter()
    compiled = compiler.compile(request.constraint, backend=request.backend)
    if request.sampling_law == "onestep":
      law = OneStepLaw(graphdef, state, cfg, request.prompt_ids, compiled, compiler.vocab,
                       candidates=self.candidates)
      return law, time.perf_counter() - t0
    t = float(request.sampling.temperature)
    tolerance = float(request.law_tolerance)
    key = (compiled.key, tuple(request.prompt_ids), t > 0 and t, request.sampling_law,
           t > 0 and tolerance)
    law = self._laws.get(key)
    if law is not None:
      self._laws.move_to_end(key)
      return law, 0.0
    kind = str(getattr(request.constraint.kind, "value", request.constraint.kind))
    source = str(request.constraint.source)
    name = f"the {kind} constraint {source[:60]!r}{'...' if len(source) > 60 else ''}"
    if t > 0 and tolerance == 0:
      trie = build(compiled.new_session(), compiler.vocab, max_nodes=self.max_nodes,
                   max_depth=self.max_depth, name=name)
      law = ExactFiniteLaw.compute(graphdef, state, cfg, request.prompt_ids, trie,
                                   compiler.vocab, t)
    else:  # greedy's certified argmax, or sampling within the tolerance: best first
      law = ExactFiniteLaw.search(graphdef, state, cfg, request.prompt_ids,
                                  compiled.new_session(), compiler.vocab, t,
                                  tolerance=tolerance, max_nodes=self.max_nodes,
                                  max_depth=self.max_depth, name=name)
    self._laws[key] = law
    while len(self._laws) > self.size:
      self._laws.popitem(last=False)
    return law, time.perf_counter() - t0
