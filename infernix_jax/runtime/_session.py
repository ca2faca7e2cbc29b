"""The one place that turns a request into its constraint session (content constraint, tools)."""

from __future__ import annotations

import time
from typing import Any

from infernix_jax.runtime.types import ConstraintReport, GenerationRequest


def constraint_kind(spec: Any) -> str:
  """A short name for an OutputConstraint (grammar / json_schema / ...)."""
  return str(getattr(spec.kind, "value", spec.kind))


def build_session(request: GenerationRequest, compiler: Any):
  """Compiles the request's constraint (cache) and opens its constraint session.

  Args:
    request: the request; `constraint` None and `tools` None means unconstrained.
      `request.backend` (when set) overrides the constraint's own backend choice.
    compiler: an `infernix_jax.constrain.ConstraintCompiler` for the engine's vocabulary.

  Returns:
    (session or None, ConstraintReport or None).

  Raises:
    ConstraintError: the constraint is invalid or unsupported (user error, nothing queued).
  """
  framed = _framed_session(request, compiler)
  if framed is not None:
    return framed
  if request.constraint is None:
    return None, None
  compiled = compiler.compile(request.constraint, backend=request.backend)
  session = compiled.new_session()
  report = ConstraintReport(kind=constraint_kind(request.constraint), backend=compiled.backend)
  report.cache = compiled.cache_status
  report.compile_seconds = float(compiled.compile_seconds)
  return session, report


def _framed_session(request: GenerationRequest, compiler: Any):
  """Tools, or a content constraint after a thinking prompt: one framed grammar.

  Returns None when the plain content path applies; else (FramedSession or None, report).
  """
  from infernix_jax.constrain import framing

  t0 = time.perf_counter()
  prepared = framing.prepare_for_request(compiler.vocab, request.prompt_ids, tools=request.tools,
                                         tool_choice=request.tool_choice,
                                         constraint=request.constraint, compiler=compiler,
                                         backend=request.backend)
  if prepared is None:
    return None
  session = prepared.new_session()
  if session is None:  # tools on the free route (Automatic policy): decode only
    return None, None
  kind = constraint_kind(request.constraint) if request.constraint is not None else "tools"
  report = ConstraintReport(kind=kind, backend=prepared.compiled.backend, branch=session.branch)
  report.cache = prepared.compiled.cache_status
  report.compile_seconds = time.perf_counter() - t0
  return session, report
