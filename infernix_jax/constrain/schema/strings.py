"""String keywords (pattern, minLength, maxLength): search-semantics patterns and length folding."""

from __future__ import annotations

import functools
import re
from typing import Any

from infernix_jax.constrain._regex import (ANY, JSON_SAFE, MAX_REPEAT, _EPS, Alt, Cls, Node, Rep,
                                           Seq, _branches_node, _emit, _simplify, complement,
                                           intersect, normalize, parse)
from infernix_jax.constrain.errors import RegexError, SchemaError


class LengthUnsupported(Exception):
  """The pattern's language cannot be cut to a length range by our exact rewrites."""


_INF = float("inf")


def _length_range(node: Node) -> tuple[float, float]:
  """(min, max) number of characters of the node's strings (max may be infinite)."""
  if isinstance(node, Cls):
    return 1, 1
  if isinstance(node, Seq):
    rs = [_length_range(i) for i in node.items]
    return sum(r[0] for r in rs), sum(r[1] for r in rs)
  if isinstance(node, Alt):
    rs = [_length_range(o) for o in node.options]
    return min(r[0] for r in rs), max(r[1] for r in rs)
  lo, hi = _length_range(node.node)
  return node.lo * lo, (_INF if node.hi is None else node.hi) * hi if hi else 0


