"""Strict UTF-8 in every constraint kind and no mask bit past V (Qwen3 vocabulary)."""

from __future__ import annotations

import codecs
import random

import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax import mask_layout
from infernix_jax.constrain import framing as fr

QUOTE, ED, A1 = 1, 169, 94  # Qwen3 ids of b'"', b'\xed', b'\xa1'
TOOL_OPEN, THINK_OPEN, THINK_CLOSE = 151657, 151667, 151668
SEARCH = {"name": "search", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}}}


@pytest.fixture(scope="module")
def compiler(qwen3_vocab):
  return ic.ConstraintCompiler(qwen3_vocab)


@pytest.fixture(scope="module")
def byte_ids(qwen3_vocab) -> dict[int, int]:
  """Single-byte ordinary token of each byte value."""
  out = {}
  for i, b in enumerate(qwen3_vocab.token_bytes):
    if len(b) == 1 and qwen3_vocab.token_class[i] == 0:
      out.setdefault(b[0], i)
  return out


def legal(session, vocab) -> np.ndarray:
  buf = np.zeros((1, vocab.mask_words), np.int32)
  session.lookahead([], buf)
  return mask_layout.unpack(buf, vocab.size)[0]


def legal_bytes(session, vocab, byte_ids) -> set[int]:
  """Byte values whose single-byte token is legal now."""
  allowed = legal(session, vocab)
  return {b for b, i in byte_ids.items() if allowed[i]}


def spare_bits(words: np.ndarray, vocab_size: int) -> np.ndarray:
  """Ids >= V whose bit is set in ``words`` [..., W]."""
  w = words.shape[-1]
  bits = mask_layout.unpack(words.reshape(-1, w), w * 32)[:, vocab_size:]
  return np.flatnonzero(bits.any(axis=0)) + vocab_size


# --- the reproduction and each front end -------------------------------------------------------

def test_qwen3_reproduction_surrogate_is_refused(qwen3_vocab, compiler, byte_ids):
  c = compiler.compile(ic.OutputConstraint.json_schema('{"type":"string"}'))
  s = c.new_session()
  assert qwen3_vocab.token_bytes[ED] == b"\xed" and qwen3_vocab.token_bytes[A1] == b"\xa1"
  r = s.preview([QUOTE, ED, A1])
  assert r.accepted == 2  # 22 ED accepted, A1 refused
  s.discard()
  buf = np.zeros((4, qwen3_vocab.mask_words), np.int32)
  states = s.lookahead([QUOTE, ED, A1], buf)
  assert list(states) == [mask_layout.READY] * 3 + [mask_layout.UNREACHABLE]
  assert not mask_layout.unpack(buf[2], qwen3_vocab.size)[A1]
  s.accept([QUOTE, ED])
  assert legal_bytes(s, qwen3_vocab, byte_ids) == set(range(0x80, 0xA0))
  assert not s.complete and s.accept([A1]).accepted == 0


def after_ed(session, vocab, byte_ids) -> set[int]:
  """Legal single bytes after a lone 0xED (which must itself be legal now)."""
  r = session.accept([byte_ids[0xED]])
  assert r.accepted == 1
  return legal_bytes(session, vocab, byte_ids)


def test_json_object_keys(qwen3_vocab, compiler, byte_ids):
  s = compiler.compile(ic.OutputConstraint.json_object()).new_session(prefix='{"')
  assert after_ed(s, qwen3_vocab, byte_ids) == set(range(0x80, 0xA0))


@pytest.mark.parametrize("gbnf", [r"root ::= [^a]+", r"root ::= [^\x00-\x7F]",
                                  r"root ::= [\u0000-\U0010FFFF]+"])
def test_gbnf_negated_and_wide_classes(qwen3_vocab, compiler, byte_ids, gbnf):
  s = compiler.compile(ic.OutputConstraint.grammar(gbnf)).new_session()
  assert after_ed(s, qwen3_vocab, byte_ids) == set(range(0x80, 0xA0))


def test_regex_dot(qwen3_vocab, compiler, byte_ids):
  s = compiler.compile(ic.OutputConstraint.regex(".+")).new_session()
  assert after_ed(s, qwen3_vocab, byte_ids) == set(range(0x80, 0xA0))


def test_raw_tool_argument(qwen3_vocab, tok, byte_ids):
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.CONTENT, tools=fr.parse_tools([SEARCH]),
                        choice=fr.ToolChoice.named("search"))
  s = p.new_session()
  head = [TOOL_OPEN] + tok("\n<function=search>\n<parameter=q>\n")
  assert s.accept(head).accepted == len(head)
  assert after_ed(s, qwen3_vocab, byte_ids) == set(range(0x80, 0xA0))


