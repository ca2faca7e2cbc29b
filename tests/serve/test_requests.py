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
  assert chat(response_format=fmt).options == {"json_schema": {**schema,
                                                               "additionalProperties": False}}
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
  assert chat(speculative={"history": "orders"}).options["draft_history"] == "orders"
  assert chat(speculative={"history": None}).options["draft_history"] is None
  assert "draft_history" not in chat(speculative={"k": 2}).options
  assert chat().max_drafts is None


# Edge values of the sampling fields: the server's parse must decide each as the library does.
SAMPLING_EDGES = [("top_p", 0), ("top_p", 1), ("top_p", 1.5), ("temperature", 0),
                  ("temperature", 150.0), ("temperature", -0.5), ("top_k", -1), ("top_k", 0),
                  ("min_p", 1), ("min_p", 1.5), ("seed", 2**32 - 1), ("seed", 2**32),
                  ("presence_penalty", 3.0), ("frequency_penalty", -3.0),
                  ("repetition_penalty", 0), ("repetition_penalty", 0.5)]


@pytest.mark.parametrize("name,value", SAMPLING_EDGES, ids=[f"{n}={v}" for n, v in SAMPLING_EDGES])
def test_sampling_rules_are_the_librarys(name, value):
  """A sampling field is accepted by the server's parse exactly when `SamplingOptions`
  accepts it, and refused with the library's field and message."""
  from infernix_jax.runtime.types import SamplingOptions
  try:
    SamplingOptions(**{name: value}).validate()
    expected = None
  except RequestError as e:
    expected = (e.param, e.message)
  try:
    p = chat(**{name: value})
    got = None
  except RequestError as e:
    got = (e.param, e.message)
  assert got == expected
  if got is None:
    assert p.options[name] == value


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
    ({"messages": MSG, "n": 17}, "n"),
    ({"messages": MSG, "logprobs": "yes"}, "logprobs"),
    ({"messages": MSG, "top_logprobs": 2}, "top_logprobs"),
    ({"messages": MSG, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"messages": MSG, "repetition_penalty": -1}, "repetition_penalty"),
    ({"messages": MSG, "repetition_penalty": "x"}, "repetition_penalty"),
    ({"messages": MSG, "min_tokens": -3}, "min_tokens"),
    ({"messages": MSG, "min_tokens": 1.5}, "min_tokens"),
    ({"messages": MSG, "ignore_eos": "yes"}, "ignore_eos"),
    ({"messages": MSG, "skip_special_tokens": False}, "skip_special_tokens"),
    ({"messages": MSG, "chat_template_kwargs": [1]}, "chat_template_kwargs"),
    ({"messages": MSG, "structured_outputs": {"regex": "a", "lenient": True}},
     "structured_outputs.lenient"),
    ({"messages": MSG, "structured_outputs": {"json": {}, "whitespace_pattern": "[ ]+"}},
     "structured_outputs.whitespace_pattern"),
    ({"messages": MSG, "guided_regex": "a", "guided_choice": ["a"]}, "guided_choice"),
    ({"messages": MSG, "response_format": {"type": "json_schema", "json_schema": {
        "schema": {}, "strict": "yes"}}}, "response_format.json_schema.strict"),
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
    ({"messages": MSG, "speculative": {"history": 3}}, "speculative.history"),
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


PERSON = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
CLOSED = {**PERSON, "additionalProperties": False}


def fmt(schema, **extra):
  return {"type": "json_schema", "json_schema": {"name": "p", "schema": schema, **extra}}


def test_strict_closes_objects_and_is_the_default():
  assert chat(response_format=fmt(PERSON, strict=True)).options["json_schema"] == CLOSED
  assert chat(response_format=fmt(PERSON)).options["json_schema"] == CLOSED
  assert chat(response_format=fmt(PERSON, strict=False)).options["json_schema"] == PERSON
  # the server default flips what an unset strict means, never an explicit one
  loose = rq.Defaults(strict=False)
  p = rq.parse_chat({"messages": MSG, "response_format": fmt(PERSON)}, drafter="ngram", k=4,
                    defaults=loose)
  assert p.options["json_schema"] == PERSON
  p = rq.parse_chat({"messages": MSG, "structured_outputs": {
      "json": PERSON, "disable_additional_properties": True}}, drafter="ngram", k=4,
                    defaults=loose)
  assert p.options["json_schema"] == CLOSED
  # vLLM's structured_outputs.json and guided_json follow the server default
  assert chat(structured_outputs={"json": PERSON}).options["json_schema"] == CLOSED
  assert chat(guided_json=PERSON).options["json_schema"] == CLOSED
  assert chat(guided_json=PERSON).field("json_schema") == "guided_json"


