"""XGrammarSession masks and transactions against brute-force enumeration on toy vocabularies."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax import mask_layout
from infernix_jax.mask_layout import DEAD_END, READY, UNREACHABLE
from tests.constrain.conftest import TOY_CONTROL, TOY_EOS, TOY_TOKENS, toy_vocab

V = len(TOY_TOKENS)


_PREFIXES: dict[frozenset, set[bytes]] = {}


def oracle_legal(language: set[bytes], prefix: bytes) -> set[int]:
  """Legal next ids for a finite language: tokens keeping the bytes a prefix of some word."""
  key = frozenset(language)
  if key not in _PREFIXES:
    _PREFIXES[key] = {w[:i] for w in language for i in range(len(w) + 1)}
  prefixes = _PREFIXES[key]
  legal = {t for t in range(V) if t not in (TOY_EOS, TOY_CONTROL)
           and prefix + TOY_TOKENS[t] in prefixes}
  if prefix in language:
    legal.add(TOY_EOS)
  return legal


def mask_set(words: np.ndarray) -> set[int]:
  return set(np.flatnonzero(mask_layout.unpack(words, V)).tolist())


def walk_all(session, language: set[bytes], max_depth: int = 12) -> int:
  """DFS over every legal token path; each node's lookahead mask must equal the oracle."""
  buf = np.zeros((max_depth + 2, 1), np.int32)
  stack = [()]
  nodes = 0
  while stack:
    path = stack.pop()
    prefix = b"".join(TOY_TOKENS[t] for t in path)
    states = session.lookahead(list(path), out=buf[:len(path) + 1])
    assert (states == READY).all(), (path, states)
    legal = mask_set(buf[len(path)])
    assert legal == oracle_legal(language, prefix), (path, prefix)
    nodes += 1
    if len(path) < max_depth:
      stack.extend(path + (t,) for t in sorted(legal) if t != TOY_EOS)
  return nodes


CHOICES = [
    ["ab", "abc", "b"],                      # shared prefixes: "ab" may end or continue
    ["", "a", "ba"],                          # the empty string is a legal choice
    ["é", "é,", "a\xe9"],                     # partial UTF-8 tokens b"\xc3" + b"\xa9"
    ["é", "éa", "\na"],                      # escapes followed by hex-digit letters
    ["<c>", "c"],                             # ordinary "<c>" legal, control "<c>" never
    ["abc", "abc", "cba"],                    # duplicates removed
]


@pytest.mark.parametrize("values", CHOICES)
def test_choice_masks_equal_bruteforce(values):
  compiler = ic.ConstraintCompiler(toy_vocab())
  compiled = compiler.compile(ic.OutputConstraint.choice(values))
  session = compiled.new_session()
  language = {v.encode() for v in values}
  assert walk_all(session, language) > len(language)
  # Order and duplicates carry no weight: the same cached grammar.
  again = compiler.compile(ic.OutputConstraint.choice(list(reversed(values)) + values[:1]))
  assert again.cache_status == "hit" and again.key == compiled.key


GBNF = r'''
root ::= "{" pair ("," ws pair)? "}"
pair ::= "\"" key "\":" ws val
key ::= "a" | "ab" | "b"
val ::= "1" | "12" | "\"" [ab] "\""
ws ::= " "?
'''


def gbnf_language() -> set[bytes]:
  keys, vals = ["a", "ab", "b"], ["1", "12", '"a"', '"b"']
  pairs = [f'"{k}":{w}{v}' for k in keys for v in vals for w in ("", " ")]
  out = {"{" + p + "}" for p in pairs}
  out |= {"{" + p + "," + w + q + "}" for p in pairs for q in pairs for w in ("", " ")}
  return {s.encode() for s in out}


def test_gbnf_punctuation_across_tokens_bruteforce():
  # Tokens like '{"', '":', '",', '"}', '":"', '},' cross grammar symbols.
  compiled = ic.ConstraintCompiler(toy_vocab()).compile(ic.OutputConstraint.grammar(GBNF))
  assert walk_all(compiled.new_session(), gbnf_language(), max_depth=9) > 500


