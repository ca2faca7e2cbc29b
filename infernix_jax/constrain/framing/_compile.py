"""Compiling framed grammars: a tokenizer index in which control tokens are matchable by id.

The constraint layer's index gives every control token an empty spelling, so the matcher
library treats it as special and refuses it everywhere. Framing must accept ``</think>`` and
``<tool_call>`` by id (``Token(id)``), so framed grammars use a second index of the same
vocabulary in which each non-EOS control token is spelled ``0xFF`` + its spelling: 0xFF never
occurs in UTF-8, so no byte-level rule (text, JSON, regex, separator) can ever match a
control token, while token-level rules match it by id. EOS ids stay stop tokens.
"""

from __future__ import annotations

from typing import Any

from infernix_jax.constrain import _xgr
from infernix_jax.constrain.vocab import CONTROL, ORDINARY

CONTROL_PREFIX = b"\xff"  # never valid UTF-8: control tokens stay out of every text rule


def framed_tokenizer_info(vocab) -> Any:
  """The matcher library's tokenizer index for framed grammars (built once per vocabulary)."""

  def build():
    cls = vocab.token_class
    enc = []
    for i, b in enumerate(vocab.token_bytes):
      if cls[i] == ORDINARY:
        enc.append(b)
      elif cls[i] == CONTROL:
        enc.append(CONTROL_PREFIX + b)
      else:  # EOS (stop tokens) and unused ids
        enc.append(b"")
    return _xgr.xgr.TokenizerInfo(enc, _xgr.xgr.VocabType.RAW, vocab_size=vocab.size,
                                  stop_token_ids=list(vocab.eos_ids), add_prefix_space=False)

  return vocab.lazy("xgrammar.TokenizerInfo.framed", build)


def framed_compiler(vocab) -> Any:
  """The grammar compiler over `framed_tokenizer_info` (one per vocabulary)."""
  info = framed_tokenizer_info(vocab)  # first: `lazy` holds a non-reentrant lock while building
  return vocab.lazy(
      "xgrammar.GrammarCompiler.framed",
      lambda: _xgr.xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False))


def compile_framed(vocab, ebnf: str) -> Any:
  """Compiles a framed grammar's EBNF text (entry ``root``)."""
  return framed_compiler(vocab).compile_grammar(ebnf, root_rule_name="root")