def test_close_walks_subschemas_and_leaves_composed_objects():
  from infernix_jax.serve.schemas import close
  nested = {"type": "object", "properties": {
      "a": {"type": "object", "properties": {"b": {"type": "integer"}}},
      "c": {"type": "array", "items": {"properties": {"d": {}}}},
      "t": {"prefixItems": [{"type": "integer"}]}},
      "$defs": {"x": {"type": "object"}},
      "anyOf": [{"type": "object", "properties": {"e": {}}}]}
  out = close(nested)
  assert out["additionalProperties"] is False
  assert out["properties"]["a"]["additionalProperties"] is False
  assert out["properties"]["c"]["items"]["additionalProperties"] is False
  assert out["properties"]["t"]["items"] is False
  assert out["$defs"]["x"]["additionalProperties"] is False
  assert out["anyOf"][0]["additionalProperties"] is False
  composed = {"type": "object", "allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]}
  assert close(composed) == composed  # closing would reject what the other branch allows
  open_ = {"type": "object", "additionalProperties": {"type": "string"}}
  assert close(open_) == open_ and close(True) is True
  assert nested["properties"]["a"] == {"type": "object", "properties": {"b": {"type": "integer"}}}


def test_vllm_and_openai_extras():
  p = chat(metadata={"a": "b"}, store=False, user="u", service_tier="auto",
           prompt_cache_key="k", safety_identifier="s", reasoning_effort="low",
           verbosity="low", modalities=["text"], skip_special_tokens=True,
           spaces_between_special_tokens=True)
  assert p.options == {} and "metadata" in p.ignored and "verbosity" in p.ignored
  p = chat(repetition_penalty=1.3, min_tokens=4, ignore_eos=True, max_tokens=8)
  assert p.options == {"repetition_penalty": 1.3, "min_tokens": 4, "ignore_eos": True,
                       "max_tokens": 8}
  text = rq.parse_text({"prompt": "a", "repetition_penalty": 0.9, "min_tokens": 2},
                       drafter="ngram", k=4)
  assert (text.options["repetition_penalty"], text.options["min_tokens"]) == (0.9, 2)
  p = chat(structured_outputs={"json": PERSON, "whitespace_pattern": None, "lenient": True})
  assert p.options["lenient"] is True and p.field("lenient") == "structured_outputs.lenient"
  assert chat(guided_regex="a+").options == {"regex": "a+"}
  assert chat(guided_choice=["x", "y"]).options == {"choice": ["x", "y"]}
  assert chat(guided_grammar='root ::= "a"').options == {"grammar": 'root ::= "a"'}
  assert chat(chat_template_kwargs={"enable_thinking": False}).options == {
      "chat_template_kwargs": {"enable_thinking": False}}
  thinking = rq.Defaults(thinking=True)
  p = rq.parse_chat({"messages": MSG, "reasoning_effort": "low"}, drafter="ngram", k=4,
                    defaults=thinking)
  assert p.options == {"thinking_budget": rq.REASONING_BUDGETS["low"]}
  p = rq.parse_chat({"messages": MSG, "reasoning_effort": "minimal"}, drafter="ngram", k=4,
                    defaults=thinking)
  assert p.options == {"chat_template_kwargs": {"enable_thinking": False}}
  p = chat(n=3, logprobs=True, top_logprobs=2, max_tool_calls=2)
  assert (p.n, p.logprobs, p.max_tool_calls) == (3, 2, 2) and p.options["logprobs"] == 2
  assert not p.trace and "trace" not in p.options  # exact logprobs need no trace
  assert chat(logprobs=True, top_logprobs=20).options["logprobs"] == 20
  assert chat(logprobs=True).options["logprobs"] == 0
  text = rq.parse_text({"prompt": "a", "logprobs": 20}, drafter="ngram", k=4)
  assert text.logprobs == 20 and text.options["logprobs"] == 20


def test_logprobs_shapes_from_token_entries():
  from infernix_jax.runtime.types import TokenLogprob
  from infernix_jax.serve import logprobs as lp
  entries = [TokenLogprob(1, -0.5, ((1, -0.5), (2, -1.5))), TokenLogprob(3, 0.0),
             TokenLogprob(2, float("-inf"))]
  piece = {1: "a", 2: "bc", 3: "é"}.get
  out = lp.chat(entries, 1, piece)["content"]
  assert [x["token"] for x in out] == ["a", "é", "bc"]
  assert [x["logprob"] for x in out] == [-0.5, 0.0, lp.UNLIKELY]
  assert out[0]["top_logprobs"] == [{"token": "a", "logprob": -0.5, "bytes": [97]}]
  assert out[1]["bytes"] == list("é".encode()) and out[1]["top_logprobs"] == []
  text = lp.text(entries, 2, piece)
  assert text["text_offset"] == [0, 1, 2] and text["top_logprobs"][0] == {"a": -0.5,
                                                                           "bc": -1.5}


def test_responses_bodies_become_chat_bodies():
  from infernix_jax.serve import responses as rs
  body = rs.chat_body({"model": "m", "input": "hi", "instructions": "be brief",
                       "max_output_tokens": 9, "text": {"format": {
                           "type": "json_schema", "name": "p", "schema": PERSON,
                           "strict": True}},
                       "tools": [{"type": "function", "name": "f", "parameters": PERSON}],
                       "tool_choice": {"type": "function", "name": "f"}, "store": False,
                       "reasoning": {"effort": "low"}})
  assert body["messages"] == [{"role": "system", "content": "be brief"},
                              {"role": "user", "content": "hi"}]
  assert body["max_tokens"] == 9 and body["reasoning_effort"] == "low"
  assert body["response_format"]["json_schema"]["schema"] == PERSON
  assert body["tools"] == [{"type": "function", "function": {"name": "f", "strict": True,
                                                             "parameters": PERSON}}]
  assert body["tool_choice"] == {"type": "function", "function": {"name": "f"}}
  items = rs.chat_body({"input": [
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "w?"}]},
      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": 1}'},
      {"type": "function_call", "call_id": "c2", "name": "f", "arguments": '{"a": 2}'},
      {"type": "function_call_output", "call_id": "c1", "output": "one"}]})["messages"]
  assert [m["role"] for m in items] == ["user", "assistant", "tool"]
  assert [c["id"] for c in items[1]["tool_calls"]] == ["c1", "c2"]
  rq.parse_chat(body, drafter="ngram", k=4)  # the chat parser takes what it made
  for bad, param in (({"input": "x", "previous_response_id": "r"}, "previous_response_id"),
                     ({"input": []}, "input"),
                     ({"input": [{"type": "image"}]}, "input[0].type"),
                     ({"input": "x", "frobnicate": 1}, "frobnicate")):
    with pytest.raises(RequestError) as e:
      rs.chat_body(bad)
    assert e.value.param == param
  assert rs.field("messages[0].content") == "input[0].content"
  assert rs.field("response_format.json_schema.schema") == "text.format.schema"
  assert rs.field("max_tokens") == "max_output_tokens"


