"""ECMAScript-style regex checker: parses the user's pattern and re-emits an exact xgrammar regex.

xgrammar's own regex converter differs from ECMAScript in ways that would silently change the
language (``.`` matches newlines, ``\\s`` misses Unicode spaces, unknown escapes become
literals, ``^``/``$`` inside the pattern are ignored). So we parse the pattern ourselves into a
small AST whose character classes are explicit code-point ranges, reject what we do not
support with a line:column location, and emit a regex that uses only the constructs xgrammar
handles exactly: literals, ``\\u{..}`` escapes, positive classes of ranges, groups,
alternation and ``* + ? {m} {m,} {m,n}``.
"""

from __future__ import annotations

import dataclasses
from typing import Union

from .errors import RegexError

MAX_CODE_POINT = 0x10FFFF
MAX_GROUPS = 200  # nesting depth bound for our recursive parser and xgrammar's
MAX_REPEAT = 2**31 - 1  # xgrammar keeps counted repetitions lazy up to int32

# A class is a tuple of disjoint, sorted, inclusive (lo, hi) code-point ranges.
Ranges = tuple[tuple[int, int], ...]

_SCALARS: Ranges = ((0, 0xD7FF), (0xE000, MAX_CODE_POINT))
_DIGIT: Ranges = ((0x30, 0x39),)
_WORD: Ranges = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
# ECMAScript WhiteSpace + LineTerminator (ECMA-262 22.2.2.9: \s).
_SPACE: Ranges = ((0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680),
                  (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F),
                  (0x3000, 0x3000), (0xFEFF, 0xFEFF))
_LINE_TERMINATORS: Ranges = ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))
# Characters a JSON string may hold unescaped: xgrammar's pattern strings carry no escapes.
_JSON_RAW_EXCLUDED: Ranges = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))

_SYNTAX_CHARS = set("^$\\.*+?()[]{}|/")
_CONTROL_ESCAPES = {"t": 0x09, "n": 0x0A, "v": 0x0B, "f": 0x0C, "r": 0x0D}


def normalize(ranges) -> Ranges:
  """Sorts and merges ranges; drops surrogates (output holds Unicode scalar values only)."""
  out: list[list[int]] = []
  for lo, hi in sorted(ranges):
    if out and lo <= out[-1][1] + 1:
      out[-1][1] = max(out[-1][1], hi)
    else:
      out.append([lo, hi])
  return intersect(tuple((a, b) for a, b in out), _SCALARS, _normalized=True)


def intersect(a: Ranges, b: Ranges, _normalized: bool = False) -> Ranges:
  """Intersection of two sorted disjoint range tuples."""
  out, i, j = [], 0, 0
  while i < len(a) and j < len(b):
    lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
    if lo <= hi:
      out.append((lo, hi))
    if a[i][1] < b[j][1]:
      i += 1
    else:
      j += 1
  return tuple(out)


def complement(a: Ranges) -> Ranges:
  """All Unicode scalar values not in ``a``."""
  out, nxt = [], 0
  for lo, hi in a:
    if lo > nxt:
      out.append((nxt, lo - 1))
    nxt = hi + 1
  if nxt <= MAX_CODE_POINT:
    out.append((nxt, MAX_CODE_POINT))
  return intersect(tuple(out), _SCALARS)


DOT: Ranges = complement(_LINE_TERMINATORS)
ANY: Ranges = _SCALARS
JSON_SAFE: Ranges = complement(_JSON_RAW_EXCLUDED)


@dataclasses.dataclass(frozen=True)
class Cls:
  """One character from a set of ranges (a literal is a one-point set)."""
  ranges: Ranges


@dataclasses.dataclass(frozen=True)
class Seq:
  items: tuple["Node", ...]


@dataclasses.dataclass(frozen=True)
class Alt:
  options: tuple["Node", ...]


@dataclasses.dataclass(frozen=True)
class Rep:
  node: "Node"
  lo: int
  hi: int | None  # None = unbounded


Node = Union[Cls, Seq, Alt, Rep]


