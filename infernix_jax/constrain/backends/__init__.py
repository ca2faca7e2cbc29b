"""Constraint backends behind one interface, registered by name, and the ``auto`` routing.

  from infernix_jax.constrain import backends
  backends.names()                 # ("xgrammar", "trie", ...) in registration order
  backend = backends.get("trie")   # a ConstraintBackend (imported on first use)
  backends.candidates(constraint)  # the names to try, in order ("auto": fastest first)

Adding a backend: one module implementing `ConstraintBackend` and the `Matcher` primitives
(`backends/base.py`; its sessions are `constrain.session.MatcherSession`s over them, which
write the transactions once) plus one `register(...)` line at the bottom of this file. Entries given
as ``"module:Class"`` are imported on first `get`, so importing the package never loads a
matcher library (nor what it imports).
"""

from __future__ import annotations

import importlib
import json
import threading
from typing import Any

from infernix_jax.constrain.backends.base import (BuildResult, ConstraintBackend,
                                                  ConstraintSession, Matcher, fill_rows)

AUTO = "auto"  # the routing policy name (not a backend): see `resolve`

_REGISTRY: dict[str, ConstraintBackend | str] = {}
_lock = threading.Lock()


def register(backend: ConstraintBackend | str, *, name: str | None = None
             ) -> ConstraintBackend | str:
  """Adds a backend under its name (a second, different one with the same name is an error).

  Args:
    backend: a backend instance (registered under ``backend.name``), or ``"module:Class"``
      (imported and instantiated on first `get`; then ``name`` is required).
    name: the registry name of a ``"module:Class"`` entry (must equal the class's ``name``).

  Returns:
    ``backend`` (so a class's instance can be registered where it is defined).
  """
  if isinstance(backend, str):
    if not name or ":" not in backend:
      raise ValueError(f"register({backend!r}) needs the form 'module:Class' and a name=")
  else:
    name = backend.name
  if name == AUTO:
    raise ValueError(f"{AUTO!r} is the routing policy, not a backend name")
  with _lock:
    old = _REGISTRY.get(name)
    if old is None:
      _REGISTRY[name] = backend
    elif old is not backend and old != backend:
      raise ValueError(f"a constraint backend named {name!r} is already registered")
  return backend


def get(name: str) -> ConstraintBackend:
  """The backend registered as `name`; ValueError listing the known names otherwise."""
  entry = _REGISTRY.get(name) if isinstance(name, str) else None
  if entry is None:
    raise ValueError(f"unknown constraint backend {name!r}; known backends: "
                     f"{', '.join(names())} (or {AUTO!r})")
  if isinstance(entry, str):
    module, _, attr = entry.partition(":")
    loaded = getattr(importlib.import_module(module), attr)
    loaded = loaded() if isinstance(loaded, type) else loaded
    if loaded.name != name:
      raise ValueError(f"{entry} is named {loaded.name!r}, registered as {name!r}")
    with _lock:
      if _REGISTRY.get(name) == entry:
        _REGISTRY[name] = loaded
      entry = _REGISTRY[name]
  return entry  # type: ignore[return-value]


def names() -> tuple[str, ...]:
  """Registered backend names, in registration order."""
  return tuple(_REGISTRY)


def requested(constraint: Any, backend: str | None = None) -> str:
  """The backend a compile call asks for: ``backend`` if given, else ``constraint.backend``.

  Raises:
    ValueError: not ``"auto"`` and not a registered name (the message lists them).
  """
  name = getattr(constraint, "backend", AUTO) if backend is None else backend
  if name != AUTO:
    get(name)
  return name


def route_key(name: str) -> tuple:
  """What `candidates` depends on besides the constraint (exact-source cache aliases hold it)."""
  if name != AUTO:
    return (name,)
  from infernix_jax.constrain.trie.dispatch import threshold

  return (AUTO, threshold())


