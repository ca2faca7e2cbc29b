"""Compiling framed grammars over the constraint layer's one tokenizer index.

Framing accepts ``</think>`` and ``<tool_call>`` by id (``Token(id)``); the shared index
(`infernix_jax.constrain._xgr.tokenizer_info`) spells each non-EOS control token as 0xFF + its
spelling, so token-level rules match it while no byte-level rule (text, JSON, regex, separator)
ever can. EOS ids stay stop tokens.
"""

from __future__ import annotations

from typing import Any

from infernix_jax.constrain import _xgr


def compile_framed(vocab, ebnf: str) -> Any:
  """Compiles a framed grammar's EBNF text (entry ``root``)."""
  return _xgr.compile_grammar(vocab, ebnf)
