"""Compiling framed grammars through the constraint layer's one compile cache.

A framed grammar is an `OutputConstraint.grammar(ebnf)` with ``framing="qwen"`` on the xgrammar
backend, so it shares the `ConstraintCompiler`'s cache, byte budget, concurrent-build sharing
and cold-compile slots with every content constraint. Framing accepts ``</think>`` and
``<tool_call>`` by id (``Token(id)``); the shared tokenizer index
(`infernix_jax.constrain._xgr.tokenizer_info`) spells each non-EOS control token as 0xFF + its
spelling, so token-level rules match it while no byte-level rule (text, JSON, regex,
separator) ever can. EOS ids stay stop tokens.
"""

from __future__ import annotations

from infernix_jax.constrain.framing.grammar import FramedGrammar
from infernix_jax.constrain.framing.session import CompiledFraming
from infernix_jax.constrain.spec import OutputConstraint

FRAMING = "qwen"  # the framing name a framed grammar carries (part of its cache identity)


def framed_constraint(framed: FramedGrammar) -> OutputConstraint:
  """The constraint a framed grammar compiles as (its EBNF text is its identity)."""
  return OutputConstraint.grammar(framed.ebnf).with_framing(FRAMING).with_backend("xgrammar")


def compile_framed(compiler, framed: FramedGrammar) -> CompiledFraming | None:
  """Compiles ``framed`` with ``compiler`` (a ConstraintCompiler); None when it constrains
  nothing (the free route)."""
  if framed.ebnf is None:
    return None
  return CompiledFraming(framed, compiler.compile(framed_constraint(framed)))
