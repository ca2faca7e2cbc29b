"""Tool calls under Qwen XML framing: policies, strict arguments, decoder contract, BFCL sample."""

from __future__ import annotations

import codecs
import json

import numpy as np
import pytest

from infernix_jax import mask_layout
from infernix_jax.constrain import (ConstraintError, FeatureConflictError, OutputConstraint,
                                    UnsupportedSchemaError)
from infernix_jax.constrain import framing as fr
from infernix_jax.constrain.framing.tools import tools_from_bfcl
from infernix_jax.testing.framed_walk import LegalWalker, walk
from tests.constrain.conftest import QWEN3_DIR, SHARED_DATA

TOOL_OPEN, TOOL_CLOSE, THINK_CLOSE = 151657, 151658, 151668
LOOKUP = {"name": "lookup", "strict": True, "parameters": {
    "type": "object", "additionalProperties": False, "required": ["city", "days"],
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                   "units": {"enum": ["metric", "imperial"]},
                   "opts": {"type": "object", "properties": {"hourly": {"type": "boolean"}},
                            "required": ["hourly"], "additionalProperties": False}}}}
SEARCH = {"name": "search", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}}}


@pytest.fixture(scope="module")
def tools():
  return fr.parse_tools([LOOKUP, SEARCH])


def legal(session, vocab) -> np.ndarray:
  buf = np.zeros((1, vocab.mask_words), np.int32)
  session.lookahead([], out=buf)
  return mask_layout.unpack(buf, vocab.size)[0]


def call_ids(tok, name, params):
  body = f"\n<function={name}>\n" + "".join(
      f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params) + "</function>\n"
  return [TOOL_OPEN] + tok(body) + [TOOL_CLOSE]


def test_parse_tools_and_choice():
  ts = fr.parse_tools(json.dumps([{"type": "function", "function": LOOKUP}, SEARCH]))
  assert [t.name for t in ts] == ["lookup", "search"] and ts[0].strict and not ts[1].strict
  with pytest.raises(FeatureConflictError):
    fr.parse_tools([SEARCH, SEARCH])
  named = fr.ToolChoice.parse("lookup")
  assert named.mode is fr.ToolMode.REQUIRED and named.allowed_names == ("lookup",)
  assert not named.parallel
  assert fr.ToolChoice.parse("none").mode is fr.ToolMode.NONE
  with pytest.raises(ConstraintError):
    fr.resolve_choice(ts, fr.ToolChoice.named("missing"))


@pytest.mark.parametrize("params, where", [
    ({"type": "object", "additionalProperties": True, "properties": {"a": {"type": "string"}}},
     "/additionalProperties"),
    ({"type": "object", "additionalProperties": False,
      "properties": {"a": {"type": ["string", "integer"]}}}, "/properties/a"),
    ({"type": "object", "additionalProperties": False,
      "properties": {"a": {"const": "x\n</parameter>y"}}}, "/properties/a/const"),
    ({"type": "object", "additionalProperties": False, "required": ["b"],
      "properties": {"a": {"type": "string"}}}, "/required"),
])
def test_strict_schemas_the_framing_cannot_represent(qwen3_vocab, params, where):
  t = fr.ToolDefinition("f", parameters=params, strict=True)
  with pytest.raises(UnsupportedSchemaError) as e:
    fr.prepare_output(qwen3_vocab, fr.OutputPhase.CONTENT, tools=[t])
  assert e.value.location == where


def test_unrepresentable_enum_values_are_filtered(qwen3_vocab, tok):
  t = fr.ToolDefinition("f", strict=True, parameters={
      "type": "object", "additionalProperties": False, "required": ["a"],
      "properties": {"a": {"enum": ["ok", "bad\n</parameter>x"]}}})
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.CONTENT, tools=[t],
                        choice=fr.ToolChoice.required())
  s = p.new_session()
  good = call_ids(tok, "f", [("a", "ok")])
  assert s.accept(good).accepted == len(good)
  s2 = p.new_session()
  bad = call_ids(tok, "f", [("a", "bad")])
  assert s2.preview(bad).accepted < len(bad)


def test_gbnf_content_with_active_tools_conflicts(qwen3_vocab, tools):
  with pytest.raises(FeatureConflictError):
    fr.prepare_output(qwen3_vocab, fr.OutputPhase.CONTENT, tools=tools,
                      content=OutputConstraint.grammar('root ::= "x"'))


