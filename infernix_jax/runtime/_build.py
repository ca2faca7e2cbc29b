"""Constraints from command-line style options (shared by the CLI and the benchmarks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

def make_constraint(*, json_schema_file: str | None = None, json_object: bool = False,
                    grammar_file: str | None = None, regex: str | None = None,
                    choices: Sequence[str] | None = None, json_schema_text: str | None = None,
                    lenient: bool = False):
  """The OutputConstraint of mutually exclusive options (None when none is given).

  Args:
    json_schema_file: path of a JSON Schema.
    json_object: any JSON object.
    grammar_file: path of a GBNF grammar (entry rule root).
    regex: a regex the whole output matches.
    choices: the output is one of these strings.
    json_schema_text: an inline JSON Schema.
    lenient: JSON Schema only: drop unsupported assertion keywords instead of rejecting.

  Raises:
    FeatureConflictError: more than one constraint option, or lenient without a schema.
    FileNotFoundError: a named file does not exist (the message names the option and path).
  """
  from infernix_jax import constrain as ic
  given = [name for name, on in (("--json-schema-file", json_schema_file),
                                 ("--json-schema", json_schema_text is not None),
                                 ("--json-object", json_object),
                                 ("--grammar-file", grammar_file),
                                 ("--regex", regex is not None),
                                 ("--choice", bool(choices))) if on]
  if len(given) > 1:
    raise ic.FeatureConflictError(
        f"constraint options are mutually exclusive, got {' and '.join(given)}; give one")
  if lenient and not (json_schema_file or json_schema_text is not None):
    raise ic.FeatureConflictError("--lenient applies to JSON Schema constraints only; give "
                                  "--json-schema-file or --json-schema, or drop --lenient")
  if json_schema_file or json_schema_text is not None:
    text = (json_schema_text if json_schema_text is not None
            else _read("--json-schema-file", json_schema_file))
    return ic.OutputConstraint.json_schema(text, lenient=lenient)
  if json_object:
    return ic.OutputConstraint.json_object()
  if grammar_file:
    return ic.OutputConstraint.grammar(_read("--grammar-file", grammar_file))
  if regex is not None:
    return ic.OutputConstraint.regex(regex)
  if choices:
    return ic.OutputConstraint.choice(list(choices))
  return None


def _read(option: str, path: str) -> str:
  p = Path(path)
  if not p.is_file():
    raise FileNotFoundError(f"{option}={path}: no such file")
  return p.read_text(encoding="utf-8")