@dataclasses.dataclass(frozen=True)
class Branch:
  """A top-level alternative with its end anchors."""
  node: Node
  anchored_start: bool
  anchored_end: bool


class _Parser:
  """Recursive-descent parser for the ECMAScript pattern subset we support."""

  def __init__(self, text: str):
    self.text = text
    self.pos = 0

  # Locations ---------------------------------------------------------------------------------
  def loc(self, pos: int | None = None) -> str:
    pos = self.pos if pos is None else pos
    line = self.text.count("\n", 0, pos) + 1
    col = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
    return f"{line}:{col}"

  def fail(self, message: str, pos: int | None = None):
    raise RegexError(message, self.loc(pos))

  def peek(self, k: int = 0) -> str:
    p = self.pos + k
    return self.text[p] if p < len(self.text) else ""

  # Grammar -----------------------------------------------------------------------------------
  def parse_top(self) -> list[Branch]:
    branches = []
    while True:
      start = self.pos
      anchored_start = False
      if self.peek() == "^":
        anchored_start = True
        self.pos += 1
      node, anchored_end = self.parse_alternative(top=True)
      del start
      branches.append(Branch(node, anchored_start, anchored_end))
      if self.peek() == "|":
        self.pos += 1
        continue
      if self.pos < len(self.text):
        self.fail(f"unmatched {self.peek()!r}; escape it as '\\{self.peek()}' for a literal")
      return branches

  def parse_disjunction(self) -> Node:
    options = []
    while True:
      node, _ = self.parse_alternative(top=False)
      options.append(node)
      if self.peek() != "|":
        break
      self.pos += 1
    return options[0] if len(options) == 1 else Alt(tuple(options))

  def parse_alternative(self, top: bool) -> tuple[Node, bool]:
    items: list[Node] = []
    while self.pos < len(self.text) and self.peek() not in "|)":
      c = self.peek()
      if c == "$":
        if top and (self.pos + 1 == len(self.text) or self.peek(1) == "|"):
          self.pos += 1
          return Seq(tuple(items)), True
        self.fail("'$' is supported only at the end of the expression or of a top-level "
                  "alternative; escape it as '\\$' for a literal dollar")
      if c == "^":
        self.fail("'^' is supported only at the start of the expression or of a top-level "
                  "alternative; escape it as '\\^' for a literal caret")
      atom_pos = self.pos
      atom = self.parse_atom()
      items.append(self.parse_quantifier(atom, atom_pos))
    if top and self.peek() == ")":
      self.fail("unmatched ')'; escape it as '\\)' for a literal parenthesis")
    return Seq(tuple(items)), False

  def parse_quantifier(self, atom: Node, atom_pos: int) -> Node:
    c = self.peek()
    q_pos = self.pos
    if c and c in "*+?":
      self.pos += 1
      lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
    elif c == "{":
      bounds = self.try_braces()
      if bounds is None:
        return atom  # Annex B: a '{' that starts no quantifier is a literal (parsed next)
      lo, hi = bounds
    else:
      return atom
    if self.peek() == "?":
      self.pos += 1  # lazy form: same language, no captures
    if self.peek() in ("*", "+", "?") or (self.peek() == "{" and self._braces_ahead()):
      self.fail("a quantifier cannot follow another quantifier; wrap the first in a group")
    if hi is not None and hi < lo:
      self.fail(f"repetition {{{lo},{hi}}} has its bounds out of order", q_pos)
    if lo > MAX_REPEAT or (hi is not None and hi > MAX_REPEAT):
      self.fail(f"repetition counts above {MAX_REPEAT} are not supported", q_pos)
    del atom_pos
    return Rep(atom, lo, hi)

  def _braces_ahead(self) -> bool:
    save = self.pos
    try:
      return self.try_braces() is not None
    finally:
      self.pos = save

  def try_braces(self) -> tuple[int, int | None] | None:
    """Parses ``{m}``, ``{m,}``, ``{m,n}`` at pos; returns None (pos unchanged) if not one."""
    text, p = self.text, self.pos + 1
    def digits(p):
      q = p
      while q < len(text) and text[q].isascii() and text[q].isdigit():
        q += 1
      return q
    q = digits(p)
    if q == p:
      return None
    lo = int(text[p:q])
    if q < len(text) and text[q] == "}":
      self.pos = q + 1
      return lo, lo
    if q < len(text) and text[q] == ",":
      r = digits(q + 1)
      if r < len(text) and text[r] == "}":
        hi = int(text[q + 1:r]) if r > q + 1 else None
        self.pos = r + 1
        return lo, hi
    return None

  def parse_atom(self) -> Node:
    c = self.peek()
    start = self.pos
    if c == "(":
      self.pos += 1
      if self.peek() == "?":
        nxt = self.peek(1)
        if nxt == ":":
          self.pos += 2
        elif nxt in ("=", "!"):
          self.fail("lookahead assertions are not supported")
        elif nxt == "<" and self.peek(2) in ("=", "!"):
          self.fail("lookbehind assertions are not supported")
        elif nxt == "<":
          end = self.text.find(">", self.pos)
          name = self.text[self.pos + 2:end] if end >= 0 else ""
          if end < 0 or not name or not all(ch.isalnum() or ch in "_$" for ch in name):
            self.fail("invalid group name; write (?<name>...) with a letters/digits name")
          self.pos = end + 1
        else:
          self.fail("inline flags and other '(?' group forms are not supported; only "
                    "(...), (?:...) and (?<name>...) groups are")
      node = self.parse_disjunction()
      if self.peek() != ")":
        self.fail("unterminated group: missing ')'", start)
      self.pos += 1
      return node
    if c == ")":
      self.fail("unmatched ')'; escape it as '\\)' for a literal parenthesis")
    if c and c in "*+?":
      self.fail(f"nothing to repeat before {c!r}; escape it as '\\{c}' for a literal")
    if c == "{" and self._braces_ahead():
      self.fail("nothing to repeat before '{'; escape it as '\\{' for a literal")
    if c == "[":
      return self.parse_class()
    if c == ".":
      self.pos += 1
      return Cls(DOT)
    if c == "\\":
      return Cls(self.parse_escape(in_class=False))
    self.pos += 1
    return Cls(((ord(c), ord(c)),)) if not 0xD800 <= ord(c) <= 0xDFFF else self.fail(
        "lone surrogate code points are not Unicode scalar values", start)

  def parse_class(self) -> Node:
    start = self.pos
    self.pos += 1
    negate = self.peek() == "^"
    if negate:
      self.pos += 1
    ranges: list[tuple[int, int]] = []
    while True:
      if self.pos >= len(self.text):
        self.fail("unterminated character class: missing ']'", start)
      if self.peek() == "]":
        self.pos += 1
        break
      lo_pos = self.pos
      lo = self.class_atom()
      if self.peek() == "-" and self.peek(1) not in ("]", ""):
        self.pos += 1
        hi_pos = self.pos
        hi = self.class_atom()
        if len(lo) != 1 or lo[0][0] != lo[0][1] or len(hi) != 1 or hi[0][0] != hi[0][1]:
          # Annex B: a class escape next to '-' makes the '-' literal.
          ranges.extend(lo + hi + ((0x2D, 0x2D),))
          continue
        if hi[0][0] < lo[0][0]:
          self.fail("character range out of order (start is after end)", hi_pos)
        ranges.append((lo[0][0], hi[0][0]))
      else:
        ranges.extend(lo)
      del lo_pos
    rs = normalize(ranges)
    return Cls(complement(rs) if negate else rs)

  def class_atom(self) -> Ranges:
    c = self.peek()
    if c == "\\":
      return self.parse_escape(in_class=True)
    self.pos += 1
    if 0xD800 <= ord(c) <= 0xDFFF:
      self.fail("lone surrogate code points are not Unicode scalar values", self.pos - 1)
    return ((ord(c), ord(c)),)

  def parse_escape(self, in_class: bool) -> Ranges:
    start = self.pos
    self.pos += 1
    c = self.peek()
    if not c:
      self.fail("the pattern ends with a lone backslash", start)
    self.pos += 1
    one = lambda cp: ((cp, cp),)
    if c in "dDwWsS":
      base = {"d": _DIGIT, "w": _WORD, "s": _SPACE}[c.lower()]
      return base if c.islower() else complement(base)
    if c in _CONTROL_ESCAPES:
      return one(_CONTROL_ESCAPES[c])
    if c == "b":
      if in_class:
        return one(0x08)
      self.fail("word boundaries (\\b) are not supported", start)
    if c == "B":
      self.fail("word boundaries (\\B) are not supported", start)
    if c == "0" and not self.peek().isdigit():
      return one(0)
    if c.isdigit():
      self.fail("back-references (\\1...) are not supported", start)
    if c == "k" and self.peek() == "<":
      self.fail("named back-references (\\k<...>) are not supported", start)
    if c in "pP":
      self.fail(f"Unicode property classes (\\{c}{{...}}) are not supported; list the "
                "characters or ranges in a [...] class", start)
    if c == "c":
      letter = self.peek()
      if letter.isascii() and letter.isalpha():
        self.pos += 1
        return one(ord(letter) % 32)
      self.fail("\\c must be followed by an ASCII letter", start)
    if c == "x":
      return one(self.hex_digits(2, start))
    if c == "u":
      if self.peek() == "{":
        end = self.text.find("}", self.pos)
        body = self.text[self.pos + 1:end] if end > 0 else ""
        if end < 0 or not body or not all(ch in "0123456789abcdefABCDEF" for ch in body):
          self.fail("\\u{...} needs hex digits and a closing '}'", start)
        cp = int(body, 16)
        self.pos = end + 1
      else:
        cp = self.hex_digits(4, start)
      if cp > MAX_CODE_POINT:
        self.fail("code point above U+10FFFF", start)
      if 0xD800 <= cp <= 0xDFFF:
        self.fail("surrogate escapes are not supported; write the character itself", start)
      return one(cp)
    if c in _SYNTAX_CHARS or c == "-" or (c.isascii() and not c.isalnum() and c.isprintable()):
      return one(ord(c))  # escaped punctuation is the literal character
    self.fail(f"unknown escape '\\{c}'; escape only punctuation, or write the character "
              "itself", start)

  def hex_digits(self, n: int, start: int) -> int:
    body = self.text[self.pos:self.pos + n]
    if len(body) != n or not all(ch in "0123456789abcdefABCDEF" for ch in body):
      self.fail(f"escape needs exactly {n} hex digits", start)
    self.pos += n
    return int(body, 16)


