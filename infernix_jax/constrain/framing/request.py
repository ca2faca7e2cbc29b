"""Request-level entry: which requests get a framed session, and their decoded tool calls."""

from __future__ import annotations

from typing import Any, Sequence

from infernix_jax.constrain.errors import TokenReferenceError
from infernix_jax.constrain.framing.decoder import DecodedOutput
from infernix_jax.constrain.framing.prepare import PreparedOutput, prepare_output
from infernix_jax.constrain.framing.thinking import OutputPhase, QwenFraming, phase_of_prompt
from infernix_jax.constrain.framing.tools import (ToolChoice, ToolDefinition, parse_tools)


def _framing(vocab) -> QwenFraming | None:
  try:
    return vocab.lazy("framing.QwenFraming", lambda: QwenFraming.from_vocab(vocab))
  except TokenReferenceError:
    return None


def prepare_for_request(vocab, prompt_ids: Sequence[int], *, tools: Any = None,
                        tool_choice: Any = None, constraint: Any = None,
                        compiler: Any = None) -> PreparedOutput | None:
  """The framed output of a request, or None when the plain content path applies.

  Framing applies when tools are declared, or when a content constraint meets a prompt that
  leaves a Qwen-family model in (or before) its thinking phase.

  Args:
    vocab: the engine's Vocabulary.
    prompt_ids: the rendered prompt (its last thinking marker fixes the output phase).
    tools: ToolDefinitions, OpenAI-style definitions (list or JSON text), or None.
    tool_choice: a ToolChoice, "auto" / "none" / "required" / NAME, or None (auto).
    constraint: the content OutputConstraint or None.
    compiler: the engine's `ConstraintCompiler` (its cache holds the framed grammar);
      default: the vocabulary's shared one.

  Raises:
    ConstraintError: invalid tools, choice or combination (nothing is queued).
  """
  framing = _framing(vocab)
  if framing is None:
    if tools is not None:
      raise TokenReferenceError("tool calls need a Qwen-family vocabulary (<tool_call>, "
                                "</tool_call>, <think>, </think> control tokens)")
    return None
  phase = phase_of_prompt(prompt_ids, framing, vocab=vocab)
  if tools is None and (constraint is None or phase is OutputPhase.CONTENT):
    return None
  defs: tuple[ToolDefinition, ...] = ()
  if tools is not None:
    defs = (tuple(tools) if all(isinstance(t, ToolDefinition) for t in tools)
            else parse_tools(tools)) if not isinstance(tools, (str, bytes)) else parse_tools(tools)
  choice = tool_choice if isinstance(tool_choice, ToolChoice) else ToolChoice.parse(tool_choice)
  return prepare_output(vocab, phase, tools=defs, choice=choice, content=constraint,
                        compiler=compiler)


def decode_output(prepared: PreparedOutput, token_ids: Sequence[int], *,
                  terminated: bool = False) -> DecodedOutput:
  """Decodes a finished request's committed tokens with the same decoder its session used.

  Args:
    prepared: the request's prepared output.
    token_ids: committed output tokens (EOS excluded or included).
    terminated: EOS was accepted (appended when ``token_ids`` does not end with it).
  """
  fg = prepared.framed
  from infernix_jax.constrain.framing.decoder import OutputDecoder

  dec = OutputDecoder(prepared.vocab, fg.framing, fg.phase, fg.contracts,
                      tools_active=fg.tools_active, constrained=prepared.constrained)
  ids = list(token_ids)
  if terminated and (not ids or ids[-1] not in prepared.vocab.eos_ids):
    ids.append(prepared.vocab.eos_ids[0])
  dec.feed(ids)
  return dec.result()