def test_lookahead_states_and_no_trace():
  compiled = ic.ConstraintCompiler(toy_vocab()).compile(
      ic.OutputConstraint.choice(["ab", "abc", "bq"]))
  s = compiled.new_session()
  buf = np.full((5, 1), -7, np.int32)
  a, b, c, ab = 2, 3, 4, 5
  # Illegal draft at position 1 ("a" then "a"): position 1 is Ready with the legal prefix's
  # mask, later positions Unreachable with zero filler.
  states = s.lookahead([a, a, b, c], out=buf)
  assert list(states) == [READY, READY, UNREACHABLE, UNREACHABLE, UNREACHABLE]
  assert mask_set(buf[1]) == {b} and (buf[2:] == 0).all()
  # EOS accepted: later positions Unreachable.
  states = s.lookahead([ab, TOY_EOS, a], out=buf[:4])
  assert list(states) == [READY, READY, UNREACHABLE, UNREACHABLE]
  assert mask_set(buf[1]) == {c, TOY_EOS}
  # "b" then no token spells "q": DeadEnd, which is not a failure by itself.
  states = s.lookahead([b, a], out=buf[:3])
  assert list(states) == [READY, DEAD_END, UNREACHABLE] and (buf[1] == 0).all()
  # An out-of-range draft is illegal, never a crash.
  assert list(s.lookahead([V + 5], out=buf[:2])) == [READY, UNREACHABLE]
  # No trace: the committed state is untouched.
  assert s.lookahead([], out=buf[:1])[0] == READY and mask_set(buf[0]) == {a, b, ab, 6}
  assert not s.complete and not s.terminated and s.can_continue


def test_preview_commit_discard_and_flags():
  compiled = ic.ConstraintCompiler(toy_vocab()).compile(ic.OutputConstraint.regex("[12]+"))
  s = compiled.new_session()
  one, twelve = 21, 22
  r = s.preview([one, twelve, 2, one])
  assert (r.accepted, r.complete, r.terminated, r.dead_end) == (2, True, False, False)
  with pytest.raises(RuntimeError):
    s.lookahead([], out=np.zeros((1, 1), np.int32))
  s.discard()
  assert not s.complete and s.tokens_committed == 0
  r = s.accept([one])
  assert r.complete and not r.terminated and s.complete and s.can_continue  # may end, not must
  r = s.preview([twelve, TOY_EOS, one])
  assert (r.accepted, r.terminated) == (2, True)
  s.discard()
  assert not s.terminated and s.complete
  s.accept([TOY_EOS])
  assert s.terminated and not s.can_continue and s.tokens_committed == 2
  buf = np.zeros((2, 1), np.int32)
  assert list(s.lookahead([one], out=buf)) == [UNREACHABLE, UNREACHABLE]


def test_preview_reports_dead_end():
  compiled = ic.ConstraintCompiler(toy_vocab()).compile(ic.OutputConstraint.choice(["bq", "a"]))
  r = compiled.new_session().preview([3])
  assert (r.accepted, r.dead_end, r.complete) == (1, True, False)


def test_continuation_prefix():
  compiled = ic.ConstraintCompiler(toy_vocab()).compile(ic.OutputConstraint.grammar(GBNF))
  s = compiled.new_session(prefix=b'{"a')
  buf = np.zeros((1, 1), np.int32)
  s.lookahead([], out=buf)
  assert mask_set(buf[0]) == oracle_legal(gbnf_language(), b'{"a')
  assert s.tokens_committed == 0  # the prefix is not republished as tokens
  r = s.accept([16, 21, 9, TOY_EOS])  # '":' '1' '}' EOS: prefix + suffix form the value
  assert r.accepted == 4 and r.terminated
  with pytest.raises(ic.PrefixError) as e:
    compiled.new_session(prefix=b'{"c')
  assert e.value.location == "2"
  # Partial UTF-8 continuation prefix.
  uc = ic.ConstraintCompiler(toy_vocab()).compile(ic.OutputConstraint.choice(["é"]))
  s = uc.new_session(prefix=b"\xc3")
  s.lookahead([], out=buf)
  assert mask_set(buf[0]) == {24}


def test_forced_tokens():
  compiled = ic.ConstraintCompiler(toy_vocab()).compile(
      ic.OutputConstraint.grammar('root ::= "abcab" ("1" | "2")'))
  s = compiled.new_session()
  assert s.forced_tokens(8) == [6, 5]          # "abc" + "ab": longest tokens, then a choice
  assert s.forced_tokens(1) == [6]
  assert s.forced_tokens(0) == []
  buf = np.zeros((1, 1), np.int32)
  s.lookahead([], out=buf)
  assert mask_set(buf[0]) == {2, 5, 6}          # no trace
  s.accept([6, 5])
  assert s.forced_tokens(4) == []