def parse(pattern: str) -> list[Branch]:
  """Parses a pattern into top-level branches; raises RegexError with line:column."""
  if not isinstance(pattern, str):
    raise RegexError(f"a regex must be a string, got {type(pattern).__name__}")
  if pattern.count("(") > MAX_GROUPS:
    raise RegexError(f"more than {MAX_GROUPS} groups are not supported",
                     _Parser(pattern).loc(pattern.index("(")))
  return _Parser(pattern).parse_top()


# Simplification -----------------------------------------------------------------------------
_EPS = Seq(())


def _simplify(node: Node, alphabet: Ranges) -> Node | None:
  """Restricts classes to ``alphabet``; returns None for the empty language."""
  if isinstance(node, Cls):
    rs = intersect(node.ranges, alphabet)
    return Cls(rs) if rs else None
  if isinstance(node, Seq):
    items = []
    for item in node.items:
      s = _simplify(item, alphabet)
      if s is None:
        return None
      if isinstance(s, Seq):
        items.extend(s.items)
      else:
        items.append(s)
    return items[0] if len(items) == 1 else Seq(tuple(items))
  if isinstance(node, Alt):
    opts = [s for s in (_simplify(o, alphabet) for o in node.options) if s is not None]
    if not opts:
      return None
    return opts[0] if len(opts) == 1 else Alt(tuple(opts))
  s = _simplify(node.node, alphabet)
  if s is None:
    return _EPS if node.lo == 0 else None
  if node.hi == 0 or s == _EPS:
    return _EPS
  return Rep(s, node.lo, node.hi)


