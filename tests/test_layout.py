"""The package's import layout, read from the source with `ast` (nothing is imported).

A private module (`_x.py`, or a `_x` package) serves the package that holds it and that
package's subpackages; any other package imports what the owner makes public. Module-level
imports among the package's modules form no cycle, and the engine and its one builder do not
import each other at all (the builder assembles the engine; the engine knows no spec).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "infernix_jax"
# Test oracles and study support (tests/ and experiments/ in all but location): their
# oracles drive the matcher library's own matchers through `constrain._xgr`.
ORACLE_PACKAGES = ("infernix_jax.testing",)


def _modules() -> dict[str, Path]:
  """Dotted module name -> file, for every module of the package (a package by its
  __init__)."""
  out = {}
  for path in sorted((ROOT / PACKAGE).rglob("*.py")):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
      parts = parts[:-1]
    out[".".join(parts)] = path
  return out


MODULES = _modules()


def _package_of(module: str) -> str:
  """The package a module's imports are made from (a package's __init__: itself)."""
  return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def _module_level(tree: ast.Module) -> list[ast.AST]:
  """Statements run when the module is imported: all but function bodies."""
  out = []

  def visit(body):
    for node in body:
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        continue
      out.append(node)
      for field in ("body", "orelse", "finalbody", "handlers"):
        inner = getattr(node, field, None)
        if isinstance(inner, list):
          visit(inner)

  visit(tree.body)
  return out


def _imports(module: str, *, module_level: bool) -> list[tuple[int, str]]:
  """(line, imported dotted name) of the package's modules a module imports: `from a.b
  import c` names a.b.c when that is a module, else a.b."""
  tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
  nodes = _module_level(tree) if module_level else ast.walk(tree)
  out = []
  for node in nodes:
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      for alias in node.names:
        name = f"{node.module}.{alias.name}"
        out.append((node.lineno, name if name in MODULES else node.module))
    elif isinstance(node, ast.Import):
      out.extend((node.lineno, alias.name) for alias in node.names)
  return [(line, name) for line, name in out if name in MODULES]


def _private_owner(name: str) -> str | None:
  """The package holding the first private module on a dotted module path, or None."""
  parts = name.split(".")
  for i in range(1, len(parts)):
    if parts[i].startswith("_") and not parts[i].startswith("__"):
      return ".".join(parts[:i])
  return None


def private_imports_across_packages() -> list[str]:
  """`file:line: module imports owner's private module`, for every import of a private
  module from outside the package (and subpackages) that holds it."""
  found = []
  for module in MODULES:
    if module.startswith(ORACLE_PACKAGES):
      continue
    importer = _package_of(module)
    for line, name in _imports(module, module_level=False):
      owner = _private_owner(name)
      if owner is not None and not (importer == owner or importer.startswith(owner + ".")):
        found.append(f"{MODULES[module].relative_to(ROOT)}:{line}: {module} imports {name}")
  return found


def import_cycles(*, module_level: bool, among=None) -> list[list[str]]:
  """The strongly connected components (of more than one module) of the import graph."""
  nodes = list(among or MODULES)
  graph = {m: {n for _, n in _imports(m, module_level=module_level) if n in nodes and n != m}
           for m in nodes}
  index: dict[str, int] = {}
  low: dict[str, int] = {}
  stack: list[str] = []
  cycles = []

  def connect(v):  # Tarjan
    index[v] = low[v] = len(index)
    stack.append(v)
    for w in graph[v]:
      if w not in index:
        connect(w)
        low[v] = min(low[v], low[w])
      elif w in stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        cycles.append(sorted(component))

  for v in nodes:
    if v not in index:
      connect(v)
  return cycles


def test_no_private_module_is_imported_across_packages():
  assert private_imports_across_packages() == []


def test_the_private_module_rule_sees_what_it_should():
  """The walker's rule itself: a subpackage may import its ancestor's private module,
  another package may not (checked on the package's own modules, so the walker is not
  vacuous)."""
  assert _private_owner("infernix_jax.constrain._regex") == "infernix_jax.constrain"
  assert _private_owner("infernix_jax.runtime.drafters._trained") == (
      "infernix_jax.runtime.drafters")
  assert _private_owner("infernix_jax.runtime.engine") is None
  imported = {name for m in MODULES for _, name in _imports(m, module_level=False)}
  assert "infernix_jax.constrain._regex" in imported  # private modules are seen
  assert "infernix_jax.runtime.build" in imported  # `from a import b` names the module a.b


def test_module_level_imports_form_no_cycle():
  assert import_cycles(module_level=True) == []


def test_engine_and_builder_do_not_import_each_other():
  """Every import counts here, those inside functions too: the builder imports the engine,
  so the engine imports nothing of the builder."""
  pair = ("infernix_jax.runtime.engine", "infernix_jax.runtime.build")
  assert import_cycles(module_level=False, among=pair) == []
  assert any(name == pair[0] for _, name in _imports(pair[1], module_level=False))
