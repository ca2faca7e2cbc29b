"""The engine: lanes, one decode round over two host bridges, drafters, commit protocol.

  from infernix_jax import runtime as rt
  built = rt.build_engine(rt.EngineSpec(drafter="ngram", drafter_options={"k": 4}, lanes=4))
  [result] = built.engine.generate([rt.GenerationRequest(prompt_ids, constraint=spec)])

`build_engine` is the one assembly path (every surface calls it); `Engine(model, vocab,
drafter, ...)` directly is for engine unit tests over a model already in memory.
"""

from infernix_jax.runtime import drafters
from infernix_jax.runtime.drafters import (Drafter, JumpForward, NGramDrafter, NoDrafter,
                                           Proposal)
from infernix_jax.runtime._bridges import Timeline
from infernix_jax.runtime.build import Assembly, EngineSpec, Target, build_engine, load_target
from infernix_jax.runtime.engine import BRIDGES, Engine
from infernix_jax.runtime.errors import (CapacityError, ConstraintDeadEnd, GenerationError,
                                         NonFiniteLogits, RequestCancelled, SessionFailure,
                                         StateIntegrityError)
from infernix_jax.runtime.types import (ConstraintReport, FinishReason, GenerationRequest,
                                        GenerationResult, RoundStat, SamplingOptions,
                                        TokenEvent, TokenLogprob, accepted_length)

__all__ = [
    "Assembly", "BRIDGES", "CapacityError", "EngineSpec", "Target", "build_engine", "load_target", "ConstraintDeadEnd", "ConstraintReport", "Drafter", "Engine",
    "FinishReason", "GenerationError", "GenerationRequest", "GenerationResult", "JumpForward",
    "NGramDrafter", "NoDrafter", "NonFiniteLogits", "Proposal", "RequestCancelled",
    "RoundStat", "SamplingOptions", "SessionFailure", "StateIntegrityError", "Timeline",
    "TokenEvent", "TokenLogprob", "accepted_length", "drafters",
]