# Emission -----------------------------------------------------------------------------------
def _char(cp: int, in_class: bool) -> str:
  ch = chr(cp)
  if ch.isascii() and ch.isalnum():
    return ch
  if not in_class and ch.isascii() and ch.isprintable() and ch != " ":
    return "\\" + ch if ch in _SYNTAX_CHARS else ch
  return "\\u{%X}" % cp


def _emit(node: Node, python: bool = False) -> str:
  if isinstance(node, Cls):
    rs = node.ranges
    if len(rs) == 1 and rs[0][0] == rs[0][1]:
      return _pychar(rs[0][0]) if python else _char(rs[0][0], False)
    if python:
      return _class_body(rs, _pychar)
    # xgrammar's JSON-string regex path builds a wrong UTF-8 automaton (it admits overlong
    # encodings such as E0 80..9F) for a class whose ranges span several UTF-8 lengths, so
    # we emit one class per encoded length, joined by alternation.
    parts = [intersect(rs, bucket) for bucket in _UTF8_LENGTHS]
    parts = [_class_body(p, lambda cp: _char(cp, True)) for p in parts if p]
    return parts[0] if len(parts) == 1 else "(" + "|".join(parts) + ")"
  if isinstance(node, Seq):
    return "".join(_group(i, python) if isinstance(i, Alt) else _emit(i, python)
                   for i in node.items) if node.items else ("" if python else "()")
  if isinstance(node, Alt):
    return "|".join(_emit(o, python) for o in node.options)
  inner = _emit(node.node, python)
  if not isinstance(node.node, Cls):  # a class emits an atom ([...], a char, or (..|..))
    inner = f"({'?:' if python else ''}{inner})"
  lo, hi = node.lo, node.hi
  # Never "?": xgrammar's JSON-string regex path accepts "x" for (x[bx]+)? ; {0,1} is right.
  q = ("*" if lo == 0 else "+" if lo == 1 else "{%d,}" % lo) if hi is None else (
      ("?" if python else "{0,1}") if (lo, hi) == (0, 1) else
      "{%d}" % lo if lo == hi else "{%d,%d}" % (lo, hi))
  return inner + q


