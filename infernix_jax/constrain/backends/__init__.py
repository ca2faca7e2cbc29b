"""Constraint backends behind one interface, registered by name.

  from infernix_jax.constrain import backends
  backends.names()                 # ("xgrammar", "trie", "llguidance", ...)
  backend = backends.get("trie")   # a ConstraintBackend

Adding a backend: one module implementing `ConstraintBackend` / `ConstraintSession`
(`backends/base.py`) plus one `register(...)` line below.
"""

from __future__ import annotations

from infernix_jax.constrain.backends.base import ConstraintBackend, ConstraintSession

_REGISTRY: dict[str, ConstraintBackend] = {}


def register(backend: ConstraintBackend) -> ConstraintBackend:
  """Adds a backend under its `name` (a second one with the same name is an error)."""
  if backend.name in _REGISTRY and _REGISTRY[backend.name] is not backend:
    raise ValueError(f"a constraint backend named {backend.name!r} is already registered")
  _REGISTRY[backend.name] = backend
  return backend


def get(name: str) -> ConstraintBackend:
  """The backend registered as `name`; ValueError listing the known names otherwise."""
  try:
    return _REGISTRY[name]
  except KeyError:
    raise ValueError(f"unknown constraint backend {name!r}; known backends: "
                     f"{', '.join(names())}") from None


def names() -> tuple[str, ...]:
  """Registered backend names, in registration order."""
  return tuple(_REGISTRY)


__all__ = ["ConstraintBackend", "ConstraintSession", "get", "names", "register"]