def test_none_forbids_tool_call_token(qwen3_vocab, tools, tok):
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.CONTENT, tools=tools,
                        choice=fr.ToolChoice.none())
  s = p.new_session()
  allowed = legal(s, qwen3_vocab)
  assert not allowed[TOOL_OPEN] and not allowed[list(qwen3_vocab.control_ids - {
      *qwen3_vocab.eos_ids})].any()
  # Oracle: an ordinary token can start free text iff its bytes start valid UTF-8 text.
  dec = lambda b: codecs.getincrementaldecoder("utf-8")().decode(b, final=False)
  for i in qwen3_vocab.ordinary_ids[::97]:
    try:
      dec(qwen3_vocab.token_bytes[i])
      ok = True
    except UnicodeDecodeError:
      ok = False
    assert allowed[i] == ok, qwen3_vocab.token_bytes[i]
  spelled = [qwen3_vocab.token_id(x) for x in ("<", "tool", "_call", ">")]
  assert s.accept(spelled).accepted == 4
  assert s.result().content == "<tool_call>" and s.result().tool_calls == ()


def test_required_and_named(qwen3_vocab, tools, tok):
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.CONTENT, tools=tools,
                        choice=fr.ToolChoice.required())
  s = p.new_session()
  assert np.flatnonzero(legal(s, qwen3_vocab)).tolist() == [TOOL_OPEN]
  named = fr.prepare_output(qwen3_vocab, fr.OutputPhase.CONTENT, tools=tools,
                            choice=fr.ToolChoice.named("search"))
  s = named.new_session()
  ids = call_ids(tok, "search", [("q", "x")])
  assert s.accept(ids).accepted == len(ids)
  # parallel=false: after the call only EOS is legal.
  assert np.flatnonzero(legal(s, qwen3_vocab)).tolist() == list(qwen3_vocab.eos_ids)
  s2 = named.new_session()
  other = call_ids(tok, "lookup", [("city", "x"), ("days", "1")])
  assert s2.preview(other).accepted < len(other)


def test_auto_text_then_parallel_calls_and_stream_contract(qwen3_vocab, tools, tok):
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.THINKING, tools=tools)
  s = p.new_session()
  city = 'Shang hai\n  "x" </parameter without newline é'
  ids = (tok("plan") + [THINK_CLOSE] + tok("\n\nCalling.\n")
         + call_ids(tok, "lookup", [("city", city), ("days", "-3"),
                                    ("opts", '{"hourly": true}')])
         + tok("\n") + call_ids(tok, "search", [("n", "7"), ("q", "")]))
  fragments: dict[int, list[str]] = {}
  ends = {}
  for t in ids:  # one token per round: the stream must equal the aggregate
    assert s.preview([t]).accepted == 1
    s.commit()
    for e in s.events:
      if isinstance(e, fr.ToolCallDelta):
        fragments.setdefault(e.index, []).append(e.fragment)
      elif isinstance(e, fr.ToolCallEnd):
        ends[e.index] = e.call
  assert s.accept([qwen3_vocab.eos_ids[0]]).terminated
  out = s.result()
  assert out.content == "Calling.\n" and out.branch == "tools" and out.reasoning == "plan"
  assert [c.name for c in out.tool_calls] == ["lookup", "search"]
  for i, c in enumerate(out.tool_calls):
    assert "".join(fragments[i]) == c.arguments_json == ends[i].arguments_json
  assert json.loads(out.tool_calls[0].arguments_json) == {
      "city": city, "days": -3, "opts": {"hourly": True}}
  assert json.loads(out.tool_calls[1].arguments_json) == {"n": 7, "q": ""}


def test_strict_order_and_types_are_enforced(qwen3_vocab, tools, tok):
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.CONTENT, tools=tools,
                        choice=fr.ToolChoice.named("lookup"))
  for params in ([("days", "1"), ("city", "x")],            # declared order
                 [("city", "x")],                            # required days missing
                 [("city", "x"), ("days", "1.5")],           # integer
                 [("city", "x"), ("days", "1"), ("units", "kelvin")],  # enum
                 [("city", "x"), ("days", " 1")]):           # no free whitespace
    s = p.new_session()
    ids = call_ids(tok, "lookup", params)
    assert s.preview(ids).accepted < len(ids), params


