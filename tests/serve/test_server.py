"""A live server on 127.0.0.1 with the embedded SmolLM2, driven by the official openai client.

Oracles: jsonschema for structured outputs and tool arguments, each request's solo greedy
run for concurrent ones, the non-streamed response for streamed ones. Every loop is bounded
in count and time; all traffic stays on loopback.
"""

from __future__ import annotations

import concurrent.futures
import json
import time

import pytest

from tests.serve._live import LiveServer, marks

pytestmark = marks("openai")

LANES = 4
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 24},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}


@pytest.fixture(scope="module")
def live(smollm2_llm):
  from infernix_jax.serve.app import ServerState
  from infernix_jax.serve.scheduler import Scheduler

  state = ServerState("smollm2")
  server = LiveServer(state)  # listening before the model is ready: /health says 503
  import httpx
  assert httpx.get(f"{server.base}/health", timeout=10).status_code == 503
  assert smollm2_llm.engine.b == LANES
  state.ready(smollm2_llm, Scheduler(smollm2_llm.engine).start())
  yield server
  state.scheduler.stop()
  server.stop()


@pytest.fixture(scope="module")
def client(live):
  import openai
  return openai.OpenAI(base_url=f"{live.base}/v1", api_key="none", timeout=120, max_retries=0)


def test_health_and_models(live, client):
  import httpx
  health = httpx.get(f"{live.base}/health", timeout=10)
  assert health.status_code == 200 and health.json()["status"] == "ok"
  assert [m.id for m in client.models.list().data] == ["smollm2"]