def candidates(constraint: Any, backend: str | None = None) -> tuple[str, ...]:
  """The backends that may compile ``constraint``, in the order to try them.

  An explicit name (``backend``, else ``constraint.backend``) is the only candidate.
  ``"auto"``: a bare choice with at least ``trie.threshold()`` distinct values goes to the
  trie first (its compile and masks are faster there, docs/results/trie.md); then the
  registered backends in the measured order for the constraint's kind (`auto_order`: the
  fastest per mask first, docs/results/backend_order.md), then any other registered backend
  but the trie. The compiler takes the first that compiles the constraint exactly and goes
  on to the next when one refuses it.

  Raises:
    ValueError: an unknown backend name (the message lists the registered ones).
  """
  name = requested(constraint, backend)
  if name != AUTO:
    return (name,)
  order: list[str] = []
  if _is_large_choice(constraint) and "trie" in _REGISTRY:
    order.append("trie")
  kind = str(getattr(constraint.kind, "value", constraint.kind))
  for n in auto_order().get(kind, ()) + tuple(_REGISTRY):
    if n in _REGISTRY and n not in order and n != "trie":
      order.append(n)
  return tuple(order)


def resolve(constraint: Any, backend: str | None = None) -> str:
  """The first backend ``candidates`` names for ``constraint`` (an explicit name as is).

  Raises:
    ValueError: an unknown backend name (the message lists the registered ones).
  """
  return candidates(constraint, backend)[0]


_ORDER_FILE = "auto_order.json"
_order: dict[str, tuple[str, ...]] | None = None


def auto_order() -> dict[str, tuple[str, ...]]:
  """Per constraint kind, the backends ``auto`` tries first, fastest first: the table
  `benchmarks/backend_order.py --write` measured (package data ``auto_order.json``)."""
  global _order
  if _order is None:
    from importlib import resources

    path = resources.files(__name__).joinpath(_ORDER_FILE)
    try:
      table = json.loads(path.read_text(encoding="utf-8"))["order"]
      _order = {str(k): tuple(str(n) for n in v) for k, v in table.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
      raise RuntimeError(f"{path}: the backend order table is unreadable ({e}); "
                         "regenerate it with benchmarks/backend_order.py --write") from None
  return _order


def exports_automaton(session: Any) -> bool:
  """Whether ``session``'s masks may come from a device automaton instead of host lookahead.

  True when the backend that opened it declares ``exports_automaton`` (the trie); such a
  session has ``automaton_tables() -> (automaton, node)`` (the host `TrieAutomaton`, whose
  numpy tables ``trie.tables.export(automaton)`` gives `runtime.device_automaton`, and the
  session's node), and the ``automaton`` / ``node`` attributes. False for None, framed and unnamed sessions.
  """
  name = getattr(session, "backend", None)
  if not isinstance(name, str) or name not in _REGISTRY:
    return False
  return bool(getattr(get(name), "exports_automaton", False)) and hasattr(
      session, "automaton_tables")


def _is_large_choice(constraint: Any) -> bool:
  from infernix_jax.constrain.trie.dispatch import threshold

  kind = getattr(constraint.kind, "value", constraint.kind)
  source = constraint.source
  if kind != "choice" or constraint.framing or not isinstance(source, (list, tuple)):
    return False
  if len(source) < threshold():
    return False
  try:
    return len(set(source)) >= threshold()
  except TypeError:  # unhashable entries: invalid, xgrammar's path reports it
    return False


__all__ = ["AUTO", "BuildResult", "ConstraintBackend", "ConstraintSession", "Matcher",
           "auto_order", "candidates", "exports_automaton", "fill_rows", "get", "names", "register", "requested", "resolve",
           "route_key"]

register("infernix_jax.constrain.backends.xgrammar:XGrammarBackend", name="xgrammar")
register("infernix_jax.constrain.backends.trie:TrieBackend", name="trie")
register("infernix_jax.constrain.backends.llguidance:LLGuidanceBackend", name="llguidance")