_UTF8_LENGTHS: tuple[Ranges, ...] = (((0, 0x7F),), ((0x80, 0x7FF),), ((0x800, 0xFFFF),),
                                     ((0x10000, MAX_CODE_POINT),))


def _class_body(rs: Ranges, ch) -> str:
  return "[" + "".join(ch(lo) if lo == hi else f"{ch(lo)}-{ch(hi)}" for lo, hi in rs) + "]"


def _group(node: Node, python: bool) -> str:
  return f"({'?:' if python else ''}{_emit(node, python)})"


def _pychar(cp: int) -> str:
  return "\\U%08X" % cp


def _branches_node(branches: list[Branch], search: bool, alphabet: Ranges) -> Node | None:
  any_run = Rep(Cls(alphabet), 0, None)
  options = []
  for b in branches:
    parts = [b.node]
    if search and not b.anchored_start:
      parts.insert(0, any_run)
    if search and not b.anchored_end:
      parts.append(any_run)
    options.append(Seq(tuple(parts)))
  return _simplify(Alt(tuple(options)), alphabet)


def check_regex(pattern: str) -> str:
  """Validates a whole-content regex and returns the exact pattern xgrammar gets.

  Args:
    pattern: ECMAScript-style expression; it must match the whole content. ``^``/``$`` are
      allowed only at the ends of the expression or of its top-level alternatives.

  Returns:
    An equivalent regex in the subset xgrammar handles exactly (explicit classes).

  Raises:
    RegexError: syntax errors and unsupported features, located as line:column.
  """
  node = _branches_node(parse(pattern), search=False, alphabet=ANY)
  if node is None:
    raise RegexError("the expression matches no string at all (empty class); it would leave "
                     "no legal output")
  return _emit(node)
