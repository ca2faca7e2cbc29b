"""The request rules of the sampling laws: which requests a law other than `local` accepts."""

from __future__ import annotations

from typing import Any

from infernix_jax.errors import ParameterError, RequestConflictError

from infernix_jax.faithful.law import LAWS


def check_law(request: Any) -> None:
  """The sampling law's own rules: both laws other than `local` need an output constraint
  and no truncation, penalties or thinking budget; exact-finite also needs a finite
  language (onestep takes any constraint: grammars, JSON, regex, unbounded).

  Raises:
    ParameterError("sampling_law" | "law_tolerance"): an unknown law or a bad tolerance.
    RequestConflictError("sampling_law"): the request's other fields exclude the law.
  """
  law = request.sampling_law
  if law not in LAWS:
    raise ParameterError("sampling_law", f"sampling_law={law!r} must be one of "
                         f"{', '.join(LAWS)}")
  tolerance = request.law_tolerance
  if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not (
      0.0 <= tolerance < 1.0):
    raise ParameterError("law_tolerance", f"law_tolerance={tolerance!r} must be a number in "
                         f"[0, 1) (the total variation to μ* allowed; 0 = exact)")
  if tolerance and law != "exact-finite":
    raise RequestConflictError("law_tolerance", f"law_tolerance={tolerance!r} applies to "
                               f"sampling_law='exact-finite' only (got sampling_law={law!r})")
  if law == "local":
    return
  if request.constraint is None or request.tools is not None:
    got = "tools" if request.tools is not None else "no constraint"
    if law == "exact-finite":
      raise RequestConflictError(
          "sampling_law", f"sampling_law={law!r} needs a finite output constraint (a choice, "
          f"an enum-only JSON Schema with max_whitespace=0, a bounded grammar) and no tools; "
          f"got {got}")
    raise RequestConflictError(
        "sampling_law", f"sampling_law={law!r} needs an output constraint (a grammar, JSON "
        f"Schema, regex or choice) and no tools; got {got}")
  s = request.sampling
  used = [name for name, off in (("top_k", 0), ("top_p", 1.0), ("min_p", 0.0),
                                 ("presence_penalty", 0.0), ("frequency_penalty", 0.0),
                                 ("repetition_penalty", 1.0))
          if getattr(s, name) != off]
  if used:
    raise RequestConflictError(
        "sampling_law", f"sampling_law={law!r} cannot be combined with {', '.join(used)}: "
        f"truncation and penalties have no defined meaning under the whole-output law μ*; "
        f"leave them at their defaults or use sampling_law='local'")
  if request.min_tokens:
    raise RequestConflictError(
        "sampling_law", f"sampling_law={law!r} cannot be combined with min_tokens: the law "
        f"is over the constraint's whole outputs as they are; leave min_tokens at 0")
  if request.thinking_budget is not None:
    raise RequestConflictError(
        "sampling_law", f"sampling_law={law!r} cannot be combined with thinking_budget: the "
        f"law covers the constrained content only")
  if law == "exact-finite":
    from infernix_jax.constrain.errors import ConstraintError
    from infernix_jax.faithful.trie import check_finite_kind
    try:
      check_finite_kind(request.constraint)
    except ConstraintError as e:
      raise RequestConflictError("sampling_law", str(e)) from None
