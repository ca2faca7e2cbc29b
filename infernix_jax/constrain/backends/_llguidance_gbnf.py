"""GBNF to llguidance Lark with one character per lexeme, so the language is exactly the GBNF's.

llguidance lexes greedily: a multi-character terminal (a string, or a rule its own converter
``gbnf_to_lark`` turns into a terminal) is matched as long as it extends, so
``root ::= word "b"`` with ``word ::= [a-z]+`` lost "ab", and ``x ::= "a"*`` before ``"a"``
made the matcher spin. Here every literal is split into single characters and every rule is
a parser rule: each lexeme is one character (``/\\x{..}/`` or a class), which can never
extend into another, and the Earley parser does the rest.

Input is GBNF already validated by our checker (`_gbnf.check_gbnf`), or a framed grammar
(`constrain.framing`), which also holds what xgrammar's grammar printer writes: ``Token(id)``
and ``ExcludeToken(ids)`` become llguidance's token-id lexemes ``<[id]>`` / ``<[^ids]>``,
``Regex("...")`` a regex lexeme (with ``json_string=true``, xgrammar's printer marks a
JSON key pattern whose classes already exclude the characters JSON escapes), ``{m, -1}`` an unbounded repeat, and a lookahead assertion
``(= ...)`` is dropped (xgrammar's JSON printer adds them after strings as a matching hint;
the context that follows a string in those grammars already implies them). Anything this
converter does not know raises ``ValueError`` (the backend reports it as unsupported).
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<define>::=)
  | (?P<tok>(?:Exclude)?Token\(\s*\d+(?:\s*,\s*\d+)*\s*\))
  | (?P<regex>Regex\("(?:[^"\\\n]|\\.)*"(?:\s*,\s*json_string\s*=\s*true)?\))
  | (?P<look>\(=)
  | (?P<name>[A-Za-z0-9_.\-]+)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<cls>\[(?:[^\]\\\n]|\\.)*\])
  | (?P<repeat>\{\s*\d+\s*(?:,\s*(?:-1|\d*)\s*)?\})
  | (?P<op>[()|*+?])
""", re.X)
_ESCAPES = {"0": 0x00, "n": 0x0A, "r": 0x0D, "t": 0x09, "\\": 0x5C, '"': 0x22, "[": 0x5B,
            "]": 0x5D,
            "'": 0x27, "/": 0x2F, "-": 0x2D, "^": 0x5E}


def _tokens(text: str) -> list[tuple[str, str]]:
  out, pos = [], 0
  while pos < len(text):
    m = _TOKEN.match(text, pos)
    if m is None:
      raise ValueError(f"unexpected {text[pos:pos + 10]!r} at offset {pos}")
    pos = m.end()
    if m.lastgroup != "ws":
      out.append((m.lastgroup, m.group()))
  return out


def _escape(body: str, i: int) -> tuple[int, int]:
  """The code point of the escape at ``body[i]`` (a backslash) and the index after it."""
  e = body[i + 1] if i + 1 < len(body) else ""
  width = {"x": 2, "u": 4, "U": 8}.get(e)
  if width:
    digits = body[i + 2:i + 2 + width]
    if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
      raise ValueError(f"bad \\{e} escape in {body!r}")
    return int(digits, 16), i + 2 + width
  if e in _ESCAPES:
    return _ESCAPES[e], i + 2
  raise ValueError(f"unknown escape \\{e}")


def _chars(body: str) -> list[int]:
  """Code points of a literal body with GBNF escapes resolved."""
  out, i = [], 0
  while i < len(body):
    if body[i] == "\\":
      cp, i = _escape(body, i)
    else:
      cp, i = ord(body[i]), i + 1
    out.append(cp)
  return out


def _cp(cp: int) -> str:
  return "\\x{%X}" % cp


def _class(text: str) -> str:
  """A GBNF class ``[...]`` / ``[^...]`` as a one-character regex lexeme."""
  body = text[1:-1]
  negated = body.startswith("^")
  raw = body[1:] if negated else body
  items, i = [], 0  # (code point, is an unescaped '-')
  while i < len(raw):
    if raw[i] == "\\":
      cp, i = _escape(raw, i)
      items.append((cp, False))
    else:
      items.append((ord(raw[i]), raw[i] == "-"))
      i += 1
  parts, j = [], 0
  while j < len(items):
    if j + 2 < len(items) and items[j + 1][1]:
      lo, hi = items[j][0], items[j + 2][0]
      if lo > hi:
        raise ValueError(f"empty range in {text!r}")
      parts.append(f"{_cp(lo)}-{_cp(hi)}")
      j += 3
    else:
      parts.append(_cp(items[j][0]))
      j += 1
  if not parts:
    raise ValueError(f"empty class {text!r}")
  return "/[" + ("^" if negated else "") + "".join(parts) + "]/"


