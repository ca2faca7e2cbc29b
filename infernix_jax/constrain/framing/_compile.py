"""Compiling framed grammars through the constraint layer's one compile cache, on any backend.

A framed grammar is an `OutputConstraint.grammar(ebnf)` with ``framing="qwen"`` (or
``"hermes"``) on the request's backend (`framing_backend`: xgrammar by default, llguidance, or
any registered backend that can express it; the others raise UnsupportedConstraintError), so
it shares the `ConstraintCompiler`'s cache, byte budget, concurrent-build sharing and
cold-compile slots with every content constraint. Framing accepts ``</think>`` and
``<tool_call>`` by id (``Token(id)``); both backends' tokenizer indexes spell each non-EOS
control token as 0xFF + its spelling, so token-level rules match it while no byte-level rule
(text, JSON, regex, separator) ever can. EOS ids stay stop tokens.
"""

from __future__ import annotations

from infernix_jax.constrain.framing.grammar import FramedGrammar
from infernix_jax.constrain.framing.session import CompiledFraming
from infernix_jax.constrain.spec import OutputConstraint

FRAMING = "qwen"  # the framing name a framed grammar carries (part of its cache identity)
DEFAULT_BACKEND = "xgrammar"  # what None and "auto" mean for a framed grammar


def framing_backend(backend: str | None) -> str:
  """The backend a framed grammar compiles on: ``backend``, or xgrammar for None / "auto".

  Raises:
    ValueError: an unknown backend name (the message lists the registered ones).
  """
  from infernix_jax.constrain import backends

  if backend is None or backend == backends.AUTO:
    return DEFAULT_BACKEND
  backends.get(backend)
  return backend


def framed_constraint(framed: FramedGrammar, backend: str | None = None) -> OutputConstraint:
  """The constraint a framed grammar compiles as (its EBNF text is its identity)."""
  return OutputConstraint.grammar(framed.ebnf).with_framing(FRAMING).with_backend(
      framing_backend(backend))


def compile_framed(compiler, framed: FramedGrammar,
                   backend: str | None = None) -> CompiledFraming | None:
  """Compiles ``framed`` with ``compiler`` (a ConstraintCompiler) on ``backend`` (None: the
  default); None when it constrains nothing (the free route).

  Raises:
    UnsupportedConstraintError: the backend cannot express framed grammars.
  """
  if framed.ebnf is None:
    return None
  return CompiledFraming(framed, compiler.compile(framed_constraint(framed, backend)))