def test_nonstrict_names_are_unique_per_call(qwen3_vocab, tools, tok):
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.CONTENT, tools=tools,
                        choice=fr.ToolChoice.named("search"))
  s = p.new_session()
  head = [TOOL_OPEN] + tok("\n<function=search>\n<parameter=q>\nx\n</parameter>\n<parameter=")
  s.accept(head)
  allowed = legal(s, qwen3_vocab)
  q_gt = qwen3_vocab.token_id(">")
  assert not allowed[q_gt]  # a name is never empty
  for name, ok in (("q", False), ("n", True), ("undeclared", True)):
    ids = tok(name + ">\n1\n</parameter>\n")
    r = s.preview(ids)
    assert (r.accepted == len(ids)) == ok, name
    s.discard()
  # A single token that both closes one parameter and repeats its name is refused too.
  s2 = p.new_session()
  s2.accept([TOOL_OPEN] + tok("\n<function=search>\n<parameter=q>\nx"))
  rep = tok("\n</parameter>\n<parameter=q>\ny")
  assert s2.preview(rep).accepted < len(rep)


def test_nonstrict_decoding_by_declared_type(qwen3_vocab, tools, tok):
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.CONTENT, tools=tools,
                        choice=fr.ToolChoice.named("search"))
  s = p.new_session()
  s.accept(call_ids(tok, "search", [("n", "12"), ("q", "007"), ("extra", "[1, 2]"),
                                    ("note", "not json")]))
  (call,) = s.result().tool_calls
  assert json.loads(call.arguments_json) == {"n": 12, "q": "007", "extra": [1, 2],
                                             "note": "not json"}


def test_auto_json_union_picks_branch_at_first_token(qwen3_vocab, tools, tok):
  schema = json.dumps({"type": "object", "properties": {"s": {"type": "string"}},
                       "required": ["s"], "additionalProperties": False})
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.CONTENT, tools=tools,
                        content=OutputConstraint.json_schema(schema))
  s = p.new_session()
  allowed = legal(s, qwen3_vocab)
  assert allowed[TOOL_OPEN] and allowed[qwen3_vocab.token_id("{")]
  spelled = [qwen3_vocab.token_id(x) for x in ("<", "tool", "_call", ">")]
  ids = tok('{"s": "') + spelled + tok('"}')
  assert s.accept(ids).accepted == len(ids)
  assert not legal(s, qwen3_vocab)[TOOL_OPEN]
  out = s.result()
  assert out.branch == "content" and out.content == '{"s": "<tool_call>"}' and not out.tool_calls
  s2 = p.new_session()
  s2.accept(call_ids(tok, "search", [("q", "x")]))
  assert s2.result().branch == "tools"
  assert s2.preview(tok("\n{")).accepted == 1  # after calls: only "\n" + another call / EOS


def test_automatic_policy_leaves_plain_auto_free(qwen3_vocab, tok):
  ts = fr.parse_tools([SEARCH])
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.CONTENT, tools=ts,
                        choice=fr.ToolChoice.auto(policy=fr.ToolPolicy.AUTOMATIC))
  assert p.compiled is None
  dec = p.new_decoder()
  dec.feed(tok("hi ") + [TOOL_OPEN] + tok("\n<function=search>\n<oops") + [TOOL_CLOSE])
  out = dec.result()  # free route: the malformed call is published as content
  assert out.tool_calls == () and "<oops" in out.content
  basic = fr.prepare_output(qwen3_vocab, fr.OutputPhase.CONTENT, tools=ts)
  assert basic.compiled is not None


def test_constrained_decoder_never_falls_back_to_content(qwen3_vocab, tok):
  f = fr.QwenFraming.from_vocab(qwen3_vocab)
  contracts = {"search": fr.ToolContract("search", False, (), {})}
  dec = fr.OutputDecoder(qwen3_vocab, f, fr.OutputPhase.CONTENT, contracts)
  with pytest.raises(fr.DecodeError):
    dec.feed([TOOL_OPEN] + tok("\n<function=search>\n<oops") + [TOOL_CLOSE])


