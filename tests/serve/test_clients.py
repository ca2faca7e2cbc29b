"""The client libraries people use against vLLM, on one live server with the embedded SmolLM2.

Each library's structured result is validated against its Pydantic model; a library that is
not installed (the clients extra) skips its test. Few tokens per request, one shared server.
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.serve._live import LiveServer, marks

pytestmark = marks("openai")

pydantic = pytest.importorskip("pydantic")


class Person(pydantic.BaseModel):
  """An open Pydantic model: its JSON Schema has no additionalProperties (strict closes it)."""
  name: str = pydantic.Field(max_length=16)
  age: int


PROMPT = "Give a person's name and age."


@pytest.fixture(scope="module")
def base(smollm2_llm):
  from infernix_jax.serve.app import ServerState
  from infernix_jax.serve.scheduler import Scheduler
  state = ServerState("smollm2")
  server = LiveServer(state)
  state.ready(smollm2_llm, Scheduler(smollm2_llm.engine).start())
  yield f"{server.base}/v1"
  state.scheduler.stop()
  server.stop()


def _need(module):
  if importlib.util.find_spec(module) is None:
    pytest.skip(f"{module} is not installed (the clients extra)")


def test_openai_parse_and_stream(base):
  import openai
  client = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=120)
  out = client.chat.completions.parse(model="smollm2", max_tokens=40, response_format=Person,
                                      messages=[{"role": "user", "content": PROMPT}])
  assert isinstance(out.choices[0].message.parsed, Person)
  parsed = client.responses.parse(model="smollm2", input=PROMPT, max_output_tokens=40,
                                  text_format=Person)
  assert isinstance(parsed.output_parsed, Person)
  with client.chat.completions.stream(model="smollm2", max_tokens=40, response_format=Person,
                                      messages=[{"role": "user", "content": PROMPT}]) as s:
    final = s.get_final_completion()
  assert isinstance(final.choices[0].message.parsed, Person)


def test_instructor_json_schema(base):
  _need("instructor")
  import instructor
  import openai
  client = instructor.from_openai(openai.OpenAI(base_url=base, api_key="none", max_retries=0),
                                  mode=instructor.Mode.JSON_SCHEMA)
  person = client.chat.completions.create(model="smollm2", max_tokens=40, response_model=Person,
                                          max_retries=0,
                                          messages=[{"role": "user", "content": PROMPT}])
  assert isinstance(person, Person)


def test_langchain_structured_output(base):
  _need("langchain_openai")
  from langchain_openai import ChatOpenAI
  llm = ChatOpenAI(model="smollm2", base_url=base, api_key="none", max_tokens=40,
                   temperature=0, max_retries=0)
  person = llm.with_structured_output(Person, method="json_schema").invoke(PROMPT)
  assert isinstance(person, Person)


def test_pydantic_ai_native_output(base):
  _need("pydantic_ai")
  from pydantic_ai import Agent, NativeOutput
  from pydantic_ai.models.openai import OpenAIChatModel
  from pydantic_ai.providers.openai import OpenAIProvider
  model = OpenAIChatModel("smollm2", provider=OpenAIProvider(base_url=base, api_key="none"))
  agent = Agent(model, output_type=NativeOutput(Person), model_settings={"max_tokens": 40})
  assert isinstance(agent.run_sync(PROMPT).output, Person)


def test_openai_agents_default_responses_model(base):
  _need("agents")
  import agents
  import openai
  agents.set_tracing_disabled(True)
  agents.set_default_openai_client(openai.AsyncOpenAI(base_url=base, api_key="none",
                                                      max_retries=0),
                                   use_for_tracing=False)
  agents.set_default_openai_api("responses")  # the library's default, set explicitly
  agent = agents.Agent(name="a", instructions="Answer with JSON.", model="smollm2",
                       output_type=Person,
                       model_settings=agents.ModelSettings(max_tokens=40))
  result = agents.Runner.run_sync(agent, PROMPT)
  assert isinstance(result.final_output, Person)


def test_outlines_from_vllm(base):
  _need("outlines")
  import openai
  import outlines
  model = outlines.from_vllm(openai.OpenAI(base_url=base, api_key="none", max_retries=0),
                             "smollm2")
  Person.model_validate_json(model(PROMPT, Person, max_tokens=40))
  assert model("Pick one.", outlines.types.Choice(["red", "blue"]), max_tokens=4) in (
      "red", "blue")
