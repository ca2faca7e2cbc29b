"""Request preparation: tools + choice + content constraint + phase -> a session factory."""

from __future__ import annotations

import dataclasses
from typing import Sequence

from infernix_jax.constrain.framing.decoder import OutputDecoder
from infernix_jax.constrain.framing.grammar import ContentGrammar, FramedGrammar, build_grammar
from infernix_jax.constrain.framing.session import CompiledFraming, FramedSession
from infernix_jax.constrain.framing.thinking import OutputPhase, QwenFraming
from infernix_jax.constrain.framing.tools import ToolChoice, ToolDefinition


@dataclasses.dataclass(frozen=True)
class PreparedOutput:
  """What a request needs at submit: the compiled framing (or None) and decoding facts.

  Attributes:
    framed: the language and decoding facts.
    compiled: the compiled grammar, or None when nothing is constrained (free route).
  """
  framed: FramedGrammar
  compiled: CompiledFraming | None
  vocab: object

  @property
  def constrained(self) -> bool:
    return self.compiled is not None

  def new_session(self) -> FramedSession | None:
    """A fresh framed session (None on the free route: decode with `new_decoder`)."""
    return None if self.compiled is None else self.compiled.new_session()

  def new_decoder(self, *, constrained: bool = False) -> OutputDecoder:
    """A streaming decoder: by default for the free route (malformed calls are published as
    content); ``constrained=True`` for the grammar route (unreadable output raises)."""
    fg = self.framed
    return OutputDecoder(self.vocab, fg.framing, fg.phase, fg.contracts,
                         tools_active=fg.tools_active, constrained=constrained)


def prepare_output(vocab, phase: OutputPhase, *, tools: Sequence[ToolDefinition] = (),
                   choice: ToolChoice | None = None, content=None,
                   compiler=None, backend: str | None = None) -> PreparedOutput:
  """Validates and compiles a request's output language (raises ConstraintError first).

  Args:
    vocab: the Vocabulary (a Qwen-family one: control tokens are looked up by id).
    phase: where the rendered prompt leaves the model (`phase_of_prompt`).
    tools: declared tools.
    choice: call policy (default auto, Basic).
    content: an optional `OutputConstraint` for the content.
    compiler: the `ConstraintCompiler` whose cache the framed grammar compiles through
      (default: the vocabulary's shared one, `ConstraintCompiler.for_vocab`).
    backend: the constraint backend the framed grammar compiles on (None or "auto":
      xgrammar; e.g. "llguidance").

  Raises:
    ConstraintError: invalid tools, choice or content; UnsupportedConstraintError when the
      backend cannot express framed grammars.
  """
  from infernix_jax.constrain.compiler import ConstraintCompiler
  from infernix_jax.constrain.framing._compile import compile_framed
  from infernix_jax.constrain.framing._convert import content_ebnf

  framing = vocab.lazy("framing.QwenFraming", lambda: QwenFraming.from_vocab(vocab))
  cg = None
  if content is not None:
    ebnf, is_json = content_ebnf(content)
    cg = ContentGrammar(ebnf, is_json)
  fg = build_grammar(framing, phase, tools=tools, choice=choice, content=cg)
  compiler = ConstraintCompiler.for_vocab(vocab) if compiler is None else compiler
  return PreparedOutput(fg, compile_framed(compiler, fg, backend), vocab)
