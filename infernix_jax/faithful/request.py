"""The sampling law of one engine request: exact-finite laws cached across identical requests,
one-step laws created per request (they hold the request's own state)."""

from __future__ import annotations

import collections
import hashlib
import time
import weakref
from typing import Any

import numpy as np

from infernix_jax.faithful.law import ExactFiniteLaw
from infernix_jax.faithful.onestep import DEFAULT_CANDIDATES, OneStepLaw
from infernix_jax.faithful.trie import (DEFAULT_MAX_DEPTH, DEFAULT_MAX_NODES, build,
                                        check_max_tokens)


# id(state) -> (a weak reference to that state, its fingerprint): one fingerprint per state
# object (the reference tells a live state from a new one that reuses a freed id).
_FINGERPRINTS: dict[int, tuple[weakref.ref, str]] = {}
_SAMPLED_LEAVES = 3  # parameter arrays hashed: the first, middle and last leaf of the state
_CORNER = 8  # their leading and trailing [8, 8, ...] blocks are hashed exactly


def target_fingerprint(cfg: Any, state: Any) -> str:
  """A stable name of the target model: its config and a hash of a few parameter arrays.

  The hash covers the config's repr and, for the first, middle and last parameter arrays of
  `state` (in pytree order), their path, shape and dtype, the exact values of their leading
  and trailing 8 x 8 x ... blocks, and their float32 sum. Two checkpoints of one architecture
  differ there; the same weights give the same name in every process. Computed once per state
  object (the engine's `state` never changes), so a cache hit costs a dict lookup.

  Args:
    cfg: the target's ModelConfig.
    state: its parameters (`nnx.split(model)[1]`).

  Returns:
    16 hex digits.
  """
  import jax  # local: faithful's host code reads parameters only here
  import jax.numpy as jnp
  hit = _FINGERPRINTS.get(id(state))
  if hit is not None and hit[0]() is state:
    return hit[1]
  h = hashlib.sha256(repr(cfg).encode())
  leaves = jax.tree_util.tree_flatten_with_path(state)[0]
  picks = sorted({0, len(leaves) // 2, len(leaves) - 1}) if leaves else []
  for i in picks[:_SAMPLED_LEAVES]:
    path, leaf = leaves[i]
    h.update(f"{jax.tree_util.keystr(path)}{tuple(leaf.shape)}{leaf.dtype}".encode())
    for corner in (slice(None, _CORNER), slice(-_CORNER, None)):
      h.update(np.ascontiguousarray(jax.device_get(leaf[(corner,) * leaf.ndim])).tobytes())
    h.update(np.float32(jax.device_get(jnp.sum(leaf.astype(jnp.float32)))).tobytes())
  name = h.hexdigest()[:16]
  try:
    ref = weakref.ref(state, lambda _, key=id(state): _FINGERPRINTS.pop(key, None))
  except TypeError:  # a state that takes no weak reference: hashed on every call
    return name
  _FINGERPRINTS[id(state)] = (ref, name)
  return name


class LawCache:
  """Exact-finite laws by (target, compiled constraint, prompt, temperature); least recently
  used evicted. One-step laws are built fresh for every request (no trie, no forwards yet).

  The key names the target (`target_fingerprint`: its config and a hash of a few parameter
  arrays), so one cache shared by engines over different targets never hands one target's law
  to another's request.

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
        (`LanguageTooLargeError`) or of probability 0, or the request's max_tokens below an
        output of the law (`MaxTokensTooSmallError`: greedy's output, or the longest member
        the law samples), which the engine would cut.
    """
    t0 = time.perf_counter()
    compiled = compiler.compile(request.constraint, backend=request.backend)
    if request.sampling_law == "onestep":
      law = OneStepLaw(graphdef, state, cfg, request.prompt_ids, compiled, compiler.vocab,
                       candidates=self.candidates)
      return law, time.perf_counter() - t0
    t = float(request.sampling.temperature)
    tolerance = float(request.law_tolerance)
    key = (target_fingerprint(cfg, state), compiled.key, tuple(request.prompt_ids),
           t > 0 and t, request.sampling_law, t > 0 and tolerance)
    kind = str(getattr(request.constraint.kind, "value", request.constraint.kind))
    source = str(request.constraint.source)
    name = f"the {kind} constraint {source[:60]!r}{'...' if len(source) > 60 else ''}"
    law = self._laws.get(key)
    if law is not None:
      self._laws.move_to_end(key)
      _check_length(law, request.max_tokens, greedy=t <= 0, name=name)
      return law, 0.0
    if t > 0 and tolerance == 0:
      trie = build(compiled.new_session(), compiler.vocab, max_nodes=self.max_nodes,
                   max_depth=self.max_depth, name=name)
      # Refused before the forwards: the whole trie already knows its longest member.
      check_max_tokens(trie.longest_member(), request.max_tokens, name=name)
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
    # Checked once cached: a later request with a larger max_tokens reuses the law.
    _check_length(law, request.max_tokens, greedy=t <= 0, name=name)
    return law, time.perf_counter() - t0


def _check_length(law: ExactFiniteLaw, max_tokens: int, *, greedy: bool, name: str) -> None:
  """Refuses a max_tokens that would cut an output the law produces: greedy's one output,
  or, sampling, the longest member of the law's trie (the whole trie, or the members a
  best-first search found: the law never leaves them)."""
  if greedy:
    check_max_tokens(len(law.greedy_path), max_tokens, name=name,
                     what="greedy's output (the most probable member)")
  else:
    what = ("its longest member" if law.stop == "complete" else
            "the longest member the best-first search kept")
    check_max_tokens(law.trie.longest_member(), max_tokens, name=name, what=what)
