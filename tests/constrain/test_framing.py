"""Thinking framing on the real Qwen3 vocabulary: grammar masks, decoder, forced close."""

from __future__ import annotations

import codecs

import numpy as np
import pytest

from infernix_jax import mask_layout
from infernix_jax.constrain import OutputConstraint
from infernix_jax.constrain import framing as fr
from tests.constrain.conftest import QWEN3_DIR

THINK_OPEN, THINK_CLOSE, TOOL_OPEN, TOOL_CLOSE = 151667, 151668, 151657, 151658


def legal(session, vocab) -> np.ndarray:
  buf = np.zeros((1, vocab.mask_words), np.int32)
  session.lookahead([], out=buf)
  return mask_layout.unpack(buf, vocab.size)[0]


@pytest.fixture(scope="module")
def free_thinking(qwen3_vocab):
  """THINKING phase, tools declared with choice none (grammar: reasoning + free text)."""
  tools = fr.parse_tools([{"name": "f", "parameters": {"type": "object", "properties": {}}}])
  return fr.prepare_output(qwen3_vocab, fr.OutputPhase.THINKING, tools=tools,
                           choice=fr.ToolChoice.none())


def test_markers_are_resolved_by_id(qwen3_vocab):
  f = fr.QwenFraming.from_vocab(qwen3_vocab)
  assert (f.think_open, f.think_close, f.tool_open, f.tool_close) == (
      THINK_OPEN, THINK_CLOSE, TOOL_OPEN, TOOL_CLOSE)
  assert qwen3_vocab.decode(f.forced_close_tokens()) == fr.FORCED_CLOSE.encode()


def test_reasoning_mask_excludes_eos_and_allows_close(free_thinking, qwen3_vocab):
  s = free_thinking.new_session()
  allowed = legal(s, qwen3_vocab)
  assert allowed[THINK_CLOSE]
  assert not any(allowed[e] for e in qwen3_vocab.eos_ids)
  ordinary = qwen3_vocab.ordinary_ids
  assert allowed[ordinary].all()  # free reasoning: every ordinary token


def test_spelled_close_stays_reasoning(free_thinking, qwen3_vocab, tok):
  s = free_thinking.new_session()
  spelled = [qwen3_vocab.token_id(p) for p in ("a", "</", "think", ">", "\n\n", "b")]
  assert s.accept(spelled).accepted == len(spelled)
  allowed = legal(s, qwen3_vocab)
  assert not any(allowed[e] for e in qwen3_vocab.eos_ids)  # still inside reasoning
  out = s.result()
  assert out.reasoning == "a</think>\n\nb" and out.content == "" and s.in_reasoning


def _utf8_prefix_ok(b: bytes) -> bool:
  try:
    codecs.getincrementaldecoder("utf-8")().decode(b, final=False)
    return True
  except UnicodeDecodeError:
    return False


def test_separator_is_byte_level_after_close(free_thinking, qwen3_vocab):
  s = free_thinking.new_session()
  s.accept([THINK_CLOSE])
  allowed = legal(s, qwen3_vocab)
  # Oracle: an ordinary token is legal iff its bytes are a prefix of "\n\n" or start with
  # "\n\n" followed by (a prefix of) UTF-8 text; no control token, no EOS.
  expect = np.zeros(qwen3_vocab.size, bool)
  for i in qwen3_vocab.ordinary_ids:
    b = qwen3_vocab.token_bytes[i]
    expect[i] = (b"\n\n".startswith(b) or (b.startswith(b"\n\n") and _utf8_prefix_ok(b[2:])))
  assert np.array_equal(allowed, expect)
  assert qwen3_vocab.token_id("\n\n\n") in np.flatnonzero(allowed)  # end of sep + content


def test_close_without_separator_is_refused(free_thinking, qwen3_vocab, tok):
  s = free_thinking.new_session()
  r = s.preview([THINK_CLOSE] + tok("Hello"))
  assert r.accepted == 1
  s.discard()
  r = s.preview([THINK_CLOSE, qwen3_vocab.eos_ids[0]])
  assert r.accepted == 1 and not r.terminated


def test_decoder_strips_only_framing_newlines(free_thinking, tok):
  s = free_thinking.new_session()
  ids = tok("step one\nstep two\n") + [THINK_CLOSE] + tok("\n\n answer")
  s.accept(ids)
  out = s.result()
  assert out.reasoning == "step one\nstep two"  # the "\n" before </think> is framing
  assert out.content == " answer"  # a leading space of the content is kept
  assert out.branch == "content"


def test_content_starting_with_space_keeps_it(qwen3_vocab, tok):
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.THINKING,
                        content=OutputConstraint.grammar('root ::= " " [a-z]+'))
  s = p.new_session()
  ids = tok("hm") + [THINK_CLOSE] + tok("\n\n ok")
  assert s.accept(ids).accepted == len(ids) and s.complete
  assert s.result().content == " ok"