def test_tiny_server_exact_logprobs_and_vllm_fields():
  """/v1/completions on the tiny target: min_tokens, repetition_penalty and logprobs reach
  the engine (logprobs are the engine's exact entries, alternatives most probable first);
  ignore_eos with a constraint and min_tokens above max_tokens are 400s naming the field."""
  pytest.importorskip("starlette.testclient")
  from starlette.testclient import TestClient

  from infernix_jax.serve.app import ServerState, create_app
  from infernix_jax.serve.scheduler import Scheduler
  from infernix_jax.testing import exact_oracle as h

  llm = h.tiny_llm()
  state = ServerState("tiny")
  scheduler = Scheduler(llm.engine).start()
  state.ready(llm, scheduler)
  client = TestClient(create_app(state))
  body = {"model": "tiny", "prompt": [1, 1, 2, 1], "max_tokens": 4, "temperature": 1.0}
  try:
    out = client.post("/v1/completions", json=dict(body, logprobs=3, min_tokens=4,
                                                    repetition_penalty=1.3)).json()
    lps = out["choices"][0]["logprobs"]
    assert len(lps["tokens"]) == 4 and out["usage"]["completion_tokens"] == 4
    for lp, top in zip(lps["token_logprobs"], lps["top_logprobs"]):
      assert lp < 0 and len(top) == 3 and list(top.values()) == sorted(top.values())[::-1]
    for extra, param in (({"ignore_eos": True, "guided_choice": ["ab"]}, "ignore_eos"),
                         ({"min_tokens": 5}, "min_tokens")):
      r = client.post("/v1/completions", json=dict(body, **extra))
      assert r.status_code == 400 and r.json()["error"]["param"] == param
    # top_p = 0: refused by the server as by the library, in the library's words.
    r = client.post("/v1/completions", json=dict(body, top_p=0))
    with pytest.raises(RequestError) as lib:
      llm.prepare([1, 1, 2, 1], max_tokens=4, temperature=1.0, top_p=0)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == lib.value.param == "top_p"
    assert r.json()["error"]["message"] == lib.value.message
  finally:
    scheduler.stop()


OPEN_TOOL_PARAMS = {"type": "object", "properties": {
    "base": {"type": "integer"}, "unit": {"type": "string"},
    "box": {"type": "object", "properties": {"w": {"type": "number"}}}}, "required": ["base"]}


