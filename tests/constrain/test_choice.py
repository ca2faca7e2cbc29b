"""Choice constraints: validation, canonical set, and the compiled language vs brute force."""

from __future__ import annotations

import itertools

import pytest

from infernix_jax import constrain as ic
from infernix_jax.constrain import _choice
from infernix_jax.constrain.errors import ChoiceError

EOS = 256


@pytest.fixture(scope="module")
def byte_compiler():
  vocab = ic.Vocabulary.from_tokens([bytes([i]) for i in range(256)] + [b"<eos>"],
                                    eos_ids=[EOS], name="bytes")
  return ic.ConstraintCompiler(vocab)


def test_canonical_is_deduplicated_and_order_free():
  a = _choice.canonical_choices(["b", "a", "b", "", "é"])
  assert a == ("", "a", "b", "é")
  assert _choice.canonical_choices(("é", "", "a", "b")) == a


@pytest.mark.parametrize("values,loc,words", [
    ([], None, "must not be empty"),
    ("abc", None, "list of strings"),
    (None, None, "list of strings"),
    ({"a": 1}, None, "list of strings"),
    (["a", 3], "1", "must be a string"),
    (["a", b"b"], "1", "must be a string"),
    (["ok", "x\ud800"], "1", "surrogate"),
])
def test_invalid_choices(values, loc, words):
  with pytest.raises(ChoiceError) as e:
    _choice.canonical_choices(values)
  assert e.value.location == loc and words in str(e.value)


CHOICES = ["", "a", "ab", "a b", 'q"\\', "é\n", "😀", "\x00\x7f"]


def test_language_is_exactly_the_set(byte_compiler):
  """All byte strings built from the choices' characters (length <= 3) vs membership."""
  compiled = byte_compiler.compile(ic.OutputConstraint.choice(CHOICES))
  chars = sorted({c for v in CHOICES for c in v})
  candidates = {"".join(t) for n in range(4) for t in itertools.product(chars, repeat=n)}
  candidates |= set(CHOICES) | {"ab ", "A", "😀😀"}
  for s in candidates:
    data = list(s.encode("utf-8")) + [EOS]
    r = compiled.new_session().preview(data)
    assert (r.accepted == len(data) and r.terminated) == (s in CHOICES), repr(s)


def test_prefix_choice_allows_end_and_continuation(byte_compiler):
  session = byte_compiler.compile(ic.OutputConstraint.choice(["ab", "a"])).new_session()
  session.accept([ord("a")])
  assert session.complete and session.can_continue


def test_gbnf_escapes_everything():
  g = _choice.choice_gbnf(["a\"b", "\\", "\n", "é", "😀", ""])
  assert g.startswith("root ::= ") and "\n" not in g[:-1]
  assert '"\\U0001F600"' in g and '"\\u00E9"' in g and '""' in g


def test_escape_followed_by_hex_digit_stays_one_character(byte_compiler):
  """An escaped character followed by a hex digit stays two characters ("é" then "a")."""
  compiled = byte_compiler.compile(ic.OutputConstraint.choice(["éa", "\n1"]))
  for s, ok in (("éa", True), ("\n1", True), ("\u0e9a", False), ("é", False)):
    data = list(s.encode("utf-8")) + [EOS]
    r = compiled.new_session().preview(data)
    assert (r.accepted == len(data) and r.terminated) == ok, s
