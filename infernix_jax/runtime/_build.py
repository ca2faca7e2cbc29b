"""Constraints from command-line style options (shared by the CLI and the benchmarks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

def make_constraint(*, json_schema_file: str | None = None, json_object: bool = False,
                    grammar_file: str | None = None, regex: str | None = None,
                    choices: Sequence[str] | None = None, json_schema_text: str | None = None):
  """The OutputConstraint of mutually exclusive options (None when none is given).

  Raises:
    FeatureConflictError: more than one constraint option.
    FileNotFoundError: a named file does not exist.
  """
  from infernix_jax import constrain as ic
  given = [name for name, on in (("--json-schema-file", json_schema_file or json_schema_text),
                                 ("--json-object", json_object),
                                 ("--grammar-file", grammar_file),
                                 ("--regex", regex is not None),
                                 ("--choice", bool(choices))) if on]
  if len(given) > 1:
    raise ic.FeatureConflictError(
        f"constraint options are mutually exclusive, got {' and '.join(given)}; give one")
  if json_schema_file or json_schema_text:
    text = json_schema_text if json_schema_text else _read(json_schema_file)
    return ic.OutputConstraint.json_schema(text)
  if json_object:
    return ic.OutputConstraint.json_object()
  if grammar_file:
    return ic.OutputConstraint.grammar(_read(grammar_file))
  if regex is not None:
    return ic.OutputConstraint.regex(regex)
  if choices:
    return ic.OutputConstraint.choice(list(choices))
  return None


def _read(path: str) -> str:
  p = Path(path)
  if not p.is_file():
    raise FileNotFoundError(f"{path}: no such file")
  return p.read_text(encoding="utf-8")