def test_json_schema_response_validates(client):
  jsonschema = pytest.importorskip("jsonschema")
  out = client.chat.completions.create(
      model="smollm2", max_tokens=60,
      messages=[{"role": "user", "content": "Give a person's name and age as JSON."}],
      response_format={"type": "json_schema",
                       "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}})
  choice = out.choices[0]
  assert choice.finish_reason == "stop", choice
  jsonschema.validate(json.loads(choice.message.content), SCHEMA)
  extra = out.usage.model_extra
  assert extra["speculative"]["drafter"] == "ngram" and extra["speculative"]["k"] == 4
  assert extra["speculative"]["rounds"] > 0
  assert extra["constraint"]["kind"] == "json_schema" and extra["constraint"]["terminated"]
  assert out.usage.completion_tokens == out.usage.total_tokens - out.usage.prompt_tokens > 0


def test_structured_outputs_extra_parameters(client):
  out = client.chat.completions.create(
      model="smollm2", max_tokens=10, messages=[{"role": "user", "content": "Pick a fruit"}],
      extra_body={"structured_outputs": {"choice": ["apple", "banana", "cherry"]},
                  "trace": True})
  assert out.choices[0].message.content in ("apple", "banana", "cherry")
  # The trace body field: the generation's per-token trace rides beside the choices, one
  # origin per output token, agreeing with the usage's round count.
  trace = out.model_extra["trace"]
  assert trace["result"]["finish_reason"] == "stop" and trace["tokens"]
  assert all(t["origin"] for t in trace["tokens"])
  assert len(trace["rounds"]) == out.usage.model_extra["speculative"]["rounds"]
  out = client.chat.completions.create(
      model="smollm2", max_tokens=20, messages=[{"role": "user", "content": "A date"}],
      extra_body={"structured_outputs": {"regex": r"\d{4}-\d{2}-\d{2}"}})
  import re
  assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", out.choices[0].message.content)


def test_tool_call_required_validates_against_parameters(client):
  jsonschema = pytest.importorskip("jsonschema")
  out = client.chat.completions.create(
      model="smollm2", max_tokens=60, tools=[WEATHER], tool_choice="required",
      parallel_tool_calls=False, messages=[{"role": "user", "content": "What is the weather in Paris?"}])
  choice = out.choices[0]
  assert choice.finish_reason == "tool_calls", choice
  calls = choice.message.tool_calls
  assert calls and all(c.function.name == "get_weather" for c in calls)
  for call in calls:
    jsonschema.validate(json.loads(call.function.arguments),
                        WEATHER["function"]["parameters"])


def _stream_text(client, **kwargs):
  parts, calls, finish = [], {}, None
  for chunk in client.chat.completions.create(stream=True, **kwargs):
    if not chunk.choices:
      continue
    delta = chunk.choices[0].delta
    if delta.content:
      parts.append(delta.content)
    for tc in delta.tool_calls or ():
      got = calls.setdefault(tc.index, {"name": "", "arguments": ""})
      if tc.function.name:
        got["name"] = tc.function.name
      got["arguments"] += tc.function.arguments or ""
    finish = chunk.choices[0].finish_reason or finish
  return "".join(parts), [calls[i] for i in sorted(calls)], finish


@pytest.mark.parametrize("extra", [
    {},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}},
    {"tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False},
    {"tools": [WEATHER], "tool_choice": "auto"},
], ids=["free", "json_schema", "tools_required", "tools_auto"])
def test_streaming_reassembles_to_the_non_streamed_response(client, extra):
  kwargs = dict(model="smollm2", max_tokens=40, temperature=0,
                messages=[{"role": "user", "content": "Weather in Oslo, as JSON please."}],
                **extra)
  whole = client.chat.completions.create(**kwargs).choices[0]
  text, calls, finish = _stream_text(client, **kwargs)
  assert text == (whole.message.content or "")
  assert calls == [{"name": c.function.name, "arguments": c.function.arguments}
                   for c in whole.message.tool_calls or ()]
  assert finish == whole.finish_reason


def _ask(client, i):
  out = client.chat.completions.create(
      model="smollm2", max_tokens=12, temperature=0, seed=i,
      messages=[{"role": "user", "content": f"Count from {i} to {i + 5}."}])
  return out.choices[0].message.content


def test_concurrent_clients_get_their_solo_outputs(live, client):
  n = 16
  solo = [_ask(client, i) for i in range(n)]
  with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
    together = list(pool.map(lambda i: _ask(client, i), range(n), timeout=300))
  assert together == solo  # nothing lost, nothing duplicated, nothing mixed between lanes
  assert live.state.scheduler.load == 0


def test_disconnect_mid_stream_cancels_only_that_request(live, client):
  import httpx
  body = {"model": "smollm2", "max_tokens": 400, "stream": True, "temperature": 0,
          "messages": [{"role": "user", "content": "Write a very long story."}]}
  with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
    other = pool.submit(_ask, client, 3)  # decodes beside the stream that goes away
    with httpx.Client(base_url=live.base, timeout=60) as http:
      with http.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        seen = 0
        for line in response.iter_lines():
          seen += line.startswith("data: ")
          if seen >= 4:
            break  # leave after a few chunks: the connection closes here
    assert other.result(timeout=120) == _ask(client, 3)
  deadline = time.monotonic() + 20  # 400 tokens would take far longer than this
  while live.state.scheduler.load and time.monotonic() < deadline:
    time.sleep(0.05)
  assert live.state.scheduler.load == 0, "the abandoned stream kept decoding"


BAD = [
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "objekt"}}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {
        "type": "string", "format": "not-a-format"}}}}, "response_format.json_schema.schema"),
    ({"structured_outputs": {"regex": "(ab"}}, "structured_outputs.regex"),
    ({"structured_outputs": {"json": {"type": "array", "minContains": 2}}},
     "structured_outputs.json"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice"),
    ({"max_tokens": 100000}, "max_tokens"),
    ({"temperature": -1}, "temperature"),
    ({"n": 99}, "n"),
    ({"structured_outputs": {"json": {"type": "string", "format": "not-a-format"},
                             "lenient": "yes"}}, "structured_outputs.lenient"),
    ({"frobnicate": 1}, "frobnicate"),
    ({"structured_outputs": {"choice": ["a"], "regex": "a"}}, "structured_outputs.choice"),
    ({"sampling_law": "exact-finite"}, "sampling_law"),  # needs a finite constraint
    ({"sampling_law": "exact", "structured_outputs": {"choice": ["a"]}}, "sampling_law"),
    ({"sampling_law": 1}, "sampling_law"),  # found by the request's own validation
    ({"top_p": 0}, "top_p"),
]


