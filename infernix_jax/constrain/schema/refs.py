"""References: local ``$ref`` resolution, definition names, and the definitions the output keeps."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

from infernix_jax.constrain.errors import UnsupportedSchemaError


def esc(key: str) -> str:
  """``key`` escaped as one JSON Pointer segment."""
  return key.replace("~", "~0").replace("/", "~1")


class RefKeywords:
  """``$ref`` for the normalizer: each target is normalized once, under a ``$defs`` name.

  The host class provides ``doc``, ``defs``, ``bodies``, ``node`` and ``invalid``.
  """

  def resolve(self, ref: str) -> Any:
    name = ref.rsplit("/", 1)[1]
    if name not in self.bodies:
      target = next((p for p, n in self.defs.items() if n == name), "")
      raise UnsupportedSchemaError(
          "an intersection (allOf, $ref siblings, anyOf/oneOf with sibling assertions) needs "
          "the body of this recursive definition while it is being defined; move the "
          "recursion under properties/items or drop the sibling assertions", target)
    return self.bodies[name]

  def ref(self, ref: Any, ptr: str) -> dict | None:
    if not isinstance(ref, str):
      self.invalid("$ref must be a string", ptr)
    if not ref.startswith("#"):
      raise UnsupportedSchemaError(
          f"$ref {ref!r} points outside this document; only local references ('#/...') are "
          "supported (external documents are never fetched)", ptr)
    target_ptr = unquote(ref[1:])
    target: Any = self.doc
    if target_ptr:
      if not target_ptr.startswith("/"):
        raise UnsupportedSchemaError(f"$ref {ref!r} uses an anchor; use a JSON Pointer "
                                     "('#/$defs/name')", ptr)
      for part in target_ptr[1:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(target, dict) and part in target:
          target = target[part]
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
          target = target[int(part)]
        else:
          self.invalid(f"$ref {ref!r} does not resolve inside the document", ptr)
    if target_ptr not in self.defs:
      name = _def_name(target_ptr, set(self.defs.values()))
      self.defs[target_ptr] = name
      body = self.node(target, target_ptr)
      if body is not None and "$ref" in body and body["$ref"].rsplit("/", 1)[1] not in self.bodies:
        raise UnsupportedSchemaError(f"$ref {ref!r} is a reference cycle that never reaches a "
                                     "schema", ptr)
      self.bodies[name] = body
    name = self.defs[target_ptr]
    if name in self.bodies and self.bodies[name] is None:
      return None
    return {"$ref": "#/$defs/" + name}


def _def_name(ptr: str, taken: set[str]) -> str:
  m = re.fullmatch(r"/(?:\$defs|definitions)/([A-Za-z0-9_.-]{1,64})", ptr)
  name = m.group(1) if m else ("root" if ptr == "" else "ref")
  base, i = name, 1
  while name in taken:
    name = f"{base}_{i}"
    i += 1
  return name


def reachable(root: Any, defs: dict) -> dict:
  """The definitions the emitted schema references (transitively), in definition order."""
  seen: set[str] = set()
  stack = [root]
  while stack:
    v = stack.pop()
    if isinstance(v, dict):
      ref = v.get("$ref")
      if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref[len("#/$defs/"):]
        if name not in seen:
          seen.add(name)
          stack.append(defs[name])
      stack.extend(x for k, x in v.items() if k not in ("enum", "$ref"))
    elif isinstance(v, list):
      stack.extend(v)
  return {k: v for k, v in defs.items() if k in seen}
