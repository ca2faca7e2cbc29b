"""Regex checker: errors with line:column, and the emitted pattern's language vs Python `re`."""

from __future__ import annotations

import itertools
import json
import random
import re

import pytest

from infernix_jax import constrain as ic
from infernix_jax.constrain import _regex, _xgr
from infernix_jax.constrain.schema import check_json_schema
from infernix_jax.constrain.schema.strings import schema_pattern
from infernix_jax.constrain.errors import RegexError

EOS = 256


@pytest.fixture(scope="module")
def byte_compiler():
  vocab = ic.Vocabulary.from_tokens([bytes([i]) for i in range(256)] + [b"<eos>"],
                                    eos_ids=[EOS], name="bytes")
  return ic.ConstraintCompiler(vocab)


def whole_match(compiler, pattern: str, text: str) -> bool:
  """The real compiled constraint accepts ``text`` then EOS and terminates."""
  session = compiler.compile(ic.OutputConstraint.regex(pattern)).new_session()
  data = list(text.encode("utf-8")) + [EOS]
  r = session.preview(data)
  return r.accepted == len(data) and r.terminated


@pytest.mark.parametrize("pattern,loc,words", [
    (r"\b", "1:1", "word boundaries"),
    (r"ab\B", "1:3", "word boundaries"),
    (r"(a)\1", "1:4", "back-references"),
    (r"(?<n>a)\k<n>", "1:8", "back-references"),
    ("(?=a)a", "1:2", "lookahead"),
    ("(?<!a)b", "1:2", "lookbehind"),
    ("(?i)a", "1:2", "inline flags"),
    (r"\p{L}", "1:1", "property classes"),
    (r"x\P{Lu}", "1:2", "property classes"),
    ("a^b", "1:2", "'^'"),
    ("a$b", "1:2", "'$'"),
    ("(^a)", "1:2", "'^'"),
    ("(a$)", "1:3", "'$'"),
    ("ab\n(cd", "2:1", "unterminated group"),
    ("a)", "1:2", "unmatched ')'"),
    ("*a", "1:1", "nothing to repeat"),
    ("a**", "1:3", "quantifier"),
    ("a{3,2}", "1:2", "out of order"),
    ("[z-a]", "1:4", "out of order"),
    ("[abc", "1:1", "unterminated character class"),
    (r"\q", "1:1", "unknown escape"),
    (r"\ud83d", "1:1", "surrogate"),
    ("\\", "1:1", "lone backslash"),
    (r"\u{110000}", "1:1", "U+10FFFF"),
    ("a{2147483648}", "1:2", "repetition counts"),
    ("x" + "(" * 300 + "a" + ")" * 300, "1:2", "groups"),
])
def test_rejections_carry_line_column(pattern, loc, words):
  with pytest.raises(RegexError) as e:
    _regex.check_regex(pattern)
  assert e.value.location == loc
  assert words in str(e.value)
  assert isinstance(e.value, ic.ConstraintError)


def test_empty_class_everywhere_matches_nothing():
  with pytest.raises(RegexError, match="matches no string"):
    _regex.check_regex("[]")
  assert _regex.check_regex("a[]|b") == "b"  # the dead branch is dropped, not relaxed


# Patterns whose ECMAScript meaning equals Python's on the test alphabet below.
PATTERNS = ["", "a", "ab|c", "(a|b)*c?", "a{2,3}", "a{2,}b", "[^ab]", "[a-c]+?", r"\d\w",
            r"(?:ab)+|^c$", "x?(y|z){0,2}", r"[\d-]", r"\.\*", "a|", "(a|)(b|)", r"[\]\-]",
            r"\x61\u0062", r"\u{63}", "(?<g>a)b", "^a|b$", "a{0}", "}"]
ALPHABET = ["a", "b", "c", "1", "-", ".", "*", "]", "}", "{", ",", "x", "y", "z", "_"]


def strings(max_len: int):
  for n in range(max_len + 1):
    for t in itertools.product(ALPHABET, repeat=n):
      yield "".join(t)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_language_matches_python_re(byte_compiler, pattern):
  """Every string over a small alphabet (length <= 2, plus samples) agrees with `re`."""
  oracle = re.compile(pattern.replace("(?<g>", "(?P<g>").replace(r"\u{63}", "c"))
  samples = list(strings(2)) + ["aaa", "aab", "abab", "abc", "aaaab", "xyz", "zzz", "abababc"]
  for s in samples:
    assert whole_match(byte_compiler, pattern, s) == bool(oracle.fullmatch(s)), (pattern, s)


