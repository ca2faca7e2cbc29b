"""Choice constraints: validation, order-free canonical literal set, exact-bytes GBNF."""

from __future__ import annotations

from collections.abc import Iterable

from .errors import ChoiceError


def canonical_choices(values: Iterable[str]) -> tuple[str, ...]:
  """Validates a choice list and returns its canonical (deduplicated, sorted) literal set.

  Order carries no weight and duplicates are removed, so the result is also the cache
  identity. The empty string is a legal choice (it allows ending immediately).

  Args:
    values: a non-empty list (or tuple) of str.

  Returns:
    The distinct literals sorted by their UTF-8 bytes.

  Raises:
    ChoiceError: not a list of strings, empty, or a string that is not valid Unicode text
      (lone surrogates); location is the offending index.
  """
  if isinstance(values, (list, tuple)) and values:  # fast path: one encode per value
    try:
      raw = sorted({v.encode("utf-8") for v in values})
    except (AttributeError, TypeError, UnicodeEncodeError):
      raw = None  # the checks below name the offending index
    if raw is not None and all(isinstance(v, str) for v in values):
      return tuple(b.decode("utf-8") for b in raw)
  if isinstance(values, (str, bytes, dict)) or not isinstance(values, (list, tuple)):
    raise ChoiceError(f"choices must be a list of strings, got {type(values).__name__}")
  if not values:
    raise ChoiceError("choices must not be empty: give at least one string (\"\" allows "
                      "empty output)")
  seen = set()
  for i, v in enumerate(values):
    if not isinstance(v, str):
      raise ChoiceError(f"choice must be a string, got {type(v).__name__}", str(i))
    try:
      v.encode("utf-8")
    except UnicodeEncodeError:
      raise ChoiceError("choice holds a lone surrogate, which is not valid UTF-8 text",
                        str(i)) from None
    seen.add(v)
  return tuple(sorted(seen, key=lambda s: s.encode("utf-8")))


def _gbnf_literal(text: str) -> str:
  """A GBNF string literal for ``text`` with everything outside printable ASCII escaped."""
  out = []
  for ch in text:
    cp = ord(ch)
    if ch in ('"', "\\"):
      out.append("\\" + ch)
    elif 0x20 <= cp < 0x7F:
      out.append(ch)
    elif cp <= 0xFFFF:
      # Never \xNN: xgrammar's \x reads every following hex digit, so "\xE9" + "a"
      # would become one code point. \u and \U read a fixed number of digits.
      out.append("\\u%04X" % cp)
    else:
      out.append("\\U%08X" % cp)
  return f'"{"".join(out)}"'


def choice_gbnf(values: Iterable[str]) -> str:
  """GBNF (entry rule ``root``) whose language is exactly the canonical choice set.

  Args:
    values: the choice list (validated with :func:`canonical_choices`).

  Returns:
    ``root ::= "a" | "b" | ...`` with every literal escaped, so case, whitespace and Unicode
    are kept byte for byte; a short literal that prefixes a longer one allows both ending
    and continuing.
  """
  return "root ::= " + " | ".join(_gbnf_literal(v) for v in canonical_choices(values)) + "\n"