@pytest.mark.parametrize("extra,param", BAD, ids=[p for _, p in BAD])
def test_bad_requests_get_a_4xx_naming_the_field(live, extra, param):
  import httpx
  body = {"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], **extra}
  r = httpx.post(f"{live.base}/v1/chat/completions", json=body, timeout=60)
  assert r.status_code == 400, r.text
  error = r.json()["error"]
  assert error["param"] == param and error["type"] == "invalid_request_error", error
  assert error["message"]


def test_malformed_bodies_and_unknown_routes(live, client):
  import httpx
  r = httpx.post(f"{live.base}/v1/chat/completions", content=b"{not json", timeout=30,
                 headers={"content-type": "application/json"})
  assert r.status_code == 400 and r.json()["error"]["param"] == "body"
  r = httpx.post(f"{live.base}/v1/chat/completions", json={"model": "smollm2"}, timeout=30)
  assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
  r = httpx.post(f"{live.base}/v1/chat/completions", timeout=30,
                 json={"model": "other", "messages": [{"role": "user", "content": "hi"}]})
  assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
  assert httpx.get(f"{live.base}/v2/nothing", timeout=30).status_code == 404
  # ... and the server keeps serving.
  assert httpx.get(f"{live.base}/health", timeout=30).status_code == 200
  assert _ask(client, 1)


def test_text_completions(client):
  out = client.completions.create(model="smollm2", prompt="The capital of France is",
                                  max_tokens=8, temperature=0)
  assert out.choices[0].text and out.choices[0].finish_reason in ("length", "stop")
  streamed = "".join(c.choices[0].text for c in client.completions.create(
      model="smollm2", prompt="The capital of France is", max_tokens=8, temperature=0,
      stream=True) if c.choices)
  assert streamed == out.choices[0].text


def test_exact_finite_sampling_law(client):
  """sampling_law rides as an extra parameter: a finite constraint sampled from μ*; the
  usage's constraint report holds the law's cost."""
  out = client.chat.completions.create(
      model="smollm2", max_tokens=8, temperature=1.0, seed=3,
      messages=[{"role": "user", "content": "Pick a fruit"}],
      extra_body={"structured_outputs": {"choice": ["apple", "banana", "cherry"]},
                  "sampling_law": "exact-finite"})
  assert out.choices[0].message.content in ("apple", "banana", "cherry")
  report = out.usage.model_extra["constraint"]
  assert report["law_trie_nodes"] > 0 and report["law_forwards"] > 0


def test_speculative_options_cap_the_drafts(client):
  kwargs = dict(model="smollm2", max_tokens=30, temperature=0,
                messages=[{"role": "user", "content": "Give a person's name and age as JSON."}],
                response_format={"type": "json_schema",
                                 "json_schema": {"name": "p", "schema": SCHEMA}})
  plain = client.chat.completions.create(**kwargs)
  none = client.chat.completions.create(extra_body={"speculative": {"drafter": "none"}},
                                        **kwargs)
  assert none.choices[0].message.content == plain.choices[0].message.content
  assert none.usage.model_extra["speculative"]["drafted"] == 0


OPEN = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}},
        "required": ["name"]}  # no additionalProperties: open under JSON Schema


def test_strict_closes_an_open_schema(client):
  """strict (the default) closes the object: the reply stops after its one property instead
  of adding keys until max_tokens; strict false keeps the open default."""
  kwargs = dict(model="smollm2", max_tokens=48, temperature=0,
                messages=[{"role": "user", "content": "Describe a person as JSON."}])
  for strict in (True, None):
    schema = {"name": "p", "schema": OPEN, **({} if strict is None else {"strict": strict})}
    out = client.chat.completions.create(
        response_format={"type": "json_schema", "json_schema": schema}, **kwargs)
    assert out.choices[0].finish_reason == "stop", out.choices[0]
    assert list(json.loads(out.choices[0].message.content)) == ["name"]
  loose = client.chat.completions.create(response_format={"type": "json_schema", "json_schema": {
      "name": "p", "schema": OPEN, "strict": False}}, **kwargs)
  assert loose.choices[0].message.content != out.choices[0].message.content