@pytest.mark.parametrize("pattern,yes,no", [
    (".", ["a", "é", "😀", "\t", "\x00"], ["\n", "\r", "\u2028", "\u2029", "", "ab"]),
    (r"\s", [" ", "\t", "\x0b", "\xa0", "\u2028", "\u3000", "\ufeff", "\u205f"],
     ["a", "\x1c", "\x85", "\u200b"]),
    (r"\S", ["a", "\x1c", "\x85"], [" ", "\ufeff"]),
    (r"\d", ["0", "9"], ["٣", "a"]),
    (r"\w", ["a", "Z", "_", "0"], ["é", "-"]),
    (r"\W", ["é", "-", " "], ["a", "_"]),
    (r"[^\s]", ["a"], ["\xa0", " "]),
    (r"\cJ\t\n\v\f\r\0", ["\n\t\n\x0b\x0c\r\x00"], ["cJ"]),
    (r"[\b]", ["\x08"], ["b"]),
    ("é+😀", ["éé😀"], ["😀"]),
    ("[^a]", ["😀", "\n"], ["a"]),
    ("[^]", ["a", "\n", "😀"], ["", "ab"]),
    ("a{,1}", ["a{,1}"], ["", "a"]),  # Annex B: not a quantifier, literal text
])
def test_ecmascript_classes(byte_compiler, pattern, yes, no):
  for s in yes:
    assert whole_match(byte_compiler, pattern, s), (pattern, s)
  for s in no:
    assert not whole_match(byte_compiler, pattern, s), (pattern, s)


def test_schema_pattern_is_search_and_json_safe():
  xgr_pattern, py = schema_pattern("ab")
  rx = re.compile(py, re.S)
  assert rx.fullmatch("xxabyy") and rx.fullmatch("ab") and not rx.fullmatch("a b")
  assert not rx.fullmatch('a"ab')  # characters JSON must escape are never generated raw
  _, py = schema_pattern("^ab$|c")
  rx = re.compile(py, re.S)
  assert rx.fullmatch("ab") and not rx.fullmatch("abx") and rx.fullmatch("xcx")
  assert schema_pattern('^"$') is None  # only a raw quote would match
  assert "\\u{22}" not in xgr_pattern and "\\u{5C}" not in xgr_pattern


# xgrammar's JSON-string regex path (schema "pattern") is not the whole-content path: it
# accepted "xxx" for x(x|)|x and "x" for (x[bx]+)? until we emitted {0,1} and a trailing ().
# Differential check of that path against Python `re` on random patterns.
def _json_pattern_accepts(vocab, schema_text: str, s: str) -> bool:
  m = _xgr.new_matcher(_xgr.compile_json_schema(vocab, schema_text, max_whitespace=32))
  return bool(m.accept_string(json.dumps(s).encode())) and m.accept_token(EOS) and m.is_terminated()


def _random_pattern(rng: random.Random, depth: int = 0) -> str:
  atoms = ["x", "b", ":", "[bx]", "[^x]", "[b:]", "."]
  r = rng.random()
  if depth > 2 or r < 0.35:
    return rng.choice(atoms)
  if r < 0.6:
    return _random_pattern(rng, depth + 1) + _random_pattern(rng, depth + 1)
  if r < 0.75:
    return f"({_random_pattern(rng, depth + 1)}|{_random_pattern(rng, depth + 1)})"
  quant = rng.choice(["?", "*", "+", "{0,2}", "{1,2}", "{2}"])
  return f"({_random_pattern(rng, depth + 1)}){quant}"


JSON_PATH_REGRESSIONS = ["^x(x|)|x$", "^(x{1,2}|x)$", "^(x[bx]+)?$", "^b(x{1,2}|x)$",
                         "^x{0,2}|x$", r"^[^:\s]+:[^:\s]+(:[^\s]+)?$"]


def test_json_string_pattern_path_matches_python_re():
  vocab = ic.Vocabulary.from_tokens([bytes([i]) for i in range(256)] + [b"<eos>"],
                                    eos_ids=[EOS])
  rng = random.Random(0)
  patterns = JSON_PATH_REGRESSIONS + ["^" + _random_pattern(rng) + "$" for _ in range(40)]
  texts = ["".join(t) for n in range(5) for t in itertools.product("xb:", repeat=n)]
  texts += ["chrome:latest:", "chrome:latest", "a:b:c"]
  for pattern in patterns:
    schema = check_json_schema(json.dumps({"type": "string", "pattern": pattern}))
    oracle = re.compile(pattern.replace(".", "[^\\n\\r\\u2028\\u2029]"))
    for s in texts:
      got = _json_pattern_accepts(vocab, schema.schema_json, s)
      assert got == bool(oracle.search(s)), (pattern, s)
