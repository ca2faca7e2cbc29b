"""Framed grammars (Hermes text calls, Qwen thinking + XML calls) on every backend that can
express them: xgrammar and llguidance give the same masks and, under a seeded legal walker,
the same tokens; the trie refuses framing with a clear error."""

from __future__ import annotations

import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax import mask_layout
from infernix_jax.constrain import framing as fr
from infernix_jax.testing.framed_walk import LegalWalker, walker_hints

BACKENDS = ("xgrammar", "llguidance")
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather forecast of a city",
    "parameters": {"type": "object", "required": ["city"],
                   "properties": {"city": {"type": "string", "maxLength": 20},
                                  "days": {"type": "integer", "minimum": 1, "maximum": 7},
                                  "units": {"enum": ["metric", "imperial"]}}}}}
STRICT = {"type": "function", "function": {
    "name": "lookup", "strict": True,
    "parameters": {"type": "object", "additionalProperties": False, "required": ["q"],
                   "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}}}}


def _sessions(vocab, compiler, tools, choice, prompt):
  out = {}
  for be in BACKENDS:
    prepared = fr.prepare_for_request(vocab, prompt, tools=tools, tool_choice=choice,
                                      compiler=compiler, backend=be)
    assert prepared.compiled.grammar.backend == be
    out[be] = prepared.new_session()
    assert out[be].backend == be
  return out


def _lockstep_walk(vocab, sessions, seed, *, patience, max_tokens=160):
  """One walk driven by xgrammar's masks; every step checks that both backends' masks, states
  and previews agree, and the decoded outputs at the end. Returns the committed tokens."""
  walker = LegalWalker(vocab, seed, patience=patience)
  bufs = {be: np.zeros((1, vocab.mask_words), np.int32) for be in sessions}
  x = sessions["xgrammar"]
  out: list[int] = []
  for pos in range(max_tokens):
    if x.terminated:
      break
    states = {be: s.lookahead([], bufs[be]) for be, s in sessions.items()}
    np.testing.assert_array_equal(bufs["xgrammar"], bufs["llguidance"], err_msg=f"{pos=}")
    assert states["xgrammar"].tolist() == states["llguidance"].tolist()
    hints = walker_hints(x) if isinstance(x, fr.FramedSession) else {}
    tail = vocab.decode(out[-8:])[-16:]
    t = walker.choose(bufs["xgrammar"][0], pos, tail, **hints)
    results = [s.preview([t]) for s in sessions.values()]
    assert results[0] == results[1] and results[0].accepted == 1
    for s in sessions.values():
      s.commit()
    out.append(t)
  assert all(s.terminated == x.terminated for s in sessions.values())
  first, second = (s.result() for s in sessions.values())
  assert first == second
  return out


@pytest.mark.parametrize("choice", ["required", "auto"])
def test_hermes_walks_are_identical_on_xgrammar_and_llguidance(smollm2_vocab, choice):
  compiler = ic.ConstraintCompiler(smollm2_vocab)
  calls = ended = 0
  for seed in range(3):
    sessions = _sessions(smollm2_vocab, compiler, [WEATHER, STRICT], choice, [0])
    _lockstep_walk(smollm2_vocab, sessions, seed, patience=40)
    calls += len(sessions["llguidance"].result().tool_calls)
    ended += sessions["llguidance"].terminated
  assert ended and (calls or choice == "auto")


def test_qwen_framing_walks_are_identical_on_xgrammar_and_llguidance(qwen3_vocab):
  compiler = ic.ConstraintCompiler(qwen3_vocab)
  think = qwen3_vocab.token_id("<think>", control=True)
  for seed, prompt in ((0, [0]), (1, [0, think])):
    sessions = _sessions(qwen3_vocab, compiler, [WEATHER, STRICT], "auto", prompt)
    _lockstep_walk(qwen3_vocab, sessions, seed, patience=24, max_tokens=80)


def test_framed_draft_chains_and_batch_fill_agree(smollm2_vocab):
  """Lookahead over draft chains (legal, illegal, EOS) and `ic.fill_batch` on framed rows give
  the same states and masks on both backends (llguidance's batch path through mask_session)."""
  v = smollm2_vocab
  compiler = ic.ConstraintCompiler(v)
  sessions = _sessions(v, compiler, [WEATHER], "required", [0])
  text = b'<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
  ids = []
  pos = 0
  table = {b: i for i, b in reversed(list(enumerate(v.token_bytes))) if b}
  while pos < len(text):  # greedy longest-match spelling of the call
    n = max(n for n in range(1, 17) if text[pos:pos + n] in table)
    ids.append(table[text[pos:pos + n]])
    pos += n
  chains = [ids[:4], ids[:2] + [v.eos_ids[0]] + ids[3:4], ids[:1] + [ids[5]] * 3]
  k = 4
  for chain in chains:
    bufs = {be: np.zeros((k + 1, v.mask_words), np.int32) for be in BACKENDS}
    states = {be: s.lookahead(chain, bufs[be][:len(chain) + 1]) for be, s in sessions.items()}
    assert states["xgrammar"].tolist() == states["llguidance"].tolist(), chain
    np.testing.assert_array_equal(bufs["xgrammar"], bufs["llguidance"])
  again = _sessions(v, compiler, [WEATHER], "required", [0])
  for be, s in sessions.items():
    plain = ic.ConstraintCompiler(v).compile(ic.OutputConstraint.json_object(), backend=be)
    rows = [s, plain.new_session(), again[be]]
    drafts = np.array([ids[:k], [0] * k, ids[:2] + [0, 0]], np.int32)
    n = np.array([4, 0, 3])
    out = np.zeros((3, k + 1, v.mask_words), np.int32)
    got, enabled = ic.fill_batch(rows, drafts, n, out)
    assert enabled.all()
    for b, row in enumerate(rows):
      ref = np.zeros((k + 1, v.mask_words), np.int32)
      want = row.lookahead(drafts[b, :n[b]], ref[:n[b] + 1])
      assert got[b, :n[b] + 1].tolist() == want.tolist(), (be, b)
      np.testing.assert_array_equal(out[b], ref)
      assert (got[b, n[b] + 1:] == mask_layout.UNREACHABLE).all()


def test_framing_backend_errors(qwen3_vocab):
  tools = fr.parse_tools([WEATHER])
  with pytest.raises(ic.UnsupportedConstraintError) as e:
    fr.prepare_for_request(qwen3_vocab, [0], tools=tools, backend="trie")
  assert e.value.backend == "trie" and e.value.construct == "framed output"
  assert "xgrammar or llguidance" in str(e.value)
  with pytest.raises(ValueError, match="known backends"):
    fr.prepare_for_request(qwen3_vocab, [0], tools=tools, backend="nope")
  with pytest.raises(ic.UnsupportedConstraintError):  # framing applies to whole grammars only
    ic.ConstraintCompiler(qwen3_vocab).compile(
        ic.OutputConstraint.json_object().with_framing("qwen"), backend="llguidance")
  default = fr.prepare_for_request(qwen3_vocab, [0], tools=tools)
  auto = fr.prepare_for_request(qwen3_vocab, [0], tools=tools, backend="auto")
  assert default.compiled.grammar.backend == auto.compiled.grammar.backend == "xgrammar"