@pytest.mark.parametrize("phase", [fr.OutputPhase.THINKING, fr.OutputPhase.THINK_OPEN])
def test_reasoning_is_token_level_content_is_strict(qwen3_vocab, tok, byte_ids, phase):
  """Reasoning admits any token (not filtered); from </think> on the text is strict UTF-8."""
  p = fr.prepare_output(qwen3_vocab, phase, tools=fr.parse_tools([SEARCH]),
                        choice=fr.ToolChoice.none())
  opened = [THINK_OPEN] if phase is fr.OutputPhase.THINK_OPEN else []
  head = opened + [byte_ids[0xED], byte_ids[0xA1], byte_ids[0xED]] + tok("x") + [THINK_CLOSE]
  head += tok("\n\n")
  s = p.new_session()
  assert s.accept(head).accepted == len(head)
  assert after_ed(s, qwen3_vocab, byte_ids) == set(range(0x80, 0xA0))
  if opened:  # content at once, no reasoning
    assert after_ed(p.new_session(), qwen3_vocab, byte_ids) == set(range(0x80, 0xA0))


def test_prefix_with_a_surrogate_is_refused(compiler):
  c = compiler.compile(ic.OutputConstraint.json_schema('{"type":"string"}'))
  with pytest.raises(ic.PrefixError) as e:
    c.new_session(prefix=b'"ab\xed\xa1\x80"')
  assert e.value.location == "4"
  assert not c.new_session(prefix=b'"ab\xed\x9f').complete


@pytest.mark.parametrize("gbnf, where", [
    (r"root ::= [\uD800-\uDFFF]+", "1:11"),
    ('root ::= "a" x\nx ::= "\\uD83D\\uDE00"', "2:8"),
    (r'root ::= "\U0000DC00"', "1:11"),
    (r'root ::= "\xD800"', "1:11"),
    (r"root ::= [a-\uDBFF]", "1:13"),
])
def test_gbnf_surrogate_escapes_are_rejected(compiler, gbnf, where):
  with pytest.raises(ic.GrammarSyntaxError) as e:
    compiler.compile(ic.OutputConstraint.grammar(gbnf))
  assert e.value.location == where


def test_tokens_invalid_by_themselves_are_never_legal():
  """A custom vocabulary whose tokens spell surrogates inside one token (no Qwen3 data)."""
  toks = [b"<eos>", b"a", b"b", b"\xed", b"\x80", b"\xa0", b"\xed\xa0\x80", b"a\xed\xa0",
          b"\xed\x9f\xbf", b"\xc3\xa9"]
  v = ic.Vocabulary.from_tokens(toks, eos_ids=[0])
  s = ic.ConstraintCompiler(v).compile(ic.OutputConstraint.grammar("root ::= [^b]+")).new_session()
  allowed = legal(s, v)
  assert [i for i in range(len(toks)) if allowed[i]] == [1, 3, 8, 9]
  assert s.preview([1, 6]).accepted == 1
  s.discard()
  s.accept([1, 3])
  allowed = legal(s, v)
  assert [i for i in range(len(toks)) if allowed[i]] == [4]  # 80 only: no A0, no EOS
  assert not s.complete


# --- spare bits ----------------------------------------------------------------------------------

def test_no_bit_past_the_vocabulary(qwen3_vocab, compiler):
  v, w = qwen3_vocab.size, qwen3_vocab.mask_words
  assert v % 32  # 151,669: the last word has 11 spare bits
  c = compiler.compile(ic.OutputConstraint.regex(".{3}"))
  s = c.new_session()
  buf = np.zeros((4, w), np.int32)
  s.lookahead([44, 45, 46], buf)  # "M", "N", "O"
  assert spare_bits(buf, v).size == 0
  one = np.zeros(w, np.int32)
  assert c.new_session().fill_mask(one) and spare_bits(one, v).size == 0
  s.preview([44])  # the preview's frontier becomes the committed mask
  s.commit()
  assert s.fill_mask(one) and spare_bits(one, v).size == 0
  for threads in (0, 2):
    sessions = [c.new_session() for _ in range(3)] + [None]
    out = np.zeros((4, 3, w), np.int32)
    drafts = np.array([[44, 45]] * 4, np.int32)
    ic.fill_batch(sessions, drafts, np.array([2, 1, 0, 0]), out, batch_threads=threads)
    assert spare_bits(out, v).size == 0, threads
  p = fr.prepare_output(qwen3_vocab, fr.OutputPhase.CONTENT, tools=fr.parse_tools([SEARCH]))
  fs = p.new_session()
  buf[:] = 0
  fs.lookahead([44, 45, 46], buf)
  assert spare_bits(buf, v).size == 0
  assert fs.fill_mask(one) and spare_bits(one, v).size == 0


# --- random walks ------------------------------------------------------------------------------

KINDS = ("json_string", "json_object_keys", "raw_tool_argument", "regex", "gbnf", "choice",
         "choice_trie")
CHOICES = ["héllo wörld", "日本語のテキスト", "😀 smile", "\ud7ff\ue000", "𐍈\U0010ffff", "ascii"]
# Walks per kind, fixed so the test does the same work on any machine (each kind's count takes
# 1-3 s on a quiet 2-core CPU; a tool-argument walk is the slowest, about 0.3 s).
WALKS = {"json_string": 40, "json_object_keys": 30, "raw_tool_argument": 8, "regex": 10,
         "gbnf": 30, "choice": 100, "choice_trie": 100}
