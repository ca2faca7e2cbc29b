"""The engine: lanes, jitted Forward/Finish stages, host bridge, drafters, commit protocol, CLI.

  from infernix_jax import runtime as rt
  engine = rt.Engine(model, vocab, rt.JumpForward(k=4, inner=rt.NGramDrafter(k=4)), lanes=4)
  [result] = engine.generate([rt.GenerationRequest(prompt_ids, constraint=spec)])
"""

from infernix_jax.runtime.drafters import (Drafter, JumpForward, NGramDrafter, NoDrafter,
                                           Proposal)
from infernix_jax.runtime.engine import BRIDGES, Engine
from infernix_jax.runtime.errors import (CapacityError, ConstraintDeadEnd, GenerationError,
                                         NonFiniteLogits, RequestCancelled,
                                         StateIntegrityError)
from infernix_jax.runtime.types import (ConstraintReport, FinishReason, GenerationRequest,
                                        GenerationResult, RoundStat, SamplingOptions,
                                        TokenEvent)

__all__ = [
    "BRIDGES", "CapacityError", "ConstraintDeadEnd", "ConstraintReport", "Drafter", "Engine",
    "FinishReason", "GenerationError", "GenerationRequest", "GenerationResult", "JumpForward",
    "NGramDrafter", "NoDrafter", "NonFiniteLogits", "Proposal", "RequestCancelled",
    "RoundStat", "SamplingOptions", "StateIntegrityError", "TokenEvent",
]
