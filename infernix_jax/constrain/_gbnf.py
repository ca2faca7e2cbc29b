"""GBNF checker: xgrammar's parser with its errors mapped to line:column, plus our own rules."""

from __future__ import annotations

import re

from .errors import GrammarSyntaxError

# xgrammar constructors that the public GBNF entry does not expose (reference 000: TagDispatch,
# TokenTagDispatch, Regex and Substring change the language outside the rule bodies' syntax).
_FORBIDDEN_CALLS = ("TagDispatch", "TokenTagDispatch", "Regex", "Substring")
_XGR_LOCATION = re.compile(r"at line (\d+), column (\d+):\s*(.*)", re.S)
_HEX = "0123456789abcdefABCDEF"


def _loc(text: str, pos: int) -> str:
  line = text.count("\n", 0, pos) + 1
  return f"{line}:{pos - (text.rfind(chr(10), 0, pos) + 1) + 1}"


def _escape_code_point(text: str, i: int) -> int | None:
  """The code point of the numeric escape at ``text[i]`` (a backslash), as xgrammar reads it:
  ``\\x`` + any number of hex digits, ``\\u`` + 4, ``\\U`` + 8; None for other escapes."""
  kind = text[i + 1:i + 2]
  if kind == "x":
    j = i + 2
    while j < len(text) and text[j] in _HEX:
      j += 1
    digits = text[i + 2:j]
  elif kind in ("u", "U"):
    digits = text[i + 2:i + (6 if kind == "u" else 10)]
    if len(digits) != (4 if kind == "u" else 8) or any(c not in _HEX for c in digits):
      return None
  else:
    return None
  return int(digits, 16) if digits else None


def _scan(text: str) -> None:
  """Rejects the forbidden constructor calls and surrogate escapes, skipping comments.

  A surrogate code point (U+D800..U+DFFF) is not a Unicode scalar value: its UTF-8 spelling is
  invalid, and an escaped pair (``\\uD83D\\uDE00``) is two such code points, not one
  character. A class range merely spanning the block (``[\\u0000-\\uFFFF]``) is allowed: the
  sessions never emit a surrogate (strict UTF-8 filter).
  """
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
        if text[i] == "\\":
          cp = _escape_code_point(text, i)
          if cp is not None and 0xD800 <= cp <= 0xDFFF:
            raise GrammarSyntaxError(
                f"this escape denotes U+{cp:04X}, a surrogate code point, not a character (its "
                "UTF-8 form is invalid); write the character itself or escape its code point "
                "(\\U0001F600, not \\uD83D\\uDE00)", _loc(text, i))
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
    GrammarSyntaxError: with ``line:column`` for syntax errors, bad escapes (surrogate code
      points included), unterminated strings or classes, undefined rules, a missing ``root``
      rule, or unsupported constructors.
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
  _scan(text)
  from . import _xgr  # deferred: the checker's pure-Python part needs no xgrammar

  try:
    _xgr.ebnf_of_ebnf(text)
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