K = 3


def make_session(kind, vocab, compiler, tok):
  oc = ic.OutputConstraint
  if kind == "json_string":
    return compiler.compile(oc.json_schema('{"type":"string"}')).new_session()
  if kind == "json_object_keys":
    return compiler.compile(oc.json_object()).new_session(prefix='{"')
  if kind == "regex":
    return compiler.compile(oc.regex("(é|[^a])+x?|.")).new_session()
  if kind == "gbnf":
    return compiler.compile(oc.grammar(
        'root ::= ([^a] | [^\\x00-\\x7F] | "é" | [\\u0800-\\uFFFF])+ "!"')).new_session()
  if kind == "choice":
    return compiler.compile(oc.choice(CHOICES), backend="xgrammar").new_session()
  if kind == "choice_trie":
    return compiler.compile(oc.choice(CHOICES), backend="trie").new_session()
  p = fr.prepare_output(vocab, fr.OutputPhase.CONTENT, tools=fr.parse_tools([SEARCH]),
                        choice=fr.ToolChoice.named("search"))
  s = p.new_session()
  s.accept([TOOL_OPEN] + tok("\n<function=search>\n<parameter=q>\n"))
  return s


@pytest.fixture(scope="module")
def partial_ids(qwen3_vocab) -> np.ndarray:
  """Ordinary tokens that are not whole UTF-8 text: lead bytes, continuation bytes, pieces."""
  ids = []
  for i, b in enumerate(qwen3_vocab.token_bytes):
    if qwen3_vocab.token_class[i] == 0 and b:
      try:
        b.decode("utf-8")
      except UnicodeDecodeError:
        ids.append(i)
  return np.asarray(ids)


def pick(rng: random.Random, allowed: np.ndarray, partial: np.ndarray, eos) -> int:
  """A uniformly random legal token, three times in four a partial-UTF-8 one when any is
  (and EOS once in ten times when it is legal, so that walks end)."""
  if rng.random() < 0.1 and any(allowed[e] for e in eos):
    return next(e for e in eos if allowed[e])
  part = partial[allowed[partial]]
  if part.size and rng.random() < 0.75:
    return int(part[rng.randrange(part.size)])
  ids = np.flatnonzero(allowed)
  return int(ids[rng.randrange(ids.size)])


def walk(session, vocab, partial, rng: random.Random, steps: int = 24):
  """Random lookahead / preview / commit rounds; returns the committed bytes and whether the
  output terminated. Checks the transaction contracts the filter must keep on the way."""
  v, w = vocab.size, vocab.mask_words
  buf = np.zeros((K + 1, w), np.int32)
  dec = codecs.getincrementaldecoder("utf-8")("strict")
  committed = bytearray()
  for _ in range(steps):
    if session.terminated:
      break
    drafts: list[int] = []
    masks = []
    for _ in range(K):
      states = session.lookahead(drafts, buf[:len(drafts) + 1])
      if states[len(drafts)] != mask_layout.READY:
        break
      allowed = mask_layout.unpack(buf[len(drafts)], v)
      masks.append(allowed)
      assert spare_bits(buf[:len(drafts) + 1], v).size == 0
      t = pick(rng, allowed, partial, vocab.eos_ids)
      drafts.append(t)
      if t in vocab.eos_ids:
        break
    if not drafts:
      break
    if rng.random() < 0.3:  # a random partial-UTF-8 draft: legal exactly when its bit is set
      drafts[-1] = int(partial[rng.randrange(partial.size)])
    forced = session.forced_tokens(4)
    if forced:
      assert session.preview(forced).accepted == len(forced), forced
      session.discard()
    r = session.preview(drafts)
    for i in range(min(len(drafts), len(masks))):
      assert (i < r.accepted) == all(masks[j][drafts[j]] for j in range(i + 1)), (i, drafts)
    if rng.random() < 0.2:
      session.discard()
      continue
    session.commit()
    data = b"".join(vocab.token_bytes[t] for t in drafts[:r.accepted])
    committed += data
    dec.decode(data)  # raises on the first byte that is not strict UTF-8
    if session.complete:  # the output may end here: no character is left open
      assert dec.getstate()[0] == b"", committed
    if r.dead_end:
      break
  if session.terminated:
    dec.decode(b"", final=True)
  return bytes(committed), session.terminated


@pytest.mark.parametrize("kind", KINDS)
def test_random_walks_are_strict_utf8(qwen3_vocab, compiler, tok, partial_ids, kind):
  """Every committed prefix is strict UTF-8 and a terminated output decodes with final=True
  (WALKS[kind] seeded walks per kind)."""
  rng = random.Random(kind)
  terminated = pending = 0
  for _ in range(WALKS[kind]):
    s = make_session(kind, qwen3_vocab, compiler, tok)
    data, ended = walk(s, qwen3_vocab, partial_ids, rng)
    terminated += ended
    pending += sum(1 for b in data if 0xC2 <= b <= 0xF4)  # lead bytes committed
  assert pending  # the walks went through multi-byte characters
  if kind in ("regex", "choice", "choice_trie"):
    assert terminated