def _bound(node: Node, m: float, n: float) -> Node | None:
  """The strings of ``node`` whose length lies in [m, n], exactly, or LengthUnsupported."""
  lo, hi = _length_range(node)
  if lo >= m and hi <= n:
    return node
  if lo > n or hi < m:
    return None
  if isinstance(node, Alt):
    opts = [b for b in (_bound(o, m, n) for o in node.options) if b is not None]
    return None if not opts else opts[0] if len(opts) == 1 else Alt(tuple(opts))
  if isinstance(node, Rep):
    w_lo, w_hi = _length_range(node.node)
    if w_lo != w_hi or w_lo == 0:
      raise LengthUnsupported()
    w = int(w_lo)
    k_lo = max(node.lo, -(-int(max(m, 0)) // w))
    k_hi = min(n // w, MAX_REPEAT) if n != _INF else None  # clamping only narrows
    if node.hi is not None:
      k_hi = node.hi if k_hi is None else min(node.hi, int(k_hi))
    if k_hi is not None and k_lo > k_hi:
      return None
    if k_lo > MAX_REPEAT:
      raise LengthUnsupported()
    return Rep(node.node, int(k_lo), None if k_hi is None else int(k_hi))
  if isinstance(node, Seq):
    ranges = [_length_range(i) for i in node.items]
    variable = [i for i, r in enumerate(ranges) if r[0] != r[1]]
    if len(variable) != 1:
      raise LengthUnsupported()
    fixed = sum(r[0] for i, r in enumerate(ranges) if i != variable[0])
    v = variable[0]
    sub = _bound(node.items[v], max(m - fixed, 0), n - fixed)
    if sub is None:
      return None
    return Seq(node.items[:v] + (sub,) + node.items[v + 1:])
  raise LengthUnsupported()


def schema_pattern(pattern: str, min_len: int = 0,
                   max_len: int | None = None) -> tuple[str, str] | None:
  """Converts a JSON Schema ``pattern`` (search semantics) for xgrammar's JSON strings.

  The result is restricted to characters a JSON string may hold raw (xgrammar's pattern
  strings admit no escapes, and would otherwise let raw control characters through). A
  length range (minLength/maxLength, which xgrammar ignores next to a pattern) is folded in
  exactly when the pattern's shape allows it (one variable-length part per alternative).

  Returns:
    ``(xgrammar_regex, python_regex)`` for whole-string matching of the string value, or None
    if no JSON string can match. Raises RegexError, or LengthUnsupported when the length
    range cannot be folded in.
  """
  branches = parse(pattern)
  node = _branches_node(branches, search=True, alphabet=JSON_SAFE)
  if node is not None and (min_len or max_len is not None):
    node = _bound(node, min_len, _INF if max_len is None else max_len)
    node = None if node is None else _simplify(node, JSON_SAFE)
  if node is None:
    return None
  return json_string_regex(node), _emit(node, python=True)


def json_string_regex(node: Node) -> str:
  """Emits ``node`` for xgrammar's JSON-string regex path (``Regex(..., json_string=true)``).

  That path (unlike the whole-content regex path) mis-handles the end of the pattern: with
  ``x(x|)|x`` or ``x{1,2}|x`` it accepts "xxx". A trailing empty group keeps the end exact
  (found by differential testing against Python ``re``: tests/constrain/test_regex.py).
  """
  return "(" + _emit(node) + ")()"


def search_regex(pattern: str) -> str:
  """A Python ``re`` pattern with ECMAScript semantics for whole-value matching (any value)."""
  node = _branches_node(parse(pattern), search=True, alphabet=ANY)
  return "(?!)" if node is None else _emit(node, python=True)


def key_complement(names) -> str:
  """Anchored xgrammar regex of the escape-free JSON key spellings that are none of ``names``.

  xgrammar 0.2.8 lets an additional property key spelled with escapes (``"\\u0061"``) or a
  declared name through the additionalProperties path, so an object could repeat a declared
  key with a value its schema forbids. Additional keys are therefore routed through a
  pattern that excludes every declared name and admits no escapes (a narrowing).
  """
  trie: dict = {}
  for name in names:
    if all(any(lo <= ord(ch) <= hi for lo, hi in JSON_SAFE) for ch in name):
      node = trie
      for ch in name:
        node = node.setdefault(ch, {})
      node[None] = {}  # terminal marker
  any_run = Rep(Cls(JSON_SAFE), 0, None)

  def build(node: dict) -> Node:
    children = sorted(k for k in node if k is not None)
    other = intersect(JSON_SAFE, complement(normalize((ord(c), ord(c)) for c in children)))
    options: list[Node] = [] if None in node else [_EPS]
    if other:
      options.append(Seq((Cls(other), any_run)))
    options += [Seq((Cls(((ord(c), ord(c)),)), build(node[c]))) for c in children]
    return options[0] if len(options) == 1 else Alt(tuple(options))

  return "^" + json_string_regex(_simplify(build(trie), JSON_SAFE)) + "$"


@functools.lru_cache(maxsize=512)
def python_pattern(pattern: str) -> re.Pattern:
  """A compiled Python regex with ECMAScript search semantics, for whole-value matching."""
  return re.compile(search_regex(pattern), re.S)


def finish_string(leaf: dict) -> dict | None:
  """The string leaf, or None when no JSON string the grammar can spell satisfies it."""
  if "maxLength" in leaf and leaf.get("minLength", 0) > leaf["maxLength"]:
    return None
  if "pattern" in leaf:
    try:
      if schema_pattern(leaf["pattern"], leaf.get("minLength", 0),
                        leaf.get("maxLength")) is None:
        return None  # no JSON string the grammar can spell matches: nothing to generate
    except LengthUnsupported:
      pass  # reported (or dropped if lenient) when the leaf is emitted
  return leaf


class StringKeywords:
  """String assertions for the normalizer (the host provides count, fail, invalid)."""

  def string_leaf(self, s: dict, ptr: str, out: dict) -> None:
    """Writes the length bounds and the (checked) pattern of ``s`` into the leaf ``out``."""
    out["_at"] = ptr
    for k in ("minLength", "maxLength"):
      if k in s:
        out[k] = self.count(s, k, ptr)
    if "pattern" in s:
      pat = s["pattern"]
      if not isinstance(pat, str):
        self.invalid("pattern must be a string", f"{ptr}/pattern")
      try:
        python_pattern(pat)
      except RegexError as e:
        raise RegexError(f"pattern: {e.message} (pattern position {e.location})",
                         f"{ptr}/pattern") from None
      out["pattern"] = pat

  def merge_strings(self, a: dict, b: dict, out: dict, ptr: str) -> None:
    """Writes the intersection of two string leaves' assertions into ``out``."""
    if a.get("minLength", 0) or b.get("minLength", 0):
      out["minLength"] = max(a.get("minLength", 0), b.get("minLength", 0))
    maxes = [x["maxLength"] for x in (a, b) if "maxLength" in x]
    if maxes:
      out["maxLength"] = min(maxes)
    pats = [x["pattern"] for x in (a, b) if "pattern" in x]
    if len(set(pats)) > 1:
      self.fail("intersecting two different string patterns is not supported; combine them "
                "into one pattern", ptr, "pattern")
    if pats:
      out["pattern"] = pats[0]

  def emit_string(self, nf: dict) -> Any:
    ptr = nf.get("_at", "")
    lo, hi = nf.get("minLength", 0), nf.get("maxLength")
    if "pattern" in nf:
      try:
        conv = schema_pattern(nf["pattern"], lo, hi)
      except LengthUnsupported:
        conv = False
      if conv is False:
        key = "minLength" if lo else "maxLength"
        self.fail("minLength/maxLength together with this pattern cannot be enforced exactly "
                  "(it has several variable-length parts); fold the length into the pattern "
                  "(e.g. '^[a-z]{2,8}$')", f"{ptr}/{key}", key)
        conv = schema_pattern(nf["pattern"])
      if conv is None:  # only reachable when lenient dropped nothing: caught in finish_leaf
        raise SchemaError("no string satisfies both the pattern and the length bounds", ptr)
      return {"type": "string", "pattern": conv[0]}
    if lo or hi is not None:
      if lo > MAX_REPEAT:
        self.fail(f"minLength above {MAX_REPEAT} is not supported", f"{ptr}/minLength",
                  "minLength")
        return {"type": "string"}
      if hi is not None:
        hi = min(hi, MAX_REPEAT)  # longer strings are never generated: a narrowing
      node = Rep(Cls(JSON_SAFE), lo, hi)
      return {"type": "string", "pattern": json_string_regex(node)}
    return {"type": "string"}
