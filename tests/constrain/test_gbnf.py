"""GBNF checker: errors carry line:column; real grammars (llama.cpp's) pass and compile."""

from __future__ import annotations

from pathlib import Path

import pytest

from infernix_jax import constrain as ic
from infernix_jax.constrain import _gbnf
from infernix_jax.constrain.errors import GrammarSyntaxError

GBNF_DIR = Path(__file__).resolve().parents[2] / "../shared/data/gbnf"


@pytest.mark.parametrize("text,loc,words", [
    ('root ::= "a"\nfoo ::= bar', "2:9", 'Rule "bar" is not defined'),
    ('root ::= "a', "1:12", "string literal"),
    ('rot ::= "a"', "1:1", "entry rule named root"),
    ("", "1:1", "root"),
    ('root ::= "\\q"', "1:11", "escape"),
    ("root ::= [a-", "1:13", "character class"),
    ('root ::= "a"\nroot ::= "b"', "2:1", "multiple"),
    ('root ::= x\nx ::= Regex("a+")', "2:7", "Regex(...)"),
    ('root ::= TagDispatch(("a", x))\nx ::= "b"', "1:10", "TagDispatch"),
    ('root ::= "a"\x00', "1:13", "NUL"),
    ("root ::= \"\ud800\"", "1:11", "surrogate"),
])
def test_errors_carry_line_column(text, loc, words):
  with pytest.raises(GrammarSyntaxError) as e:
    _gbnf.check_gbnf(text)
  assert e.value.location == loc and words in str(e.value), str(e.value)


def test_forbidden_names_inside_strings_and_comments_are_fine():
  text = 'root ::= "Regex(" x # TagDispatch(\nx ::= [R(] "Substring("\n'
  assert _gbnf.check_gbnf(text) == text


def test_not_a_string():
  with pytest.raises(GrammarSyntaxError, match="must be a string"):
    _gbnf.check_gbnf(b'root ::= "a"')


# llama.cpp's json*.gbnf write an empty alternative as nothing (`ws ::= | " "`), which
# xgrammar's GBNF dialect rejects: the checker must say where.
DIALECT_ERRORS = {"json": "25:8", "json_arr": "34:8"}


@pytest.mark.parametrize("name", ["arithmetic", "c", "english", "json", "json_arr", "list"])
def test_llama_cpp_grammars_check_and_compile(name):
  path = GBNF_DIR / f"{name}.gbnf"
  if not path.exists():
    pytest.skip("shared data (gbnf) not present")
  text = path.read_text(encoding="utf-8")
  if name in DIALECT_ERRORS:
    with pytest.raises(GrammarSyntaxError) as e:
      _gbnf.check_gbnf(text)
    assert e.value.location == DIALECT_ERRORS[name]
    return
  assert _gbnf.check_gbnf(text) == text
  vocab = ic.Vocabulary.from_tokens([bytes([i]) for i in range(256)] + [b"<eos>"], eos_ids=[256])
  ic.ConstraintCompiler(vocab).compile(ic.OutputConstraint.grammar(text))


def test_compiler_reports_grammar_errors_as_constraint_errors():
  vocab = ic.Vocabulary.from_tokens([b"a", b"<eos>"], eos_ids=[1])
  with pytest.raises(ic.ConstraintError) as e:
    ic.ConstraintCompiler(vocab).compile(ic.OutputConstraint.grammar('root ::= "a" b'))
  assert e.value.location == "1:14"
