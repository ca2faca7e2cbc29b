"""The one user-error type that names its parameter; every surface renames `param` its own way."""

from __future__ import annotations

__all__ = ["ParameterError", "RequestConflictError"]


class ParameterError(ValueError):
  """A parameter is invalid. `param` names it in the library's spelling: a field of
  `runtime.EngineSpec`, `runtime.GenerationRequest` or `runtime.SamplingOptions`, a keyword of
  `LLM.prepare`, or `drafter_options.<field>`. The CLI turns it into a flag, the server into a
  JSON field; nobody parses the message.

  Attributes:
    param: the parameter at fault.
    message: what is wrong with it (and where inside it, for constraints and files).
  """

  def __init__(self, param: str, message: str):
    ValueError.__init__(self, f"{param}: {message}")
    self.param, self.message = param, message


def _conflict_base():
  from infernix_jax.constrain.errors import FeatureConflictError
  return FeatureConflictError


class RequestConflictError(ParameterError, _conflict_base()):
  """Request fields that cannot be combined (also a `constrain.FeatureConflictError`);
  `param` names the one to change."""

  def __init__(self, param: str, message: str):
    ParameterError.__init__(self, param, message)
    self.location = None
