"""Chat prompts with tools: the model's own template where it declares tools, else Hermes."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from infernix_jax.chat_template import ChatTemplate
from infernix_jax.constrain.framing import hermes
from infernix_jax.constrain.framing.request import (qwen_framing, tool_choice_of,
                                                    tool_definitions)


def render_chat(source: ChatTemplate | str | Path, vocab, messages: Sequence[Mapping[str, Any]],
                *, tools: Any = None, tool_choice: Any = None,
                add_generation_prompt: bool = True, **template_vars) -> str:
  """The prompt text of a chat, with the tools declared the way the output is framed.

  On a Qwen-family vocabulary (the ``<tool_call>`` / ``<think>`` control tokens) the model's
  template declares the tools (Qwen XML calls follow). On any other vocabulary the Hermes
  instructions (`hermes.messages_with_tools`) join the system turn and the template renders
  the result, so the prompt matches the Hermes grammar `prepare_for_request` enforces.

  Args:
    source: a `ChatTemplate`, or the model's tokenizer source (a ``.gguf`` file, an HF
      directory or its ``tokenizer.json``; see `ChatTemplate.for_model`).
    vocab: the model's Vocabulary (decides the framing).
    messages: OpenAI-style chat messages.
    tools: ToolDefinitions, OpenAI-style definitions (list or JSON text), or None.
    tool_choice: as `prepare_for_request` takes it (a sentence of the Hermes instructions).
    add_generation_prompt: end with the assistant turn header.
    **template_vars: further template variables (e.g. ``enable_thinking``).

  Raises:
    ValueError: no chat template at ``source`` (the message names the path), or a
      Qwen-family template that does not declare tools.
    ConstraintError: malformed tools or tool_choice.
  """
  template = source if isinstance(source, ChatTemplate) else ChatTemplate.for_model(source)
  kw = dict(add_generation_prompt=add_generation_prompt, **template_vars)
  if tools is None:
    return template.render(messages, **kw)
  defs = tool_definitions(tools)
  choice = tool_choice_of(tool_choice)
  if qwen_framing(vocab) is None:
    return template.render(hermes.messages_with_tools(messages, defs, choice), **kw)
  with_tools = template.render(messages, tools=defs, **kw)
  if defs and with_tools == template.render(messages, **kw):
    where = source if not isinstance(source, ChatTemplate) else "the given template"
    raise ValueError(f"the chat template of {where} does not declare tools, but this "
                     "Qwen-family vocabulary frames calls as Qwen XML; use a template that "
                     "renders `tools`")
  return with_tools
