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


# A held-out BFCL v4 function (simple_python_0, Apache-2.0), BFCL's "dict" spelled "object"
# as BFCL's OpenAI handler sends it: an open schema (no additionalProperties, `unit` optional).
TRIANGLE = {"type": "function", "name": "calculate_triangle_area",
            "description": "Calculate the area of a triangle given its base and height.",
            "parameters": {"type": "object", "properties": {
                "base": {"type": "integer", "description": "The base of the triangle."},
                "height": {"type": "integer", "description": "The height of the triangle."},
                "unit": {"type": "string", "description": "The unit of measure (defaults to "
                                                          "'units' if not specified)"}},
                "required": ["base", "height"]}}


def test_openai_responses_required_call_with_an_open_bfcl_schema(base):
  """The Responses API normalizes a tool without `strict` to strict: the required call is
  complete and its arguments validate against the open schema as sent (no invented keys)."""
  jsonschema = pytest.importorskip("jsonschema")
  import json

  import openai
  client = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=120)
  out = client.responses.create(
      model="smollm2", tools=[TRIANGLE], tool_choice="required", max_output_tokens=80,
      input="Find the area of a triangle with a base of 10 units and height of 5 units.")
  calls = [o for o in out.output if o.type == "function_call"]
  assert calls, out.output
  assert calls[0].name == "calculate_triangle_area" and calls[0].status == "completed"
  args = json.loads(calls[0].arguments)
  jsonschema.validate(args, TRIANGLE["parameters"])
  assert set(args) == {"base", "height", "unit"}  # closed, every declared field required


INSTRUCTOR_BEFORE_1_17 = "1.5.0"  # sends response_format {"type": "json_object", "schema": S}
_OLD_INSTRUCTOR = '''
import json, sys, openai, pydantic, instructor
class Ticket(pydantic.BaseModel):
  code: str = pydantic.Field(pattern=r"^TK-[0-9]{4}$")
  seats: int
client = instructor.from_openai(openai.OpenAI(base_url=sys.argv[1], api_key="none",
                                              max_retries=0), mode=instructor.Mode.JSON_SCHEMA)
ticket = client.chat.completions.create(model="smollm2", max_tokens=40, response_model=Ticket,
                                        max_retries=0, messages=[{"role": "user",
                                        "content": "Book two seats for the concert."}])
print(json.dumps({"version": instructor.__file__, "ticket": ticket.model_dump()}))
'''


@pytest.fixture(scope="module")
def old_instructor(tmp_path_factory):
  """instructor 1.5.0 in its own folder (pip --no-deps --target), or a skip when pip cannot
  fetch it (offline)."""
  import subprocess
  import sys
  target = tmp_path_factory.mktemp("instructor_old")
  proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                         "--target", str(target), f"instructor=={INSTRUCTOR_BEFORE_1_17}"],
                        capture_output=True, text=True, timeout=300)
  if proc.returncode != 0 or not (target / "instructor").is_dir():
    pytest.skip(f"pip cannot fetch instructor=={INSTRUCTOR_BEFORE_1_17}: "
                f"{proc.stderr.strip()[-200:]}")
  return target


def test_instructor_before_1_17_json_schema_mode(base, old_instructor):
  """instructor's JSON_SCHEMA mode before it moved to json_schema sends the schema beside
  `json_object`: the server enforces it (here a `pattern` the model does not follow on its
  own), so the reply parses into the model (run in a subprocess with that release first on
  the path)."""
  import json
  import os
  import re
  import subprocess
  import sys
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [str(old_instructor)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                               if p]))
  proc = subprocess.run([sys.executable, "-c", _OLD_INSTRUCTOR, base], capture_output=True,
                        text=True, timeout=300, env=env)
  assert proc.returncode == 0, proc.stderr[-2000:]
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  assert out["version"].startswith(str(old_instructor))  # the old release ran
  assert re.fullmatch(r"TK-[0-9]{4}", out["ticket"]["code"]), out  # the schema's pattern
  assert isinstance(out["ticket"]["seats"], int)
