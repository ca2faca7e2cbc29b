"""Acceptance of a drafter on prompts, measured through the engine.

`acceptance` runs the prompts (chat framed, each with its constraint unless told otherwise)
and reads every round's (drafted, accepted): accepted length = tokens per round
(`runtime.accepted_length`: accepted drafts + the correction or bonus), acceptance at draft
position i = the share of rounds that drafted >= i whose first i drafts were all accepted.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Sequence

from infernix_jax.runtime.types import accepted_length
from infernix_jax.train.corpus import constraint_of, framed_ids
from infernix_jax.train.prompts import Prompt


@dataclasses.dataclass
class Acceptance:
  """What one drafter configuration did on a prompt set."""

  accepted_length: float  # tokens per round
  per_position: list[float]  # acceptance at draft positions 1..K
  tokens: int  # output tokens
  rounds: int
  seconds: float  # wall time of the timed generate call
  errors: int  # requests that ended in an error

  @property
  def tokens_per_second(self) -> float:
    return self.tokens / self.seconds if self.seconds > 0 else 0.0


def from_results(results, k: int, seconds: float) -> Acceptance:
  rounds = [r for res in results for r in res.rounds]
  tokens = sum(len(res.token_ids) for res in results)
  per_position = []
  for i in range(1, max(k, 1) + 1):
    drafted = [r for r in rounds if r.drafted >= i]
    per_position.append(sum(r.accepted >= i for r in drafted) / len(drafted) if drafted
                        else 0.0)
  accepted = sum(r.accepted for r in rounds)
  return Acceptance(accepted_length(accepted, len(rounds)), per_position, tokens,
                    len(rounds), seconds, sum(1 for r in results if r.error))


def requests_for(tok, prompts: Sequence[Prompt], *, constrained: bool = True,
                 temperature: float = 0.0, max_tokens: int | None = None, seed: int = 0):
  from infernix_jax.runtime import GenerationRequest, SamplingOptions
  return [GenerationRequest(framed_ids(tok, p), max_tokens=max_tokens or p.max_tokens,
                            constraint=constraint_of(p) if constrained else None,
                            sampling=SamplingOptions(temperature=temperature, seed=seed + i))
          for i, p in enumerate(prompts)]


def acceptance(engine, tok, prompts: Sequence[Prompt], *, constrained: bool = True,
               temperature: float = 0.0, max_tokens: int | None = None, seed: int = 0,
               warm: bool = True) -> Acceptance:
  """Runs `prompts` through `engine` (after one untimed warm pass when `warm`)."""
  requests = lambda: requests_for(tok, prompts, constrained=constrained,  # noqa: E731
                                  temperature=temperature, max_tokens=max_tokens, seed=seed)
  if warm:
    engine.generate(requests()[:engine.b])
  start = time.perf_counter()
  results = engine.generate(requests())
  return from_results(results, engine.k, time.perf_counter() - start)
