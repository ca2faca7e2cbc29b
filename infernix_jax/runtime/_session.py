"""The one place that turns a request into its constraint session (content constraint, tools)."""

from __future__ import annotations

import time
from typing import Any

from infernix_jax.constrain.errors import FeatureConflictError
from infernix_jax.runtime.types import ConstraintReport, GenerationRequest


def constraint_kind(spec: Any) -> str:
  """A short name for an OutputConstraint (grammar / json_schema / ...)."""
  return str(getattr(spec.kind, "value", spec.kind))


def check_request(request: GenerationRequest) -> None:
  """Rejects feature combinations before anything is queued.

  Raises:
    FeatureConflictError: extra stop strings together with a constraint or tools (constrained
      output ends through the grammar's own EOS rule); a sampling law other than "local"
      without an output constraint (exact-finite: a finite one), or with top_k / top_p /
      min_p / penalties / a thinking budget.
    ValueError: an invalid field (max_tokens, sampling, sampling_law, empty prompt).
  """
  request.sampling.validate()
  if request.max_tokens < 1:
    raise ValueError(f"max_tokens={request.max_tokens} must be >= 1")
  if not request.prompt_ids:
    raise ValueError("the prompt is empty: give at least one token")
  if request.thinking_budget is not None and not (
      isinstance(request.thinking_budget, int) and request.thinking_budget >= 0):
    raise ValueError(f"thinking_budget={request.thinking_budget!r} must be an int >= 0 or None")
  if request.max_drafts is not None and not (
      isinstance(request.max_drafts, int) and request.max_drafts >= 0):
    raise ValueError(f"max_drafts={request.max_drafts!r} must be an int >= 0 or None")
  constrained = request.constraint is not None or request.tools is not None
  _check_law(request)
  if constrained and request.stop:
    raise FeatureConflictError(
        "extra stop strings cannot be combined with an output constraint: a constrained "
        "output ends when the grammar accepts EOS; drop the stop strings or the constraint")


def _check_law(request: GenerationRequest) -> None:
  """The sampling law's own rules (`infernix_jax.faithful`): both laws need an output
  constraint and no truncation, penalties or thinking budget; exact-finite also needs a
  finite language (onestep takes any constraint: grammars, JSON, regex, unbounded)."""
  from infernix_jax import faithful
  law = request.sampling_law
  if law not in faithful.LAWS:
    raise ValueError(f"sampling_law={law!r} must be one of {', '.join(faithful.LAWS)}")
  tolerance = request.law_tolerance
  if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not (
      0.0 <= tolerance < 1.0):
    raise ValueError(f"law_tolerance={tolerance!r} must be a number in [0, 1) (the total "
                     f"variation to μ* allowed; 0 = exact)")
  if tolerance and law != "exact-finite":
    raise ValueError(f"law_tolerance={tolerance!r} applies to sampling_law='exact-finite' "
                     f"only (got sampling_law={law!r})")
  if law == "local":
    return
  if request.constraint is None or request.tools is not None:
    got = 'tools' if request.tools is not None else 'no constraint'
    if law == "exact-finite":
      raise FeatureConflictError(
          f"sampling_law={law!r} needs a finite output constraint (a choice, an enum-only "
          f"JSON Schema with max_whitespace=0, a bounded grammar) and no tools; got {got}")
    raise FeatureConflictError(
        f"sampling_law={law!r} needs an output constraint (a grammar, JSON Schema, regex or "
        f"choice) and no tools; got {got}")
  s = request.sampling
  used = [name for name, off in (("top_k", 0), ("top_p", 1.0), ("min_p", 0.0),
                                 ("presence_penalty", 0.0), ("frequency_penalty", 0.0))
          if getattr(s, name) != off]
  if used:
    raise FeatureConflictError(
        f"sampling_law={law!r} cannot be combined with {', '.join(used)}: truncation and "
        f"penalties have no defined meaning under the whole-output law μ*; leave them at "
        f"their defaults or use sampling_law='local'")
  if request.thinking_budget is not None:
    raise FeatureConflictError(
        f"sampling_law={law!r} cannot be combined with thinking_budget: the law covers the "
        f"constrained content only")
  if law == "exact-finite":
    faithful.check_finite_kind(request.constraint)


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
  report = ConstraintReport(kind=constraint_kind(request.constraint))
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
  report = ConstraintReport(kind=kind, branch=session.branch)
  report.cache = prepared.compiled.cache_status
  report.compile_seconds = time.perf_counter() - t0
  return session, report
