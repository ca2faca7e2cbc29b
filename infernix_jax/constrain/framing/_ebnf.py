"""EBNF text helpers: literals, rule renaming for embedded grammars, delimiter- and
name-excluding rules."""

from __future__ import annotations

import re

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LHS = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*::=", re.MULTILINE)


def lit(text: str) -> str:
  """An EBNF string literal matching ``text`` exactly (UTF-8 characters written directly)."""
  out = ['"']
  for ch in text:
    o = ord(ch)
    if ch == '"':
      out.append('\\"')
    elif ch == "\\":
      out.append("\\\\")
    elif ch == "\n":
      out.append("\\n")
    elif ch == "\r":
      out.append("\\r")
    elif ch == "\t":
      out.append("\\t")
    elif o < 0x20 or o == 0x7F:
      out.append(f"\\u{o:04x}")  # \u takes exactly four digits (\x is greedy)
    else:
      out.append(ch)
  out.append('"')
  return "".join(out)


def char_class_escape(ch: str) -> str:
  """One character escaped for use inside ``[...]``."""
  if ch in "\\]^-[":
    return "\\" + ch
  if ch == "\n":
    return "\\n"
  if ch == "\r":
    return "\\r"
  if ch == "\t":
    return "\\t"
  if ord(ch) < 0x20 or ord(ch) == 0x7F:
    return f"\\u{ord(ch):04x}"
  return ch


def rule_names(ebnf: str) -> list[str]:
  """The names defined (left-hand sides) in an EBNF text, in order."""
  return _LHS.findall(ebnf)


def rename_rules(ebnf: str, prefix: str) -> str:
  """Prefixes every rule name defined in ``ebnf`` (definitions and references).

  Literals ``"..."``, character classes ``[...]`` and keyword arguments are left untouched,
  so an embedded grammar (e.g. a JSON Schema converted by the matcher library) can live
  beside others in one grammar without name clashes. ``root`` becomes ``{prefix}root``.
  """
  names = set(rule_names(ebnf))
  out: list[str] = []
  i, n = 0, len(ebnf)
  while i < n:
    ch = ebnf[i]
    if ch == '"' or ch == "[":
      close = '"' if ch == '"' else "]"
      j = i + 1
      while j < n and ebnf[j] != close:
        j += 2 if ebnf[j] == "\\" else 1
      out.append(ebnf[i:j + 1])
      i = j + 1
      continue
    if ch == "#":  # comment to end of line
      j = ebnf.find("\n", i)
      j = n if j < 0 else j
      i = j
      continue
    m = _IDENT.match(ebnf, i)
    if m and (i == 0 or not (ebnf[i - 1].isalnum() or ebnf[i - 1] == "_")):
      word = m.group(0)
      # `name=` inside macro arguments (TagDispatch(loop_after_dispatch=...)) is a keyword.
      rest = ebnf[m.end():m.end() + 3].lstrip()
      is_kwarg = rest.startswith("=") and not rest.startswith("=(")
      out.append(prefix + word if word in names and not is_kwarg else word)
      i = m.end()
      continue
    out.append(ch)
    i += 1
  return "".join(out)


def _prefix_automaton(name: str, text: str, heads) -> str:
  """One rule per matched-prefix state of a KMP automaton over ``text``, whose first character
  occurs nowhere else in it: a mismatch falls back to state 1 on that character and to state
  0 on any other. ``heads(k, ch, next_state)`` gives state k's own alternatives (next_state is
  None in the last state); the fallbacks follow them."""
  first = text[0]
  states = [name] + [f"{name}_s{k}" for k in range(1, len(text))]
  lines = []
  for k, ch in enumerate(text):
    alts = heads(k, ch, states[k + 1] if k + 1 < len(text) else None)
    if k > 0:
      alts.append(f"{lit(first)} {states[1]}")
      excl = char_class_escape(first) + char_class_escape(ch)
    else:
      excl = char_class_escape(first)
    alts.append(f"[^{excl}] {states[0]}")
    lines.append(f"{states[k]} ::= " + " | ".join(f"({a})" for a in alts))
  return "\n".join(lines)


def until_delimiter_rules(name: str, delimiter: str) -> str:
  """Rules ``name`` matching ``S + delimiter`` where S does not contain ``delimiter``.

  A KMP automaton over characters (`_prefix_automaton`); the delimiter's first character
  must occur nowhere else in it (true for ``"\\n</parameter>"``).

  Args:
    name: the entry rule name (states are ``name``, ``name_s1``, ...).
    delimiter: the closing string (at least one character).
  """
  if delimiter[0] in delimiter[1:]:
    raise ValueError(f"delimiter {delimiter!r} repeats its first character")
  return _prefix_automaton(
      name, delimiter, lambda k, ch, nxt: [f"{lit(ch)} {nxt}" if nxt else lit(ch)])


def excluding_rules(name: str, forbidden: str) -> str:
  """Rules ``name`` matching every string that does not contain ``forbidden``.

  The automaton of `until_delimiter_rules` where every state may end and the last character
  of ``forbidden`` is never read in the last state.

  Args:
    name: the entry rule name (states are ``name``, ``name_s1``, ...).
    forbidden: the excluded substring (at least two characters).
  """
  if len(forbidden) < 2 or forbidden[0] in forbidden[1:]:
    raise ValueError(f"{forbidden!r} must have two or more characters and not repeat its first")
  return _prefix_automaton(
      name, forbidden, lambda k, ch, nxt: ['""'] + ([f"{lit(ch)} {nxt}"] if nxt else []))


def name_excluding_rules(name: str, excluded, alphabet: str = "<>\n") -> str:
  """Rules ``name`` matching every non-empty string of characters outside ``alphabet`` that
  is none of the ``excluded`` strings (the undeclared parameter names of an open object).

  One rule per node of the character trie of ``excluded``: a character that continues some
  excluded string moves down the trie, any other leaves it for good (``name_any``); a node
  may end the string unless it is the root (empty) or ends an excluded string.

  Args:
    name: the entry rule name (nodes are ``name_n1``, ...; ``name_any`` the free tail).
    excluded: the strings to leave out (each made of characters outside ``alphabet``).
    alphabet: characters no string holds.
  """
  trie: list[dict[str, int]] = [{}]
  ends: set[int] = set()
  for word in dict.fromkeys(excluded):
    node = 0
    for ch in word:
      nxt = trie[node].get(ch)
      if nxt is None:
        nxt = trie[node][ch] = len(trie)
        trie.append({})
      node = nxt
    ends.add(node)
  rule = [name] + [f"{name}_n{i}" for i in range(1, len(trie))]
  banned = "".join(char_class_escape(c) for c in alphabet)
  lines = [f"{name}_any ::= [^{banned}]*"]
  for node, children in enumerate(trie):
    alts = [f"{lit(ch)} {rule[nxt]}" for ch, nxt in children.items()]
    other = banned + "".join(char_class_escape(c) for c in children)
    alts.append(f"[^{other}] {name}_any")
    if node and node not in ends:
      alts.append('""')
    lines.append(f"{rule[node]} ::= " + " | ".join(f"({a})" for a in alts))
  return "\n".join(lines)
