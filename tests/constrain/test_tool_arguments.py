"""Tool arguments follow the declared parameters in both framings (Qwen XML-ish, Hermes).

Named and required calls (and auto under the Basic policy) must satisfy ``parameters``
whether or not the tool is strict; ``strict`` only closes the objects (no property beyond
the declared ones, at any depth). Each case is judged by `jsonschema` (the oracle): the
session accepts a call exactly when its arguments validate, and walks of legal tokens only
ever produce calls whose arguments validate.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from infernix_jax import mask_layout
from infernix_jax.constrain import framing as fr
from infernix_jax.constrain.vocab import Vocabulary
from infernix_jax.testing.framed_walk import LegalWalker, walk
from tests.constrain.conftest import qwen3_vocab, tok  # noqa: F401  (fixtures)

jsonschema = pytest.importorskip("jsonschema")

TOOL_OPEN, TOOL_CLOSE = 151657, 151658
PARAMS = {"type": "object", "required": ["tz"], "properties": {
    "tz": {"type": "string"}, "n": {"type": "integer", "minimum": 1},
    "opts": {"type": "object", "properties": {"hourly": {"type": "boolean"}}}}}
# The same schema closed by hand (what strict means), for the oracle.
CLOSED = {**PARAMS, "additionalProperties": False, "properties": {
    **PARAMS["properties"], "opts": {**PARAMS["properties"]["opts"],
                                     "additionalProperties": False}}}
OPEN_TOOL = {"name": "get_time", "parameters": PARAMS}
STRICT_TOOL = {"name": "get_time", "strict": True, "parameters": PARAMS}
ROOT_CLOSED_TOOL = {"name": "get_time", "parameters": {**PARAMS, "additionalProperties": False}}

# Arguments in the order written: (name, value text) pairs.
CALLS = [
    [],                                                   # tz missing
    [("n", "3")],                                         # tz missing
    [("tz", "UTC")],
    [("n", "3"), ("tz", "UTC")],                          # another order
    [("tz", "UTC"), ("n", "x")],                          # n not an integer
    [("tz", "UTC"), ("n", "0")],                          # n below its minimum
    [("tz", "UTC"), ("n", "1.5")],
    [("tz", "UTC"), ("opts", '{"hourly": true}')],
    [("tz", "UTC"), ("opts", '{"hourly": 1}')],           # hourly not a boolean
    [("tz", "UTC"), ("opts", '{"hourly": true, "daily": false}')],  # nested extra
    [("tz", "UTC"), ("extra", "[1, 2]")],                 # root extra
    [("tz", "UTC"), ("tz", "CET")],                       # repeated name
]


def _arguments(params) -> dict | None:
  """The JSON object a call's (name, text) pairs mean (strings raw, others JSON); None when
  a name repeats or a value is not JSON where the schema asks for JSON."""
  out: dict = {}
  for name, text in params:
    if name in out:
      return None
    if PARAMS["properties"].get(name, {}).get("type") == "string":
      out[name] = text
    else:
      try:
        out[name] = json.loads(text)
      except json.JSONDecodeError:
        return None
  return out


def _valid(params, schema) -> bool:
  args = _arguments(params)
  return args is not None and jsonschema.Draft202012Validator(schema).is_valid(args)


def _qwen_ids(tok, params):  # noqa: F811
  body = "\n<function=get_time>\n" + "".join(
      f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params) + "</function>\n"
  return [TOOL_OPEN] + tok(body) + [TOOL_CLOSE]


def _qwen(vocab, tool, choice):
  return fr.prepare_output(vocab, fr.OutputPhase.CONTENT, tools=fr.parse_tools([tool]),
                           choice=choice)


CHOICES = {"required": fr.ToolChoice.required(), "named": fr.ToolChoice.named("get_time"),
           "auto": fr.ToolChoice.auto()}


@pytest.mark.parametrize("choice", sorted(CHOICES))
@pytest.mark.parametrize("tool, schema", [(OPEN_TOOL, PARAMS), (STRICT_TOOL, CLOSED),
                                          (ROOT_CLOSED_TOOL, {**PARAMS,
                                                              "additionalProperties": False})],
                         ids=["nonstrict", "strict", "nonstrict-closed-root"])
def test_qwen_calls_are_accepted_exactly_when_the_arguments_validate(
    qwen3_vocab, tok, choice, tool, schema):  # noqa: F811
  p = _qwen(qwen3_vocab, tool, CHOICES[choice])
  for params in CALLS:
    want = _valid(params, schema)
    if tool.get("strict") and want and [k for k, _ in params] != [
        k for k in PARAMS["properties"] if k in dict(params)]:
      want = False  # the strict route writes parameters in declared order
    ids = _qwen_ids(tok, params)
    s = p.new_session()
    r = s.preview(ids)
    assert (r.accepted == len(ids)) == want, (params, r.accepted, len(ids))
    if want:
      s.commit()
      (call,) = s.result().tool_calls
      assert json.loads(call.arguments_json) == _arguments(params)


def test_qwen_required_name_missing_closes_nothing(qwen3_vocab, tok):  # noqa: F811
  """Right after the function header (no argument yet) no token that starts the close is
  legal while tz is missing, and the legal set is not empty; once tz is written it is."""
  p = _qwen(qwen3_vocab, OPEN_TOOL, fr.ToolChoice.required())
  s = p.new_session()
  s.accept([TOOL_OPEN] + tok("\n<function=get_time>\n"))
  buf = np.zeros((1, qwen3_vocab.mask_words), np.int32)
  assert s.lookahead([], out=buf)[0] == mask_layout.READY
  allowed = mask_layout.unpack(buf, qwen3_vocab.size)[0]
  closers = [i for i, b in enumerate(qwen3_vocab.token_bytes) if b.startswith(b"</")]
  assert not allowed[closers].any()
  assert allowed[qwen3_vocab.token_id("<")]
  s.accept(tok("<parameter=tz>\nUTC\n</parameter>\n"))
  s.lookahead([], out=buf)
  assert mask_layout.unpack(buf, qwen3_vocab.size)[0][qwen3_vocab.token_id("</")]


def test_qwen_automatic_auto_leaves_non_strict_arguments_free(qwen3_vocab, tok):  # noqa: F811
  auto = fr.ToolChoice.auto(policy=fr.ToolPolicy.AUTOMATIC)
  assert _qwen(qwen3_vocab, OPEN_TOOL, auto).compiled is None  # the free route
  with_strict = fr.parse_tools([OPEN_TOOL, {"name": "other", "strict": True,
                                            "parameters": {"type": "object"}}])
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.CONTENT, tools=with_strict, choice=auto)
  ids = _qwen_ids(tok, [("n", "x")])
  assert p.new_session().preview(ids).accepted == len(ids)
  required = fr.ToolChoice.required(policy=fr.ToolPolicy.AUTOMATIC)
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.CONTENT, tools=with_strict,
                        choice=required)
  assert p.new_session().preview(ids).accepted < len(ids)


@pytest.mark.parametrize("seed", range(6))
def test_qwen_walks_give_calls_that_validate(qwen3_vocab, seed):  # noqa: F811
  tools = fr.parse_tools([OPEN_TOOL, {**STRICT_TOOL, "name": "get_date"}])
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.CONTENT, tools=tools,
                        choice=fr.ToolChoice.required())
  s = p.new_session()
  walk(s, LegalWalker(qwen3_vocab, seed, tool_bias=0.9), max_tokens=160)
  schemas = {"get_time": PARAMS, "get_date": CLOSED}
  for c in s.result().tool_calls:
    jsonschema.validate(json.loads(c.arguments_json), schemas[c.name])


# --- Hermes (text framing, any vocabulary) ------------------------------------------------------

EOS = 256


@pytest.fixture(scope="module")
def bytes_vocab() -> Vocabulary:
  """One token per byte plus an EOS control token: a string is accepted iff its bytes are."""
  return Vocabulary.from_tokens([bytes([i]) for i in range(256)] + [b"<|im_end|>"],
                                eos_ids=[EOS], control=[EOS])


def _hermes_accepts(prepared, name: str, arguments: dict) -> bool:
  """Whether the call (keys in declared order, then undeclared ones: the order the JSON
  grammar writes) then EOS is accepted."""
  order = list(PARAMS["properties"])
  ordered = dict(sorted(arguments.items(),
                        key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))
  text = ('<tool_call>\n{"name": "' + name + '", "arguments": '
          + json.dumps(ordered) + "}\n</tool_call>")
  ids = list(text.encode()) + [EOS]
  s = prepared.new_session()
  r = s.preview(ids)
  return r.accepted == len(ids) and r.terminated


@pytest.mark.parametrize("choice", sorted(CHOICES))
@pytest.mark.parametrize("tool, schema", [(OPEN_TOOL, PARAMS), (STRICT_TOOL, CLOSED)],
                         ids=["nonstrict", "strict"])
def test_hermes_calls_are_accepted_exactly_when_the_arguments_validate(
    bytes_vocab, choice, tool, schema):
  p = fr.hermes.prepare_hermes(bytes_vocab, tools=fr.parse_tools([tool]),
                               choice=CHOICES[choice])
  for params in CALLS:
    args = _arguments(params)
    if args is None:
      continue  # not a JSON object (a repeated key, a bare word)
    want = jsonschema.Draft202012Validator(schema).is_valid(args)
    assert _hermes_accepts(p, "get_time", args) == want, args


def test_hermes_automatic_auto_leaves_non_strict_arguments_free(bytes_vocab):
  p = fr.hermes.prepare_hermes(bytes_vocab, tools=fr.parse_tools([OPEN_TOOL]),
                               choice=fr.ToolChoice.auto(policy=fr.ToolPolicy.AUTOMATIC))
  assert _hermes_accepts(p, "get_time", {"n": "x"})
  p = fr.hermes.prepare_hermes(bytes_vocab, tools=fr.parse_tools([OPEN_TOOL]),
                               choice=fr.ToolChoice.required(policy=fr.ToolPolicy.AUTOMATIC))
  assert not _hermes_accepts(p, "get_time", {"n": "x"})