def _regex_lexeme(val: str) -> str:
  """``Regex("...")`` (a string-escaped, anchored regex) as a Lark regex lexeme ``/.../``."""
  body = re.sub(r'\\(.)', lambda m: m.group(1) if m.group(1) in '"\\' else m.group(0),
                val[len('Regex("'):val.rindex('"')])
  if body.startswith("^"):
    body = body[1:]
  if body.endswith("$") and not body.endswith("\\$"):
    body = body[:-1]
  if not body:
    raise ValueError("empty regex")
  return "/" + body.replace("/", "\\/") + "/"


class _Parser:
  def __init__(self, tokens, names):
    self.t, self.i, self.names = tokens, 0, names

  def peek(self):
    return self.t[self.i] if self.i < len(self.t) else (None, None)

  def alternatives(self) -> str:
    seqs = [self.sequence()]
    while self.peek() == ("op", "|"):
      self.i += 1
      seqs.append(self.sequence())
    return " | ".join(seqs)

  def sequence(self) -> str:
    items = []
    while True:
      kind, val = self.peek()
      if kind is None or (kind == "op" and val in "|)"):
        break
      items.append(self.item())
    return " ".join(i for i in items if i) or '""'

  def item(self) -> str:
    kind, val = self.peek()
    self.i += 1
    if kind == "name":
      if val not in self.names:
        raise ValueError(f"undefined rule {val}")
      atom, atomic = self.names[val], True
    elif kind == "string":
      cps = _chars(val[1:-1])
      atom = " ".join(f"/{_cp(c)}/" for c in cps) or '""'
      atomic = len(cps) == 1
    elif kind == "cls":
      atom, atomic = _class(val), True
    elif kind == "tok":
      ids = ",".join(x.strip() for x in val[val.index("(") + 1:-1].split(","))
      atom, atomic = ("<[^%s]>" if val.startswith("Exclude") else "<[%s]>") % ids, True
    elif kind == "regex":
      atom, atomic = _regex_lexeme(val), True
    elif kind == "look":  # an assertion: parsed, then dropped (see the module docstring)
      self.alternatives()
      if self.peek() != ("op", ")"):
        raise ValueError("unbalanced lookahead assertion")
      self.i += 1
      return ""
    elif (kind, val) == ("op", "("):
      atom, atomic = "(" + self.alternatives() + ")", True
      if self.peek() != ("op", ")"):
        raise ValueError("unbalanced parenthesis")
      self.i += 1
    else:
      raise ValueError(f"unexpected {val!r}")
    while True:
      kind, val = self.peek()
      if kind == "repeat":
        q = val.replace(" ", "").replace(",-1}", ",}")
      elif kind == "op" and val in "*+?":
        q = val
      else:
        return atom
      self.i += 1
      if not atomic:
        atom = f"({atom})"
      atom, atomic = atom + q, False


def gbnf_to_lark(text: str) -> str:
  """llguidance Lark for a validated GBNF grammar (entry rule ``root``).

  Raises:
    ValueError: a construct this converter does not handle.
  """
  tokens = _tokens(text)
  starts = [i for i in range(len(tokens) - 1)
            if tokens[i][0] == "name" and tokens[i + 1][0] == "define"]
  if not starts or starts[0] != 0:
    raise ValueError("the grammar must start with a rule")
  names: dict[str, str] = {}
  for n, i in enumerate(starts):
    names.setdefault(tokens[i][1], f"r{n}")
  if "root" not in names:
    raise ValueError("no root rule")
  lines = [f"start: {names['root']}"]
  done = set()
  for n, i in enumerate(starts):
    name = tokens[i][1]
    if name in done:
      raise ValueError(f"rule {name} is defined twice")
    done.add(name)
    end = starts[n + 1] if n + 1 < len(starts) else len(tokens)
    p = _Parser(tokens[i + 2:end], names)
    body = p.alternatives()
    if p.i != len(p.t):
      raise ValueError(f"unexpected {p.t[p.i][1]!r} in rule {name}")
    lines.append(f"{names[name]}: {body}")
  return "\n".join(lines) + "\n"