def test_strict_tools_are_closed_like_response_format():
  """Chat Completions: a tool with `strict: true` gets its parameters closed exactly as a
  strict response_format schema is (`schemas.close`); without `strict` (or with false) the
  tool stays open, as OpenAI's Chat Completions keeps it."""
  from infernix_jax.serve import schemas
  tool = lambda **fn: {"type": "function", "function": {"name": "f",
                                                        "parameters": OPEN_TOOL_PARAMS, **fn}}
  closed = schemas.close(OPEN_TOOL_PARAMS)
  assert closed["additionalProperties"] is False
  assert closed["properties"]["box"]["additionalProperties"] is False
  got = chat(tools=[tool(strict=True)]).options["tools"]
  assert got == [tool(strict=True, parameters=closed)]
  fmt = {"type": "json_schema", "json_schema": {"name": "p", "schema": OPEN_TOOL_PARAMS,
                                                 "strict": True}}
  assert got[0]["function"]["parameters"] == chat(response_format=fmt).options["json_schema"]
  assert chat(tools=[tool()]).options["tools"] == [tool()]
  assert chat(tools=[tool(strict=False)]).options["tools"] == [tool(strict=False)]
  bare = {"name": "g", "strict": True, "parameters": OPEN_TOOL_PARAMS}  # BFCL's bare form
  assert chat(tools=[bare]).options["tools"] == [dict(bare, parameters=closed)]


def test_responses_tools_without_strict_are_normalized_to_strict():
  """The Responses API: a function tool that does not say `strict` is strict, its parameters
  closed and every declared property required (OpenAI's normalization); `strict: false`
  keeps it open; the chat parser then closes it as any strict tool."""
  from infernix_jax.serve import responses as rs
  body = rs.chat_body({"input": "x", "tool_choice": "required", "tools": [
      {"type": "function", "name": "f", "parameters": OPEN_TOOL_PARAMS},
      {"type": "function", "name": "g", "parameters": OPEN_TOOL_PARAMS, "strict": None},
      {"type": "function", "name": "h", "parameters": OPEN_TOOL_PARAMS, "strict": False}]})
  tools = rq.parse_chat(body, drafter="ngram", k=4).options["tools"]
  want = {"type": "object", "required": ["base", "unit", "box"], "additionalProperties": False,
          "properties": {"base": {"type": "integer"}, "unit": {"type": "string"},
                         "box": {"type": "object", "properties": {"w": {"type": "number"}},
                                 "required": ["w"], "additionalProperties": False}}}
  for t in tools[:2]:
    assert t["function"]["strict"] is True and t["function"]["parameters"] == want
  assert tools[2]["function"] == {"name": "h", "parameters": OPEN_TOOL_PARAMS, "strict": False}


def test_a_schema_beside_json_object_is_enforced_as_json_schema():
  """`response_format: {"type": "json_object", "schema": S}` (what instructor's JSON_SCHEMA
  mode sent before it moved to json_schema) constrains to S, closed as a strict json_schema
  is; errors in S name `response_format.schema`; json_object alone is still any object."""
  strict = {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}}
  p = chat(response_format={"type": "json_object", "schema": PERSON})
  assert p.options == {"json_schema": CLOSED} == chat(response_format=strict).options
  assert p.field("json_schema") == "response_format.schema"
  assert chat(response_format={"type": "json_object"}).options == {"json_object": True}
  assert chat(response_format={"type": "json_object", "schema": None}).options == {
      "json_object": True}
  with pytest.raises(RequestError) as e:
    chat(response_format={"type": "json_object", "schema": [1]})
  assert e.value.param == "response_format.schema"
  from infernix_jax.serve import responses as rs
  body = rs.chat_body({"input": "x", "text": {"format": {"type": "json_object",
                                                          "schema": PERSON}}})
  assert rq.parse_chat(body, drafter="ngram", k=4).options == {"json_schema": CLOSED}
  assert rs.field("response_format.schema") == "text.format.schema"


def test_truncated_responses_message_is_incomplete():
  """A response cut by max_output_tokens is `incomplete`, and so is its message item, in the
  response object and in the streamed output_item.done event; a finished one is completed."""
  import json
  import types

  from infernix_jax.serve import responses as rs
  done = types.SimpleNamespace(content="abc", tool_calls=[], token_ids=[1, 2], prompt_tokens=3)
  for finish, status in (("length", "incomplete"), ("timeout", "incomplete"),
                         ("stop", "completed")):
    out = rs.response("r", "m", {}, done, finish, {})
    assert out["status"] == status and out["output"][0]["status"] == status
    events = rs.Events("r", "m", {})
    events.delta(types.SimpleNamespace(kind="content", text="abc", index=0))
    parsed = [json.loads(e.split("data: ", 1)[1]) for e in events.finish(done, finish, {})]
    [item_done] = [e for e in parsed if e["type"] == "response.output_item.done"]
    assert item_done["item"]["status"] == status
    assert parsed[-1]["response"]["output"][0]["status"] == status
