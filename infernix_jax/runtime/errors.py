"""Per-request runtime failures: one failing row never fails its batch (DESIGN.md section 7)."""

from __future__ import annotations

from infernix_jax.constrain.errors import ConstraintError, FeatureConflictError
from infernix_jax.errors import ParameterError, RequestConflictError

__all__ = [
    "CapacityError",
    "ConstraintDeadEnd",
    "ConstraintError",
    "FeatureConflictError",
    "ParameterError",
    "RequestConflictError",
    "GenerationError",
    "NonFiniteLogits",
    "RequestCancelled",
    "SessionFailure",
    "StateIntegrityError",
]


class GenerationError(RuntimeError):
  """Base of the errors that end ONE request during generation (the batch goes on).

  Attributes:
    request_id: the request that failed.
    kind: a short stable name for results and JSON output ("dead_end", "non_finite", ...).
  """

  kind = "error"

  def __init__(self, message: str, request_id: str | None = None):
    super().__init__(message)
    self.request_id = request_id


class ConstraintDeadEnd(GenerationError):
  """Verification reached a prefix from which the constraint allows no next token.

  A request error, not an internal one: the grammar has no continuation of the committed
  output (e.g. a schema whose only completions exceed what the vocabulary can spell).
  Hypothetical dead ends that verification does not reach never raise this.
  """

  kind = "dead_end"


class NonFiniteLogits(GenerationError):
  """The target's logits left no finite choice (NaN/inf): an internal numerical error.

  Never reported as a user schema error; the row commits nothing this round.
  """

  kind = "non_finite"


class RequestCancelled(GenerationError):
  """The request was cancelled; it committed nothing in the round it was cancelled in."""

  kind = "cancelled"


class StateIntegrityError(GenerationError):
  """The constraint session refused the token the kernel produced under its own mask.

  Means a broken invariant (mask/session disagreement), never a user error.
  """

  kind = "integrity"


class CapacityError(ParameterError):
  """A request does not fit the engine (prompt + max_tokens + draft window > KV capacity)."""


class SessionFailure(GenerationError):
  """The request's constraint session raised while the engine drove it (lookahead, preview,
  commit, jump-forward or a streaming callback): that request ends, the batch goes on."""

  kind = "session"
