"""Output framing: Qwen thinking and XML tool calls, Hermes-style text tool calls (other
vocabularies), output decoding and chat prompts.

  from infernix_jax.constrain import framing as fr
  tools = fr.parse_tools(openai_tools_json)
  prepared = fr.prepare_output(vocab, fr.OutputPhase.THINKING, tools=tools,
                               choice=fr.ToolChoice.parse("auto"), backend=None)
  session = prepared.new_session()   # FramedSession (the constraint-session surface) or None
  ... session.lookahead / preview / commit ...; session.result().tool_calls

  text = fr.render_chat(model_source, vocab, messages, tools=tools, tool_choice="auto")
  prepared = fr.prepare_for_request(vocab, prompt_ids, tools=tools)  # Qwen or Hermes route
  decoder = fr.new_output_decoder(prepared)  # .feed(ids) -> events; .result()
"""

from infernix_jax.chat_template import ChatTemplate
from infernix_jax.constrain.framing import hermes
from infernix_jax.constrain.framing._args import Encoding, ParamContract, ToolContract
from infernix_jax.constrain.framing.chat import render_chat
from infernix_jax.constrain.framing.decoder import (ContentDelta, DecodedOutput, DecodeError,
                                                    OutputDecoder, ReasoningDelta, ToolCall,
                                                    ToolCallDelta, ToolCallEnd, ToolCallStart)
from infernix_jax.constrain.framing.grammar import ContentGrammar, FramedGrammar, build_grammar
from infernix_jax.constrain.framing.hermes import HermesDecoder, HermesPrepared, HermesSession
from infernix_jax.constrain.framing.prepare import PreparedOutput, prepare_output
from infernix_jax.constrain.framing.request import (decode_output, new_output_decoder,
                                                    prepare_for_request)
from infernix_jax.constrain.framing.session import (CompiledFraming, DecodedSession, FramedSession,
                                                    NameCompanion)
from infernix_jax.constrain.framing.thinking import (FORCED_CLOSE, THINK_SEPARATOR, OutputPhase,
                                                     QwenFraming, phase_of_prompt)
from infernix_jax.constrain.framing.tools import (ToolChoice, ToolDefinition, ToolMode,
                                                  ToolPolicy, arguments_checked, parse_tools,
                                                  resolve_choice, tools_from_bfcl)

__all__ = [
    "ChatTemplate", "CompiledFraming", "ContentDelta", "ContentGrammar", "DecodeError",
    "DecodedOutput", "DecodedSession", "Encoding", "FORCED_CLOSE", "FramedGrammar", "FramedSession",
    "HermesDecoder", "HermesPrepared", "HermesSession", "NameCompanion", "OutputDecoder",
    "OutputPhase", "ParamContract",
    "PreparedOutput", "QwenFraming", "ReasoningDelta", "THINK_SEPARATOR", "ToolCall",
    "ToolCallDelta", "ToolCallEnd", "ToolCallStart", "ToolChoice", "ToolContract",
    "ToolDefinition", "ToolMode", "ToolPolicy", "arguments_checked", "build_grammar",
    "parse_tools",
    "decode_output", "hermes", "new_output_decoder", "phase_of_prompt",
    "prepare_for_request", "prepare_output", "render_chat", "resolve_choice",
    "tools_from_bfcl",
]
