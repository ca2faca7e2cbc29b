"""Request-level entry: which requests get a framed session, and their decoded tool calls."""

from __future__ import annotations

from typing import Any, Sequence

from infernix_jax.constrain.errors import TokenReferenceError
from infernix_jax.constrain.framing.decoder import DecodedOutput
from infernix_jax.constrain.framing.hermes import HermesPrepared, prepare_hermes
from infernix_jax.constrain.framing.prepare import PreparedOutput, prepare_output
from infernix_jax.constrain.framing.thinking import OutputPhase, QwenFraming, phase_of_prompt
from infernix_jax.constrain.framing.tools import (ToolChoice, ToolDefinition, parse_tools)


def qwen_framing(vocab) -> QwenFraming | None:
  """The vocabulary's Qwen control markers, or None when it lacks them (Hermes route)."""
  try:
    return vocab.lazy("framing.QwenFraming", lambda: QwenFraming.from_vocab(vocab))
  except TokenReferenceError:
    return None


def tool_definitions(tools: Any) -> tuple[ToolDefinition, ...]:
  """ToolDefinitions from ToolDefinitions, OpenAI-style definitions (a list) or JSON text.

  Raises:
    ConstraintError: malformed definitions or duplicate names (JSON Pointer location).
  """
  if isinstance(tools, (str, bytes)):
    return parse_tools(tools)
  tools = list(tools)
  if all(isinstance(t, ToolDefinition) for t in tools):
    from infernix_jax.constrain.framing.tools import check_unique
    check_unique(tools)
    return tuple(tools)
  return parse_tools(tools)


def tool_choice_of(tool_choice: Any) -> ToolChoice:
  """A ToolChoice from a ToolChoice, "auto" / "none" / "required" / NAME, an OpenAI object,
  or None (auto)."""
  return tool_choice if isinstance(tool_choice, ToolChoice) else ToolChoice.parse(tool_choice)


def prepare_for_request(vocab, prompt_ids: Sequence[int], *, tools: Any = None,
                        tool_choice: Any = None, constraint: Any = None,
                        compiler: Any = None,
                        backend: str | None = None) -> PreparedOutput | HermesPrepared | None:
  """The framed output of a request, or None when the plain content path applies.

  On a Qwen-family vocabulary (``<tool_call>``, ``</tool_call>``, ``<think>``, ``</think>``
  control tokens) framing applies when tools are declared, or when a content constraint meets
  a prompt that leaves the model in (or before) its thinking phase: a `PreparedOutput`. On
  any other vocabulary, declared tools take the Hermes text framing (`hermes.py`): a
  `HermesPrepared` with the same surface (``constrained``, ``compiled.cache_status``,
  ``new_session()``, ``new_decoder()``, `decode_output`).

  Args:
    vocab: the engine's Vocabulary.
    prompt_ids: the rendered prompt (its last thinking marker fixes the output phase).
    tools: ToolDefinitions, OpenAI-style definitions (list or JSON text), or None.
    tool_choice: a ToolChoice, "auto" / "none" / "required" / NAME, or None (auto).
    constraint: the content OutputConstraint or None.
    compiler: the engine's `ConstraintCompiler` (its cache holds the framed grammar);
      default: the vocabulary's shared one.
    backend: the constraint backend framed grammars compile on (None or "auto": xgrammar;
      "llguidance"; a backend that cannot express them raises UnsupportedConstraintError).

  Raises:
    ConstraintError: invalid tools, choice or combination (nothing is queued).
  """
  framing = qwen_framing(vocab)
  if framing is None:
    if tools is None:
      return None
    return prepare_hermes(vocab, tools=tool_definitions(tools),
                          choice=tool_choice_of(tool_choice), content=constraint,
                          compiler=compiler, backend=backend)
  phase = phase_of_prompt(prompt_ids, framing, vocab=vocab)
  if tools is None and (constraint is None or phase is OutputPhase.CONTENT):
    return None
  defs = tool_definitions(tools) if tools is not None else ()
  return prepare_output(vocab, phase, tools=defs, choice=tool_choice_of(tool_choice),
                        content=constraint, compiler=compiler, backend=backend)


def new_output_decoder(prepared: PreparedOutput | HermesPrepared):
  """The streaming decoder a request's session uses: ``feed(token_ids) -> events``
  (`ContentDelta`, `ReasoningDelta`, `ToolCallStart`, `ToolCallDelta`, `ToolCallEnd`) and
  ``result() -> DecodedOutput``. Feed it the committed output tokens (e.g. each
  `TokenEvent.token_ids`, then the EOS id when the request stopped on it)."""
  return prepared.new_decoder(constrained=prepared.constrained)


def decode_output(prepared: PreparedOutput | HermesPrepared, token_ids: Sequence[int], *,
                  terminated: bool = False) -> DecodedOutput:
  """Decodes a finished request's committed tokens with the same decoder its session used.

  Args:
    prepared: the request's prepared output (`prepare_for_request`).
    token_ids: committed output tokens (EOS excluded or included).
    terminated: EOS was accepted (appended when ``token_ids`` does not end with it).
  """
  dec = new_output_decoder(prepared)
  ids = list(token_ids)
  if terminated and (not ids or ids[-1] not in prepared.vocab.eos_ids):
    ids.append(prepared.vocab.eos_ids[0])
  dec.feed(ids)
  return dec.result()
