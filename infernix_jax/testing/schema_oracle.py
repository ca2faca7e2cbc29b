"""Does a compiled JSON grammar accept a JSON value in some serialization? (test and study oracle)

The generation language fixes property order and spells numbers and strings in a subset of
all JSON spellings, so "value v is accepted" means: some serialization of v (any key order,
the usual number and string spellings) is a complete sentence of the grammar. We search
serializations depth-first on forked matchers, pruning as soon as the grammar rejects a
prefix. Used by the JSON-Schema-Test-Suite test and the coverage script.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Callable


class SearchBudgetExceeded(Exception):
  """The serialization search took more steps than allowed (result unknown)."""


def _number_forms(v: Any, integer_floats: bool = True) -> list[str]:
  forms = []
  if isinstance(v, int):
    return [str(v)]
  if isinstance(v, float):
    if integer_floats and v.is_integer() and abs(v) < 1e18:
      forms.append(str(int(v)))
    forms.append(json.dumps(v))
    return forms
  d = v if isinstance(v, Decimal) else Decimal(str(v))
  if integer_floats and d == d.to_integral_value() and abs(d) < Decimal(10) ** 30:
    forms.append(str(int(d)))
  text = str(d)
  if text not in forms:
    forms.append(text)
  plain = format(d, "f")
  if plain not in forms and len(plain) < 64:
    forms.append(plain)
  return forms


def _string_forms(s: str) -> list[str]:
  forms = [json.dumps(s, ensure_ascii=False)]
  ascii_form = json.dumps(s, ensure_ascii=True)
  if ascii_form != forms[0]:
    forms.append(ascii_form)
  return forms


class Walker:
  """Feeds serializations of a value into a matcher (``fork``/``accept_string`` API).

  Args:
    eos_id: the EOS token id that terminates a complete sentence.
    budget: maximum number of prefix feeds before giving up.
    integer_floats: also spell an integral float (``1.0``) as an integer (``1``); right from
      draft 6 on, where 1.0 is an integer, wrong for draft 4, where it is not.
  """

  def __init__(self, eos_id: int, budget: int = 20000, integer_floats: bool = True):
    self.eos_id = eos_id
    self.budget = budget
    self.integer_floats = integer_floats

  def accepts(self, matcher: Any, value: Any) -> bool:
    """True if some serialization of ``value`` followed by EOS terminates the matcher.

    On success ``self.text`` holds the accepted serialization.
    """
    self.steps = 0
    self._pieces: list[str] = []
    try:
      ok = self._value(matcher, value, self._end)
    except RecursionError:  # the search nests per JSON token: very long values give up
      raise SearchBudgetExceeded() from None
    self.text = "".join(self._pieces) if ok else None
    return ok

  def _end(self, m: Any) -> bool:
    m = m.fork()
    return bool(m.accept_token(self.eos_id)) and m.is_terminated()

  def _lit(self, m: Any, text: str, k: Callable[[Any], bool]) -> bool:
    self.steps += 1
    if self.steps > self.budget:
      raise SearchBudgetExceeded()
    m2 = m.fork()
    if text and not m2.accept_string(text.encode("utf-8")):
      return False
    self._pieces.append(text)
    if k(m2):
      return True
    self._pieces.pop()
    return False

  def _value(self, m: Any, v: Any, k: Callable[[Any], bool]) -> bool:
    if isinstance(v, dict):
      return self._lit(m, "{", lambda m2: self._members(m2, list(v.items()), True, k))
    if isinstance(v, list):
      return self._lit(m, "[", lambda m2: self._items(m2, v, 0, k))
    if v is None or isinstance(v, bool):
      return self._lit(m, json.dumps(v), k)
    forms = _string_forms(v) if isinstance(v, str) else _number_forms(v, self.integer_floats)
    return any(self._lit(m, f, k) for f in forms)

  def _items(self, m: Any, v: list, i: int, k) -> bool:
    if i == len(v):
      return self._lit(m, "]", k)
    sep = "" if i == 0 else ","
    return self._lit(m, sep, lambda m2: self._value(m2, v[i], lambda m3: self._items(m3, v, i + 1, k)))

  def _members(self, m: Any, rest: list, first: bool, k) -> bool:
    if not rest:
      return self._lit(m, "}", k)
    for i, (key, val) in enumerate(rest):
      others = rest[:i] + rest[i + 1:]
      for key_form in _string_forms(key):
        head = ("" if first else ",") + key_form + ":"
        cont = lambda m2, val=val, others=others: self._value(
            m2, val, lambda m3: self._members(m3, others, False, k))
        if self._lit(m, head, cont):
          return True
    return False
