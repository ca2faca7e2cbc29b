"""The engine: lanes, one decode round over two host bridges, drafters, commit protocol, CLI.

  from infernix_jax import runtime as rt
  engine = rt.Engine(model, vocab, rt.drafters.create("ngram", k=4, jump_forward=True), lanes=4)
  [result] = engine.generate([rt.GenerationRequest(prompt_ids, constraint=spec)])
"""

from infernix_jax.runtime import drafters
from infernix_jax.runtime.drafters import (Drafter, JumpForward, NGramDrafter, NoDrafter,
                                           Proposal)
from infernix_jax.runtime._round import Timeline
from infernix_jax.runtime.engine import BRIDGES, Engine
from infernix_jax.runtime.errors import (CapacityError, ConstraintDeadEnd, GenerationError,
                                         NonFiniteLogits, RequestCancelled, SessionFailure,
                                         StateIntegrityError)
from infernix_jax.runtime.types import (ConstraintReport, FinishReason, GenerationRequest,
                                        GenerationResult, RoundStat, SamplingOptions,
                                        TokenEvent)

__all__ = [
    "BRIDGES", "CapacityError", "ConstraintDeadEnd", "ConstraintReport", "Drafter", "Engine",
    "FinishReason", "GenerationError", "GenerationRequest", "GenerationResult", "JumpForward",
    "NGramDrafter", "NoDrafter", "NonFiniteLogits", "Proposal", "RequestCancelled",
    "RoundStat", "SamplingOptions", "SessionFailure", "StateIntegrityError", "Timeline",
    "TokenEvent", "drafters",
]