def test_json_content_after_thinking(qwen3_vocab, tok):
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.THINKING, content=OutputConstraint.json_object())
  s = p.new_session()
  ids = tok("hm") + [THINK_CLOSE] + tok('\n\n{"a": 1}')
  assert s.accept(ids).accepted == len(ids)
  assert s.complete
  r = s.accept([qwen3_vocab.eos_ids[0]])
  assert r.terminated and s.result().content == '{"a": 1}'
  # EOS is refused anywhere inside reasoning, so a JSON request cannot end with thinking only.
  s2 = p.new_session()
  assert s2.preview(tok("hm") + [qwen3_vocab.eos_ids[0]]).accepted == len(tok("hm"))


def test_forced_close_equals_natural_close(free_thinking, qwen3_vocab, tok):
  reasoning = tok("let me see")
  natural = free_thinking.new_session()
  natural.accept(reasoning + [qwen3_vocab.token_id("\n"), THINK_CLOSE,
                              qwen3_vocab.token_id("\n\n")])
  forced = free_thinking.new_session()
  forced.accept(reasoning)
  r = forced.preview_forced_close()
  assert r.accepted == len(forced.forced_close_tokens()) == 3
  forced.commit()
  assert np.array_equal(legal(natural, qwen3_vocab), legal(forced, qwen3_vocab))
  assert natural.result() == forced.result()
  assert not forced.in_reasoning
  with pytest.raises(RuntimeError):
    forced.preview_forced_close()


def test_forced_close_discard_leaves_no_trace(free_thinking, qwen3_vocab, tok):
  s = free_thinking.new_session()
  s.accept(tok("abc"))
  before = legal(s, qwen3_vocab)
  s.preview_forced_close()
  s.discard()
  assert np.array_equal(before, legal(s, qwen3_vocab)) and s.in_reasoning


def test_think_open_phase(qwen3_vocab, tok):
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.THINK_OPEN, content=OutputConstraint.choice(["yes", "no"]))
  s = p.new_session()
  allowed = legal(s, qwen3_vocab)
  assert allowed[THINK_OPEN] and not allowed[THINK_CLOSE]
  s.accept([THINK_OPEN] + tok("\nwhy\n") + [THINK_CLOSE] + tok("\n\nyes"))
  assert s.complete and s.result().reasoning == "why" and s.result().content == "yes"
  direct = p.new_session()
  assert direct.accept(tok("no")).accepted == 1 and direct.complete


def test_phase_of_prompt(qwen3_vocab, tok):
  f = fr.QwenFraming.from_vocab(qwen3_vocab)
  im_start = qwen3_vocab.token_id("<|im_start|>", control=True)
  head = [im_start] + tok("assistant\n")
  assert fr.phase_of_prompt(head + [THINK_OPEN] + tok("\n"), f, vocab=qwen3_vocab) is fr.OutputPhase.THINKING
  closed = head + [THINK_OPEN] + tok("\n\n") + [THINK_CLOSE] + tok("\n\n")
  assert fr.phase_of_prompt(closed, f, vocab=qwen3_vocab) is fr.OutputPhase.CONTENT
  assert fr.phase_of_prompt(head, f, vocab=qwen3_vocab) is fr.OutputPhase.THINK_OPEN
  assert fr.phase_of_prompt(tok("raw text"), f, vocab=qwen3_vocab) is fr.OutputPhase.CONTENT


def test_chat_template_matches_transformers(qwen3_vocab):
  transformers = pytest.importorskip("transformers")
  hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(QWEN3_DIR / "tokenizer.json"))
  tmpl = fr.ChatTemplate.from_dir(QWEN3_DIR)
  hf.chat_template = tmpl.source
  tools = fr.parse_tools([{"type": "function", "function": {
      "name": "lookup", "description": "Weather é", "parameters": {
          "type": "object", "properties": {"city": {"type": "string"}}}}}])
  messages = [{"role": "system", "content": "Be brief."},
              {"role": "user", "content": "Weather in Paris?"},
              {"role": "assistant", "content": "",
               "tool_calls": [{"function": {"name": "lookup", "arguments": {"city": "Paris"}}}]},
              {"role": "tool", "content": "sunny"},
              {"role": "user", "content": "Thanks"}]
  for kw in ({}, {"enable_thinking": False}):
    ours = tmpl.render(messages, tools=tools, **kw)
    theirs = hf.apply_chat_template(messages, tools=[t.to_openai() for t in tools],
                                    tokenize=False, add_generation_prompt=True, **kw)
    assert ours == theirs
  assert tmpl.render(messages[:2], enable_thinking=False).endswith(
      "<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_reasoning_need_not_be_utf8(free_thinking, qwen3_vocab, tok):
  """Reasoning is token-level (any token but </think>): a partial UTF-8 token followed by
  text is legal there, and the constrained decoder shows it instead of failing."""
  partial = next(i for i in qwen3_vocab.ordinary_ids[::-1]
                 if qwen3_vocab.token_bytes[i] in (b"\xe4", b"\xf0", b"\xe5"))
  s = free_thinking.new_session()
  ids = [int(partial)] + tok("\nok") + [THINK_CLOSE] + tok("\n\ndone")
  assert s.accept(ids).accepted == len(ids)
  out = s.result()
  assert out.reasoning == "\ufffd\nok" and out.content == "done"
