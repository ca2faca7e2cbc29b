"""Builders shared by the CLI and the benchmarks: drafters by name, constraints from options."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from infernix_jax.runtime.drafters import Drafter, JumpForward, NGramDrafter, NoDrafter

DRAFTERS = ("none", "ngram", "jump", "draft", "mtp", "dflash", "dflash2")


def make_drafter(name: str, *, k: int = 4, ngram_n: int = 3, jump_forward: bool = False,
                 target: Any = None, draft_model: Any = None, draft_sampling: bool = False,
                 seed: int = 0) -> Drafter:
  """A drafter by name.

  Args:
    name: one of DRAFTERS ("jump" = grammar jump-forward alone).
    k: drafts per round (ignored for "none").
    ngram_n: the longest n-gram of the n-gram drafter.
    jump_forward: wrap the drafter with grammar jump-forward.
    target: (cfg, model) of the target, for device drafters built on it (MTP, DFlash).
    draft_model: (cfg, model) of a draft model sharing the vocabulary ("draft").
    draft_sampling: the draft model samples (dense q) instead of greedy (one-hot q).
    seed: initialisation seed of drafter networks without trained weights.

  Raises:
    ValueError: unknown name or invalid combination.
  """
  if name not in DRAFTERS:
    raise ValueError(f"unknown drafter {name!r}; choose one of {', '.join(DRAFTERS)}")
  if name == "none":
    if jump_forward:
      return JumpForward(k=k)
    return NoDrafter()
  if k < 1:
    raise ValueError(f"--k={k} must be >= 1 for drafter {name!r} (use --drafter=none for k=0)")
  if name == "jump":
    return JumpForward(k=k)
  if name == "ngram":
    inner = NGramDrafter(k=k, n=ngram_n)
  else:
    from infernix_jax.runtime import device_drafters
    inner = device_drafters.make(name, k=k, target=target, draft_model=draft_model,
                                 sampling=draft_sampling, seed=seed)
  return JumpForward(k=k, inner=inner) if jump_forward else inner


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
