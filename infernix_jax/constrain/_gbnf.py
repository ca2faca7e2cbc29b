"""GBNF checker: xgrammar's parser with its errors mapped to line:column, plus our own rules."""

from __future__ import annotations

import re

from .errors import GrammarSyntaxError

# xgrammar constructors that the public GBNF entry does not expose (reference 000: TagDispatch,
# TokenTagDispatch, Regex and Substring change the language outside the rule bodies' syntax).
_FORBIDDEN_CALLS = ("TagDispatch", "TokenTagDispatch", "Regex", "Substring")
_XGR_LOCATION = re.compile(r"at line (\d+), column (\d+):\s*(.*)", re.S)


def _loc(text: str, pos: int) -> str:
  line = text.count("\n", 0, pos) + 1
  return f"{line}:{pos - (text.rfind(chr(10), 0, pos) + 1) + 1}"


def _scan_calls(text: str) -> None:
  """Rejects the forbidden constructor calls, skipping strings, classes and comments."""
  i, n = 0, len(text)
  while i < n:
    c = text[i]
    if c == "#":
      j = text.find("\n", i)
      i = n if j < 0 else j
    elif c in "\"[":
      close = '"' if c == '"' else "]"
      i += 1
      while i < n and text[i] != close and text[i] != "\n":
        i += 2 if text[i] == "\\" else 1
      i += 1
    elif c.isalpha() or c == "_":
      j = i
      while j < n and (text[j].isalnum() or text[j] in "_-."):
        j += 1
      word = text[i:j]
      k = j
      while k < n and text[k] in " \t":
        k += 1
      if word in _FORBIDDEN_CALLS and k < n and text[k] == "(":
        raise GrammarSyntaxError(
            f"{word}(...) is not part of the supported GBNF; write the language with rules, "
            "literals, classes, repetition and alternatives", _loc(text, i))
      i = j
    else:
      i += 1


def check_gbnf(text: str) -> str:
  """Validates GBNF text whose entry rule is ``root`` and returns it unchanged.

  Args:
    text: the grammar source.

  Returns:
    The text to compile (the source itself: it is its own canonical form).

  Raises:
    GrammarSyntaxError: with ``line:column`` for syntax errors, bad escapes, unterminated
      strings or classes, undefined rules, a missing ``root`` rule, or unsupported
      constructors.
  """
  if not isinstance(text, str):
    raise GrammarSyntaxError(f"a grammar must be a string, got {type(text).__name__}")
  try:
    text.encode("utf-8")
  except UnicodeEncodeError as e:
    raise GrammarSyntaxError("the grammar holds a lone surrogate (not valid UTF-8 text)",
                             _loc(text, e.start)) from None
  if "\x00" in text:
    raise GrammarSyntaxError("the grammar holds a NUL character; write it as \\x00 inside a "
                             "literal", _loc(text, text.index("\x00")))
  _scan_calls(text)
  from . import _xgr  # deferred: the checker's pure-Python part needs no xgrammar

  try:
    _xgr.xgr.Grammar.from_ebnf(text, root_rule_name="root")
  except Exception as e:  # xgrammar raises RuntimeError/ValueError subclasses with its message
    raw = str(e)
    m = _XGR_LOCATION.search(raw)
    if m is None:
      raise GrammarSyntaxError(f"invalid grammar: {raw.strip().splitlines()[-1] if raw.strip() else type(e).__name__}") from None
    line, col, msg = int(m.group(1)), int(m.group(2)), m.group(3).strip()
    if "root rule" in msg and "not found" in msg:
      msg += "; the grammar needs an entry rule named root (root ::= ...)"
    raise GrammarSyntaxError(msg, f"{line}:{col}") from None
  return text