def test_byte_split_decoding_equals_token_decoding(qwen3_vocab, tools, tok):
  """The decoder's result does not depend on how the bytes are split into tokens."""
  text = ("\n<function=lookup>\n<parameter=city>\nNaïve\n\n</parameter\n</parameter>\n"
          "<parameter=days>\n42\n</parameter>\n</function>\n")
  f = fr.QwenFraming.from_vocab(qwen3_vocab)
  fg = fr.build_grammar(f, fr.OutputPhase.CONTENT, tools=tools)
  byte_ids = [qwen3_vocab.token_id(bytes([b])) for b in text.encode()]
  results = []
  for body in (tok(text), byte_ids):
    dec = fr.OutputDecoder(qwen3_vocab, f, fr.OutputPhase.CONTENT, fg.contracts)
    dec.feed([TOOL_OPEN] + body + [TOOL_CLOSE])
    results.append(dec.result())
  assert results[0] == results[1]
  assert json.loads(results[0].tool_calls[0].arguments_json) == {
      "city": "Naïve\n\n</parameter", "days": 42}


BFCL = SHARED_DATA / "bfcl"


@pytest.mark.parametrize("subset, n", [("simple_python", 5), ("multiple", 4), ("parallel", 4)])
def test_bfcl_sample_strict_calls_validate(qwen3_vocab, subset, n):
  jsonschema = pytest.importorskip("jsonschema")
  path = BFCL / f"BFCL_v4_{subset}.json"
  if not path.exists():
    pytest.skip("shared data (BFCL) not present")
  rows = [json.loads(line) for line in path.read_text().splitlines()[:n]]
  for k, row in enumerate(rows):
    tools = tools_from_bfcl(row["function"])
    p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.THINKING, tools=tools,
                          choice=fr.ToolChoice.required())
    s = p.new_session()
    walk(s, LegalWalker(qwen3_vocab, seed=k, patience=24), max_tokens=400)
    assert s.terminated, row["id"]
    calls = s.result().tool_calls
    assert calls, row["id"]
    by_name = {t.name: t for t in tools}
    for c in calls:
      jsonschema.validate(json.loads(c.arguments_json), by_name[c.name].parameters)


def test_prepare_for_request_routing(qwen3_vocab, tok, toy):
  im_start = qwen3_vocab.token_id("<|im_start|>", control=True)
  chat = [im_start] + tok("assistant\n")
  js = OutputConstraint.json_object()
  assert fr.prepare_for_request(qwen3_vocab, tok("raw"), constraint=js) is None
  assert fr.prepare_for_request(qwen3_vocab, chat, constraint=None) is None
  p = fr.prepare_for_request(qwen3_vocab, chat, constraint=js)
  assert p.framed.phase is fr.OutputPhase.THINK_OPEN and p.constrained
  p = fr.prepare_for_request(qwen3_vocab, chat + [151667], tools=json.dumps([SEARCH]),
                             tool_choice="none")
  assert p.framed.phase is fr.OutputPhase.THINKING and not p.framed.tools_active
  assert fr.prepare_for_request(toy, [2, 3], constraint=js) is None
  # no Qwen markers: tools take the Hermes text framing
  assert isinstance(fr.prepare_for_request(toy, [2, 3], tools=[SEARCH]), fr.HermesPrepared)


def test_raw_string_pattern(qwen3_vocab, tok):
  jsonschema = pytest.importorskip("jsonschema")
  params = {"type": "object", "additionalProperties": False, "required": ["code", "tag"],
            "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"},
                           "tag": {"type": "string", "pattern": "x[0-9]"}}}
  t = fr.ToolDefinition("f", parameters=params, strict=True)
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.CONTENT, tools=[t],
                        choice=fr.ToolChoice.required())
  for code, tag, ok in (("ABC", "ax1b", True), ("AB", "x1", False), ("abc", "x1", False),
                        ("ABCD", "x1", False), ("ABC", "ab", False),
                        ("ABC", "x1\nmore", False)):  # raw pattern values stay single-line
    ids = call_ids(tok, "f", [("code", code), ("tag", tag)])
    s = p.new_session()
    assert (s.preview(ids).accepted == len(ids)) == ok, (code, tag)
  walk_params = {"type": "object", "additionalProperties": False, "required": ["code", "num"],
                 "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"},
                                "num": {"type": "string", "pattern": "^[0-9]+$"}}}
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.CONTENT, choice=fr.ToolChoice.required(),
                        tools=[fr.ToolDefinition("g", parameters=walk_params, strict=True)])
  s = p.new_session()
  walk(s, LegalWalker(qwen3_vocab, seed=4, patience=30), max_tokens=300)
  (call,) = s.result().tool_calls
  jsonschema.validate(json.loads(call.arguments_json), walk_params)