def test_model_card_n_and_logprobs(live, client):
  assert client.models.retrieve("smollm2").id == "smollm2"
  import httpx
  r = httpx.get(f"{live.base}/v1/models/other", timeout=10)
  assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
  out = client.chat.completions.create(
      model="smollm2", max_tokens=6, temperature=1.0, seed=5, n=3, logprobs=True,
      top_logprobs=2, messages=[{"role": "user", "content": "Name a colour."}],
      metadata={"team": "a"}, store=False, user="u", extra_body={"repetition_penalty": 1.0})
  assert [c.index for c in out.choices] == [0, 1, 2]
  assert out.usage.completion_tokens == sum(len(c.logprobs.content) for c in out.choices)
  for c in out.choices:
    assert "".join(t.token for t in c.logprobs.content) == c.message.content
    for t in c.logprobs.content:
      assert t.logprob <= 0 and len(t.top_logprobs) == 2
      assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob
  greedy = client.chat.completions.create(
      model="smollm2", max_tokens=6, temperature=0, logprobs=True,
      messages=[{"role": "user", "content": "Name a colour."}])
  assert all(t.logprob > -9999 for t in greedy.choices[0].logprobs.content)
  text = client.completions.create(model="smollm2", prompt="The sky is", max_tokens=4,
                                   temperature=0, logprobs=2)
  assert len(text.choices[0].logprobs.tokens) == text.usage.completion_tokens
  # n = 2 streamed: chunks name their choice; each choice reassembles to the non-streamed one
  # (seeds seed, seed + 1 on both), and the usage sums the choices.
  kwargs = dict(model="smollm2", max_tokens=6, temperature=1.0, seed=7, n=2,
                messages=[{"role": "user", "content": "Name a colour."}])
  plain = client.chat.completions.create(**kwargs)
  texts, finished, usage = {0: "", 1: ""}, set(), None
  for ch in client.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                           **kwargs):
    for c in ch.choices:
      texts[c.index] += c.delta.content or ""
      if c.finish_reason:
        finished.add(c.index)
    usage = ch.usage or usage
  assert [texts[0], texts[1]] == [c.message.content for c in plain.choices]
  assert finished == {0, 1} and usage.completion_tokens == plain.usage.completion_tokens


def test_schema_fallback_and_lenient(live):
  """An unsupported keyword: auto tries llguidance, then a 400 naming the body field to set;
  with structured_outputs.lenient the keyword is dropped and reported in usage."""
  import httpx
  schema = {"type": "object", "properties": {"d": {"type": "string", "format": "date"}},
            "required": ["d"]}  # our xgrammar checker refuses format; llguidance has dates
  body = {"model": "smollm2", "max_tokens": 24, "temperature": 0,
          "messages": [{"role": "user", "content": "JSON please"}]}
  r = httpx.post(f"{live.base}/v1/chat/completions", timeout=60, json={
      **body, "structured_outputs": {"json": {"type": "string", "format": "ipv9"}}})
  assert r.status_code == 400, r.text
  error = r.json()["error"]
  assert "lenient=True" not in error["message"], error
  assert "structured_outputs.lenient: true" in error["message"], error
  r = httpx.post(f"{live.base}/v1/chat/completions", timeout=60, json={
      **body, "structured_outputs": {"json": schema}})
  assert r.status_code == 200, r.text  # llguidance expresses it exactly
  import re
  assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", json.loads(r.json()["choices"][0]["message"][
      "content"])["d"])
  assert not (r.json()["usage"]["constraint"] or {}).get("dropped")
  r = httpx.post(f"{live.base}/v1/chat/completions", timeout=60, json={
      **body, "structured_outputs": {"json": {"type": "string", "format": "ipv9"},
                                     "lenient": True}})
  assert r.status_code == 200, r.text
  assert r.json()["usage"]["constraint"]["dropped"], r.json()["usage"]


