"""JSON Schema for llguidance: ECMAScript patterns, escape-free keys, options, error mapping.

Pure Python (never imports llguidance): `backends/llguidance.py` hands the result to the
library and maps its messages back through `schema_error` / `dropped`.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Sequence

from infernix_jax.constrain import errors
from infernix_jax.constrain.spec import OutputConstraint

NAME = "llguidance"
# JSON whitespace between tokens (RFC 8259; the set xgrammar allows too).
WHITESPACE_CLASS = r"[\x20\x0A\x0D\x09]"
# JSON string escapes llguidance may emit: every character then has exactly one spelling
# (no \\uXXXX, no \\/), so a key spelled with escapes can never pass for a declared name or
# slip past a patternProperties pattern. Narrowing: strings holding U+0000..U+001F other than
# \\b \\f \\n \\r \\t, or U+007F (llguidance wants it escaped), cannot be generated.
JSON_ESCAPES = '"\\bfnrt'
NEVER_MATCHES = r"[^\x{0}-\x{10FFFF}]"

_UNIMPLEMENTED = re.compile(r"Unimplemented keys: \[(.*?)\]")
_UNKNOWN_FORMAT = re.compile(r"Unknown format: ?(\S*)")
# llguidance messages about constructs it refuses: (message part, construct, keyword located).
_REFUSALS = (
    ("oneOf constraints are not supported", "oneOf whose branches it cannot prove exclusive",
     "oneOf"),
    ("min/maxProperties only supported", "minProperties/maxProperties next to optional "
     "properties", "minProperties"),
    ("circular references with sibling keys", "a circular $ref with sibling keywords", "$ref"),
    ("lookarounds not supported", "regex lookarounds (in a format or pattern)", None),
    ("are not disjoint", "patternProperties whose patterns overlap", "patternProperties"),
    ("Failed to generate regex for float range", "number bounds beyond double precision", None),
    ("NoExtension", "strings only \\u escapes could spell (escapes are disabled)", None),
    ("retriev", "a remote $ref", "$ref"),
    ("registry", "a remote $ref", "$ref"),
)


def first_line(msg: str) -> str:
  """The first non-blank line of a library message."""
  lines = [s for s in str(msg).strip().splitlines() if s.strip()]
  return lines[0].strip() if lines else "unknown error"


def schema_error(msg: str, doc: Any) -> errors.ConstraintError:
  """Maps an llguidance JSON-compiler message to our error class."""
  m = _UNIMPLEMENTED.search(msg)
  if m:
    keys = [k.strip().strip('"') for k in m.group(1).split(",") if k.strip()]
    ptrs = keyword_pointers(doc, set(keys))
    loc = ptrs[0][0] + "/" + _esc(ptrs[0][1]) if ptrs else None
    return errors.UnsupportedConstraintError(
        NAME, f"JSON Schema keyword {keys[0] if keys else '?'}",
        f"llguidance does not implement {', '.join(keys)} (lenient=True drops it)", loc)
  m = _UNKNOWN_FORMAT.search(msg)
  if m:
    ptrs = keyword_pointers(doc, {"format"})
    loc = ptrs[0][0] + "/format" if ptrs else None
    return errors.UnsupportedConstraintError(
        NAME, f"format {m.group(1) or '(empty)'}",
        "llguidance does not know this format (lenient=True drops it)", loc)
  if "regex" in msg.lower() and "parse error" in msg.lower():
    ptrs = keyword_pointers(doc, {"pattern"})
    return errors.RegexError(f"a pattern is not a valid regex: {_one_line(msg)}",
                             ptrs[0][0] + "/pattern" if len(ptrs) == 1 else None)
  for part, construct, keyword in _REFUSALS:
    if part in msg:
      ptrs = keyword_pointers(doc, {keyword}) if keyword else []
      loc = f"{ptrs[0][0]}/{_esc(keyword)}" if ptrs else None
      return errors.UnsupportedConstraintError(NAME, construct, first_line(msg), loc)
  if any(s in msg for s in ("too complex", "limit", "too large", "too many", "fuel")):
    return errors.UnsupportedConstraintError(NAME, "a grammar this large", first_line(msg))
  if "not supported" in msg or "nsupported" in msg or "not implemented" in msg:
    return errors.UnsupportedConstraintError(NAME, "this schema construct", first_line(msg))
  return errors.SchemaError(f"llguidance rejects the schema: {first_line(msg)}", "")


def _one_line(msg: str) -> str:
  return " ".join(s.strip() for s in str(msg).splitlines() if s.strip())[:200]


def _esc(key: str) -> str:
  return key.replace("~", "~0").replace("/", "~1")


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_ONE = ("not", "if", "then", "else", "additionalProperties", "contains", "propertyNames",
               "unevaluatedItems", "unevaluatedProperties", "additionalItems", "items")


def keyword_pointers(doc: Any, keywords: set) -> list[tuple[str, str]]:
  """(JSON Pointer of the schema, keyword) for each occurrence of ``keywords`` in ``doc``."""
  out: list[tuple[str, str]] = []

  def walk(node: Any, ptr: str) -> None:
    if not isinstance(node, dict):
      return
    for k, v in node.items():
      if k in keywords:
        out.append((ptr, k))
      if k in _SCHEMA_MAPS and isinstance(v, dict):
        for name, sub in v.items():
          walk(sub, f"{ptr}/{k}/{_esc(name)}")
      elif k in _SCHEMA_LISTS or k == "items":
        if isinstance(v, list):
          for i, sub in enumerate(v):
            walk(sub, f"{ptr}/{k}/{i}")
        else:
          walk(v, f"{ptr}/{k}")
      elif k in _SCHEMA_ONE or (k == "dependencies" and isinstance(v, dict)):
        if k == "dependencies":
          for name, sub in v.items():
            walk(sub, f"{ptr}/{k}/{_esc(name)}")
        else:
          walk(v, f"{ptr}/{k}")

  walk(doc, "")
  return out


def _ecma_pattern(pattern: Any, ptr: str) -> Any:
  """A JSON Schema ``pattern`` (ECMAScript, search semantics) as an anchored regex with
  explicit classes, so llguidance's Rust-regex reading cannot change its language (``\\s``,
  ``\\d``, ``.``, ``^``/``$`` differ between the two dialects)."""
  if not isinstance(pattern, str):
    return pattern
  from infernix_jax.constrain import _regex

  try:
    node = _regex._branches_node(_regex.parse(pattern), search=True, alphabet=_regex.ANY)
  except errors.RegexError as e:
    raise errors.RegexError(f"invalid pattern: {e.message}", ptr) from None
  if node is None:
    return NEVER_MATCHES
  return "^(?:" + _regex._emit(node) + ")$"


_COUNTS = frozenset(("minLength", "maxLength", "minItems", "maxItems", "minProperties",
                     "maxProperties", "minContains", "maxContains"))
_SPELLABLE_CONTROLS = frozenset("\b\f\n\r\t")


def _unspellable(value: Any) -> bool:
  """Whether a JSON value holds a string (or key) character no allowed escape can spell."""
  if isinstance(value, str):
    return any((ord(ch) < 0x20 and ch not in _SPELLABLE_CONTROLS) or ch == "\x7f"
               for ch in value)
  if isinstance(value, dict):
    return any(_unspellable(k) or _unspellable(x) for k, x in value.items())
  if isinstance(value, list):
    return any(_unspellable(x) for x in value)
  return False


def rewrite_patterns(node: Any, ptr: str) -> Any:
  """A copy of the schema ``node`` with every ``pattern`` and ``patternProperties`` key
  rewritten by `_ecma_pattern`."""
  if not isinstance(node, dict):
    return node
  out = {}
  for k, v in node.items():
    at = f"{ptr}/{_esc(k)}"
    if k == "pattern":
      v = _ecma_pattern(v, at)
    elif k in _COUNTS and isinstance(v, Decimal) and v == v.to_integral_value():
      v = int(v)  # 2.0 is an integer from draft 6 on; llguidance wants the integer spelling
    elif k in ("const", "enum") and _unspellable(v):
      raise errors.UnsupportedConstraintError(
          NAME, f"{k} strings holding control characters",
          "with \\u escapes disabled llguidance cannot spell U+0000..U+001F other than "
          "\\b \\f \\n \\r \\t, nor U+007F (and would silently drop them)", at)
    elif k == "patternProperties" and isinstance(v, dict):
      v = {_ecma_pattern(name, f"{at}/{_esc(name)}"): rewrite_patterns(sub, f"{at}/{_esc(name)}")
           for name, sub in v.items()}
    elif k in _SCHEMA_MAPS and isinstance(v, dict):
      v = {name: rewrite_patterns(sub, f"{at}/{_esc(name)}") for name, sub in v.items()}
    elif k in _SCHEMA_LISTS or k == "items":
      v = ([rewrite_patterns(sub, f"{at}/{i}") for i, sub in enumerate(v)]
           if isinstance(v, list) else rewrite_patterns(v, at))
    elif k in _SCHEMA_ONE:
      v = rewrite_patterns(v, at)
    elif k == "dependencies" and isinstance(v, dict):
      v = {name: rewrite_patterns(sub, f"{at}/{_esc(name)}") for name, sub in v.items()}
    out[k] = v
  return out


def json_options(c: OutputConstraint) -> dict:
  n = int(c.max_whitespace)
  opts: dict[str, Any] = {"lenient": bool(c.lenient), "json_allowed_escapes": JSON_ESCAPES}
  if n == 0:
    opts["whitespace_flexible"] = False
  else:
    opts["whitespace_flexible"] = True
    opts["whitespace_pattern"] = f"{WHITESPACE_CLASS}{{0,{n}}}"
  return opts


# Warnings of llguidance's lenient mode that relax a keyword everywhere it occurs.
_RELAXED = (("oneOf not fully supported", ("oneOf",)),
            ("min/maxProperties only supported", ("minProperties", "maxProperties")))


def dropped(warnings: Sequence[str], doc: Any) -> tuple:
  """``(json_pointer, keyword)`` of what llguidance's lenient mode relaxed, from its warnings.

  Unimplemented keys and unknown formats are located exactly; a relaxation llguidance names
  without a place (oneOf compiled as anyOf, min/maxProperties ignored) is recorded at every
  occurrence of the keyword (conservative); a warning we do not recognise is recorded at the
  root with its text as the keyword, so nothing is relaxed silently.
  """
  keys: set = set()
  found: list = []
  unknown_warnings = []
  for w in warnings:
    m = _UNIMPLEMENTED.search(w)
    if m:
      keys |= {k.strip().strip('"') for k in m.group(1).split(",") if k.strip()}
    elif _UNKNOWN_FORMAT.search(w):
      keys.add("format")
    elif any(part in w for part, _ in _RELAXED):
      for part, names in _RELAXED:
        if part in w:
          found += keyword_pointers(doc, set(names))
    else:
      unknown_warnings.append(first_line(w)[:80])
  if keys:
    located = keyword_pointers(doc, keys)
    if "format" in keys and not any(_UNIMPLEMENTED.search(w) and "format" in w for w in warnings):
      # Only the unknown formats were dropped, not the known ones llguidance enforces.
      unknown = {m.group(1).strip('"\'.,') for w in warnings
                 for m in [_UNKNOWN_FORMAT.search(w)] if m}
      located = [(p, k) for p, k in located if k != "format" or _format_at(doc, p) in unknown]
    found += located
  out = [(f"{p}/{_esc(k)}", k) for p, k in found] + [("", w) for w in unknown_warnings]
  return tuple(dict.fromkeys(out))


def _format_at(doc: Any, ptr: str) -> Any:
  node = doc
  for part in ptr.split("/")[1:]:
    part = part.replace("~1", "/").replace("~0", "~")
    node = node[int(part)] if isinstance(node, list) else node.get(part, {})
  return node.get("format") if isinstance(node, dict) else None
