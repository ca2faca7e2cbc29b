"""OpenAI request bodies -> `LLM.prepare` options: every field translated or named on error."""

from __future__ import annotations

import pytest

from infernix_jax.api import RequestError
from infernix_jax.serve import requests as rq

MSG = [{"role": "user", "content": "hi"}]


def chat(**body):
  return rq.parse_chat({"model": "m", "messages": MSG, **body}, drafter="ngram", k=4)


def test_sampling_and_constraints_are_translated():
  p = chat(temperature=0.5, top_p=0.9, seed=3, max_tokens=7, stop=["\n"],
           presence_penalty=0.1, stream=True, stream_options={"include_usage": True})
  assert p.options == {"temperature": 0.5, "top_p": 0.9, "seed": 3, "max_tokens": 7,
                       "stop": ["\n"], "presence_penalty": 0.1}
  assert p.stream and p.include_usage and p.prompt == MSG
  schema = {"type": "object"}
  fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}
  assert chat(response_format=fmt).options == {"json_schema": schema}
  assert chat(response_format={"type": "json_object"}).options == {"json_object": True}
  assert chat(response_format={"type": "text"}).options == {}
  for key, value, want in (("json", '{"type": "string"}', {"json_schema": {"type": "string"}}),
                           ("regex", "a+", {"regex": "a+"}),
                           ("choice", ["a", "b"], {"choice": ["a", "b"]}),
                           ("grammar", 'root ::= "a"', {"grammar": 'root ::= "a"'})):
    assert chat(structured_outputs={key: value}).options == want
  assert chat(max_completion_tokens=9).options == {"max_tokens": 9}
  assert chat(sampling_law="exact-finite").options == {"sampling_law": "exact-finite"}
  assert chat(sampling_law="exact-finite", law_tolerance=0.01).options == {
      "sampling_law": "exact-finite", "law_tolerance": 0.01}
  assert chat(response_format=fmt).field("json_schema") == "response_format.json_schema.schema"
  assert chat(structured_outputs={"json": schema}).field("json_schema") == (
      "structured_outputs.json")
  assert chat(structured_outputs={"regex": "a"}).field("regex") == "structured_outputs.regex"
  assert chat(max_completion_tokens=9).field("max_tokens") == "max_completion_tokens"
  assert chat().field("prompt") == "messages" and chat().field("tools") == "tools"


def test_tools_and_tool_choice():
  tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
  from infernix_jax.constrain.framing import ToolChoice
  p = chat(tools=[tool], tool_choice={"type": "function", "function": {"name": "f"}})
  assert p.options["tools"] == [tool] and p.options["tool_choice"] == ToolChoice.named("f")
  assert chat(tools=[tool]).options["tool_choice"] == ToolChoice.auto()
  assert chat(tools=[tool], tool_choice="required", parallel_tool_calls=False).options[
      "tool_choice"] == ToolChoice.required(parallel=False)
  assert "tools" not in chat(tools=[], tool_choice="none").options


def test_messages_parts_and_roles():
  p = rq.parse_chat({"messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": None, "tool_calls": [
          {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]},
      {"role": "tool", "tool_call_id": "c", "content": "2"}]}, drafter="ngram", k=4)
  assert p.prompt[0] == {"role": "system", "content": "be brief"}
  assert p.prompt[1]["content"] == "ab"
  assert p.prompt[2]["tool_calls"][0]["function"]["arguments"] == {"x": 1}
  assert p.prompt[3] == {"role": "tool", "content": "2", "tool_call_id": "c"}


def test_speculative_options():
  assert chat(speculative={"k": 2}).max_drafts == 2
  assert chat(speculative={"drafter": "none"}).max_drafts == 0
  assert chat(speculative={"drafter": "ngram", "k": 4}).max_drafts == 4
  assert chat().max_drafts is None


@pytest.mark.parametrize("body,param", [
    ({"messages": []}, "messages"),
    ({"messages": [{"content": "x"}]}, "messages[0]"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
     "messages[0].content[0]"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": MSG, "temperature": "hot"}, "temperature"),
    ({"messages": MSG, "seed": -1}, "seed"),
    ({"messages": MSG, "max_tokens": 0}, "max_tokens"),
    ({"messages": MSG, "max_tokens": 1.5}, "max_tokens"),
    ({"messages": MSG, "n": 2}, "n"),
    ({"messages": MSG, "logprobs": True}, "logprobs"),
    ({"messages": MSG, "stop": [""]}, "stop"),
    ({"messages": MSG, "response_format": {"type": "yaml"}}, "response_format.type"),
    ({"messages": MSG, "response_format": {"type": "json_schema", "json_schema": {}}},
     "response_format.json_schema.schema"),
    ({"messages": MSG, "structured_outputs": {"xml": "<a/>"}}, "structured_outputs.xml"),
    ({"messages": MSG, "structured_outputs": {"json": "{bad"}}, "structured_outputs.json"),
    ({"messages": MSG, "structured_outputs": {"regex": "a"},
      "response_format": {"type": "json_object"}}, "response_format"),
    ({"messages": MSG, "tools": {"f": 1}}, "tools"),
    ({"messages": MSG, "tool_choice": "required"}, "tool_choice"),
    ({"messages": MSG, "tools": [{}], "tool_choice": 7}, "tool_choice"),
    ({"messages": MSG, "tools": [{}], "parallel_tool_calls": "no"}, "parallel_tool_calls"),
    ({"messages": MSG, "speculative": {"drafter": "mtp"}}, "speculative.drafter"),
    ({"messages": MSG, "speculative": {"k": 9}}, "speculative.k"),
    ({"messages": MSG, "speculative": {"depth": 2}}, "speculative.depth"),
    ({"messages": MSG, "unknown_field": 1}, "unknown_field"),
    ({"messages": MSG, "law_tolerance": "small"}, "law_tolerance"),
    ({"messages": MSG, "law_tolerance": -1}, "law_tolerance"),
    ([1, 2], "body"),
])
def test_errors_name_the_field(body, param):
  with pytest.raises(RequestError) as e:
    rq.parse_chat(body, drafter="ngram", k=4)
  assert e.value.param == param, e.value


def test_text_completions_bodies():
  p = rq.parse_text({"prompt": "abc", "max_tokens": 5}, drafter="ngram", k=4)
  assert p.prompt == "abc" and p.options == {"max_tokens": 5, "chat": False}
  assert rq.parse_text({"prompt": ["abc"]}, drafter="ngram", k=4).options["max_tokens"] == 16
  assert rq.parse_text({"prompt": [1, 2]}, drafter="ngram", k=4).prompt == [1, 2]
  for body, param in (({"prompt": ""}, "prompt"), ({"prompt": ["a", "b"]}, "prompt"),
                      ({"prompt": "a", "suffix": "b"}, "suffix"),
                      ({"prompt": "a", "echo": True}, "echo"),
                      ({"prompt": "a", "messages": MSG}, "messages")):
    with pytest.raises(RequestError) as e:
      rq.parse_text(body, drafter="ngram", k=4)
    assert e.value.param == param