def test_buffer_checks():
  s = ic.ConstraintCompiler(toy_vocab()).compile(ic.OutputConstraint.choice(["a"])).new_session()
  with pytest.raises(ValueError):
    s.lookahead([2], out=np.zeros((2, 2), np.int32)[:, :1])  # strided view
  with pytest.raises(ValueError):
    s.lookahead([2], out=np.zeros((2, 1), np.int64))
  with pytest.raises(ValueError):
    s.lookahead([2, 2], out=np.zeros((2, 1), np.int32))       # too few rows


def test_qwen3_json_session(qwen3_vocab):
  compiler = ic.ConstraintCompiler(qwen3_vocab)
  compiled = compiler.compile(ic.OutputConstraint.json_schema(
      '{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}'),
      backend="xgrammar")
  s = compiled.new_session()
  v = qwen3_vocab
  forced = s.forced_tokens(4)
  assert v.decode(forced) == b'{"name"' or v.decode(forced).startswith(b"{")
  text = [v.token_id(t) for t in ['{"', 'name', '":', ' "', 'Bob', '"}']]
  buf = np.zeros((len(text) + 2, v.mask_words), np.int32)
  states = s.lookahead(text + [v.eos_ids[0]], out=buf)
  assert list(states) == [READY] * (len(text) + 1) + [UNREACHABLE]
  allowed = mask_layout.unpack(buf[len(text)], v.size)
  assert set(np.flatnonzero(allowed)) == set(v.eos_ids)
  # Control tokens are never legal text, whatever their spelling; padding ids never exist.
  for row in mask_layout.unpack(buf[:len(text)], v.size):
    assert not row[sorted(v.control_ids - set(v.eos_ids))].any()
  assert s.accept(text).complete


def _byte_vocab():
  return ic.Vocabulary.from_tokens([bytes([b]) for b in range(256)] + [b"<eos>"], eos_ids=[256])


def _legal_bytes(session) -> set[int]:
  buf = np.zeros((1, session.vocab.mask_words), np.int32)
  session.lookahead([], out=buf)
  return set(np.flatnonzero(mask_layout.unpack(buf, session.vocab.size)[0]).tolist())


def test_json_object_root_and_whitespace_runs_of_at_most_32():
  vocab = _byte_vocab()
  c = ic.ConstraintCompiler(vocab)
  s = c.compile(ic.OutputConstraint.json_object()).new_session()
  assert _legal_bytes(s) == {ord("{")}  # a root object, never a scalar
  r = s.accept(list(b"{" + b" " * 31))
  assert r.accepted == 32 and ord(" ") in _legal_bytes(s)
  s.accept([ord(" ")])  # the 32nd whitespace byte of the run
  legal = _legal_bytes(s)
  assert ord(" ") not in legal and ord("\n") not in legal and {ord('"'), ord("}")} <= legal
  s.accept(list(b'"k":1}'))
  assert s.complete and _legal_bytes(s) == {256}


def test_schema_errors_and_lenient_drops():
  c = ic.ConstraintCompiler(_byte_vocab())
  schema = '{"type": "object", "properties": {"a": {"type": "string", "format": "email"}}}'
  with pytest.raises(ic.UnsupportedSchemaError) as e:  # our xgrammar path enforces no format
    c.compile(ic.OutputConstraint.json_schema(schema), backend="xgrammar")
  assert e.value.location == "/properties/a/format"
  lenient = c.compile(ic.OutputConstraint.json_schema(schema, lenient=True), backend="xgrammar")
  assert lenient.dropped == (("/properties/a/format", "format"),)
  with pytest.raises(ic.SchemaError):
    c.compile(ic.OutputConstraint.json_schema("{not json"))
  with pytest.raises(ic.GrammarSyntaxError):
    c.compile(ic.OutputConstraint.grammar('root ::= "a" | \n'))
  with pytest.raises(ic.RegexError):
    c.compile(ic.OutputConstraint.regex("(?=a)b"))
  with pytest.raises(ic.ConstraintError):  # no output is possible with this vocabulary
    ic.ConstraintCompiler(toy_vocab()).compile(ic.OutputConstraint.choice(["zz"]))


def test_forced_tokens_inside_a_utf8_sequence():
  # After the lead byte of "é" the continuation byte is forced; the library cannot return a
  # partial UTF-8 jump-forward string, so the single-legal-token walk answers.
  compiled = ic.ConstraintCompiler(_byte_vocab()).compile(ic.OutputConstraint.choice(["é!"]))
  s = compiled.new_session()
  assert s.forced_tokens(4) == [0xC3, 0xA9, ord("!")]
  s.accept([0xC3])
  assert s.forced_tokens(4) == [0xA9, ord("!")]
  assert s.forced_tokens(1) == [0xA9]