def test_parallel_calls_are_capped_and_never_dropped_silently(client):
  kwargs = dict(model="smollm2", tools=[WEATHER], tool_choice="required", temperature=0,
                messages=[{"role": "user", "content": "Weather in Paris, Oslo and Rome?"}])
  capped = client.chat.completions.create(max_tokens=200, extra_body={"max_tool_calls": 1},
                                          **kwargs)
  choice = capped.choices[0]
  assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
  cut = client.chat.completions.create(max_tokens=30, **kwargs).choices[0]
  assert cut.finish_reason == "length"  # a cut-off call is reported, not hidden
  for call in cut.message.tool_calls or ():
    json.loads(call.function.arguments)  # only complete calls are returned


def test_metrics_and_access_log(live, client, caplog):
  import logging

  import httpx
  from infernix_jax.serve import ops
  ops._setup_access_log()
  ops.ACCESS.propagate = True
  try:
    with caplog.at_level(logging.INFO, logger=ops.ACCESS.name):
      out = client.chat.completions.create(model="smollm2", max_tokens=4,
                                           messages=[{"role": "user", "content": "hi"}])
  finally:
    ops.ACCESS.propagate = False
  line = [r.getMessage() for r in caplog.records if out.id in r.getMessage()]
  assert line and "/v1/chat/completions 200" in line[0] and "accepted_length=" in line[0]
  text = httpx.get(f"{live.base}/metrics", timeout=10).text
  for name in ("infernix_requests_total", "infernix_tokens_total", "infernix_queue_depth",
               "infernix_rounds_total", "infernix_accepted_length_bucket",
               "infernix_mask_seconds_total", "infernix_errors_total"):
    assert name in text, name


def test_responses_api(client):
  jsonschema = pytest.importorskip("jsonschema")
  out = client.responses.create(model="smollm2", input="Say hello.", max_output_tokens=8,
                                instructions="Be brief.", temperature=0)
  assert out.output_text and out.usage.output_tokens > 0
  events = list(client.responses.create(model="smollm2", input="Say hello.",
                                        max_output_tokens=8, instructions="Be brief.",
                                        temperature=0, stream=True))
  kinds = [e.type for e in events]
  assert kinds[0] == "response.created" and kinds[-1] in ("response.completed",
                                                          "response.incomplete")
  deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
  assert deltas == out.output_text == events[-1].response.output_text
  structured = client.responses.create(
      model="smollm2", input="Give a person's name and age as JSON.", max_output_tokens=60,
      text={"format": {"type": "json_schema", "name": "person", "schema": SCHEMA,
                       "strict": True}})
  jsonschema.validate(json.loads(structured.output_text), SCHEMA)
  tool = {"type": "function", "name": "get_weather", "description": "Current weather",
          "parameters": WEATHER["function"]["parameters"], "strict": True}
  called = client.responses.create(model="smollm2", input="Weather in Paris?", tools=[tool],
                                   tool_choice="required", parallel_tool_calls=False,
                                   max_output_tokens=60)
  calls = [o for o in called.output if o.type == "function_call"]
  assert calls and calls[0].name == "get_weather"
  jsonschema.validate(json.loads(calls[0].arguments), tool["parameters"])
  follow = client.responses.create(model="smollm2", max_output_tokens=8, input=[
      {"role": "user", "content": "Weather in Paris?"},
      {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
       "arguments": calls[0].arguments},
      {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 C"}])
  assert follow.output_text
  import openai
  with pytest.raises(openai.BadRequestError) as e:
    client.responses.create(model="smollm2", input="x", previous_response_id="resp_1")
  assert e.value.body["param"] == "previous_response_id"
