"""Drafters behind one interface (`base.Drafter`), registered by name with their own options.

  from infernix_jax.runtime import drafters
  drafters.names()                                   # ("none", "ngram", "jump", "draft", ...)
  opts = drafters.options("ngram", {"k": 4, "n": 2}) # the drafter's own Options, validated
  d = drafters.create("mtp", {"k": 4}, target=(cfg, model), jump_forward=True)

Adding a drafter: one module with a `Drafter` subclass, an options dataclass (a
`DrafterOptions` subclass: K plus the drafter's own fields) and `build(options, context)`,
registered through `register` (here for the built-in ones; `infernix_jax.drafters.register`
from a user's own module, loaded with `--plugin`). Every surface (the CLI's `--drafter-opt`,
`LLM(drafter_options=...)`, the server, study configs) passes options through `options`,
which names the drafter and the field on error; nothing outside a drafter's file knows its
fields.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Callable, Mapping

from infernix_jax.errors import ParameterError
from infernix_jax.runtime.drafters import (dflash, dflash2, draft_model, dspark, eagle3, jump,
                                           mtp, ngram, none, suffix)
from infernix_jax.runtime.drafters.base import (BuildContext, Committed, DraftInput, Drafter,
                                                DrafterOptions, DrafterSpec, NoOptions,
                                                OptionError, Proposal)
from infernix_jax.runtime.drafters.jump import JumpForward
from infernix_jax.runtime.drafters.ngram import NGramDrafter, NGramIndex
from infernix_jax.runtime.drafters.none import NoDrafter


@dataclasses.dataclass(frozen=True)
class Entry:
  """A registered drafter: its builder, its options class, a one-line description."""

  build: Callable[[Any, BuildContext], Drafter]
  options: type
  help: str

  @property
  def drafts(self) -> bool:
    """Whether it proposes drafts (its options carry K)."""
    return issubclass(self.options, DrafterOptions)


_REGISTRY: dict[str, Entry] = {}


def register(name: str, build: Callable[[Any, BuildContext], Drafter], *,
             options: type = DrafterOptions, help: str = "", replace: bool = False) -> None:
  """Adds a drafter under `name`.

  Args:
    name: the name every surface selects it by.
    build: (options, BuildContext) -> Drafter.
    options: its frozen options dataclass (`DrafterOptions` or a subclass; `NoOptions` for a
      drafter without drafts). Every field needs a default.
    help: one line for `--help` and error messages.
    replace: allow registering a name again (a plug-in reloaded in one process).

  Raises:
    ValueError: the name is taken (and replace is False), or `options` is not a dataclass
      whose fields all have defaults.
  """
  if not isinstance(name, str) or not name or any(c.isspace() for c in name):
    raise ValueError(f"drafter name {name!r} must be a non-empty string without spaces")
  if name in _REGISTRY and not replace:
    raise ValueError(f"a drafter named {name!r} is already registered")
  if not (dataclasses.is_dataclass(options) and isinstance(options, type)):
    raise ValueError(f"drafter {name!r}: options={options!r} must be a dataclass type")
  missing = [f.name for f in dataclasses.fields(options)
             if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
  if missing:
    raise ValueError(f"drafter {name!r}: option fields {missing} need defaults")
  _REGISTRY[name] = Entry(build, options, help)


def names() -> tuple[str, ...]:
  """Registered drafter names, in registration order."""
  return tuple(_REGISTRY)


def entry(name: str) -> Entry:
  """The registry entry of `name`.

  Raises:
    ParameterError("drafter"): unknown name (the message lists the known ones).
  """
  try:
    return _REGISTRY[name]
  except (KeyError, TypeError):
    raise ParameterError("drafter", f"unknown drafter {name!r}; known drafters: "
                         f"{', '.join(names())} (a plug-in module registers more)") from None


def fields(name: str) -> dict[str, Any]:
  """Option name -> default of drafter `name` (for help texts and configs)."""
  return {f.name: f.default for f in dataclasses.fields(entry(name).options)}


def options(name: str, overrides: Mapping[str, Any] | Any = None) -> Any:
  """The validated options of drafter `name`: its defaults with `overrides` applied.

  Args:
    name: a registered drafter.
    overrides: field -> value (strings from a command line are converted to the field's
      type: int, float, bool, None), an options instance of the drafter's class, or None.

  Raises:
    ParameterError("drafter_options.<field>"): an unknown field or an invalid value; the
      message names the drafter and lists its fields.
  """
  e = entry(name)
  if isinstance(overrides, e.options):
    opts = overrides
  else:
    overrides = dict(overrides or {})
    known = {f.name for f in dataclasses.fields(e.options)}
    for key in overrides:
      if key not in known:
        raise ParameterError(
            f"drafter_options.{key}", f"drafter {name!r} has no option {key!r}; its options: "
            f"{', '.join(sorted(known)) or 'none'}")
    hints = typing.get_type_hints(e.options)
    try:
      values = {k: _convert(v, hints.get(k, Any), k) for k, v in overrides.items()}
    except OptionError as err:
      raise ParameterError(f"drafter_options.{err.field}",
                           f"drafter {name!r}: {err.message}") from None
    opts = e.options(**values)
  try:
    opts.validate()
  except OptionError as err:
    raise ParameterError(f"drafter_options.{err.field}",
                         f"drafter {name!r}: {err.message}") from None
  return opts


_validated = options  # `create`'s parameter of that name shadows the function


def resolve_jump_forward(name: str, asked: bool | None) -> bool:
  """Whether drafter `name` runs behind grammar jump-forward: `asked`, or by default on for
  every drafter that drafts.

  Raises:
    ParameterError("jump_forward"): asked for around a drafter that drafts nothing (its
      drafts would be the forced tokens alone: that is drafter "jump").
  """
  drafts = entry(name).drafts
  if asked is None:
    return drafts
  if asked and not drafts:
    raise ParameterError("jump_forward", f"drafter {name!r} drafts nothing to extend; use "
                         f"drafter 'jump' for jump-forward drafts alone")
  return bool(asked)


def create(name: str, options: Mapping[str, Any] | Any = None, *, target: Any = None,
           load_model: Callable | None = None, jump_forward: bool = False,
           **overrides) -> Drafter:
  """Builds drafter `name`, wrapped in grammar jump-forward when asked.

  Args:
    name: a registered drafter.
    options: its options (a mapping or an options instance); keyword `overrides` join them.
    target: (cfg, model) of the target (drafters sharing its head or hidden states).
    load_model: path -> (cfg, model) for drafters that load another model (a draft model).
    jump_forward: draft the tokens the grammar forces first (`JumpForward` around it).

  Raises:
    ParameterError: unknown drafter, an invalid option, or jump-forward around a drafter
      that drafts nothing (use "jump").
  """
  e = entry(name)
  if overrides:
    if options is not None and not isinstance(options, Mapping):
      options = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    options = {**(options or {}), **overrides}
  opts = _validated(name, options)
  jump_forward = resolve_jump_forward(name, jump_forward)
  try:
    drafter = e.build(opts, BuildContext(target=target, load_model=load_model))
  except OptionError as err:
    raise ParameterError(f"drafter_options.{err.field}",
                         f"drafter {name!r}: {err.message}") from None
  if not isinstance(drafter, Drafter):
    raise TypeError(f"drafter {name!r}: build returned {type(drafter).__name__}, not a Drafter")
  if jump_forward and not isinstance(drafter, JumpForward):
    drafter = JumpForward(k=drafter.k, inner=drafter)
  return drafter


def _convert(value: Any, hint: Any, field: str) -> Any:
  """A command-line string converted to the field's type; other values pass unchanged."""
  if not isinstance(value, str):
    return value
  args = set(typing.get_args(hint)) if isinstance(hint, types.UnionType) or (
      typing.get_origin(hint) is typing.Union) else {hint}
  text = value.strip()
  if type(None) in args and text.lower() in ("none", "null", ""):
    return None
  if bool in args:
    if text.lower() in ("true", "1", "yes", "on"):
      return True
    if text.lower() in ("false", "0", "no", "off"):
      return False
    raise OptionError(field, f"{value!r} is not a boolean (true or false)")
  for kind in (int, float):
    if kind in args:
      try:
        return kind(text)
      except ValueError:
        if kind is int and float in args:
          continue
        raise OptionError(field, f"{value!r} is not {'an integer' if kind is int else 'a number'}"
                          ) from None
  return value


register("none", none.build, options=NoOptions, help="ordinary decoding, one token per round")
register("ngram", ngram.build, options=ngram.Options,
         help="prompt lookup: copies the continuation of the latest match")
register("suffix", suffix.build, options=suffix.Options,
         help="suffix decoding: token trees from the workload's earlier outputs and the prompt")
register("jump", jump.build, help="grammar jump-forward alone: drafts only forced tokens")
register("draft", draft_model.build, options=draft_model.Options,
         help="a draft model sharing the vocabulary (option model=PATH)")
register("mtp", mtp.build, options=mtp.Options,
         help="multi-token-prediction head on the target's hidden state")
register("eagle3", eagle3.build, options=eagle3.Options,
         help="EAGLE-3 head: fused low / middle / high target features, one layer, a reduced "
              "draft vocabulary (greedy or sampled, chains or trees)")
register("dflash", dflash.build, options=dflash.Options,
         help="block drafter: K tokens per call, greedy (one-hot q)")
register("dflash2", dflash2.build, options=dflash2.Options,
         help="sparse block drafter: top-16 sampled drafts (sparse q)")
register("dspark", dspark.build, options=dspark.Options,
         help="block backbone with a sequential head: each draft conditions on the previous "
              "one (greedy or sampled, chains or trees)")

__all__ = ["BuildContext", "Committed", "DraftInput", "Drafter", "DrafterOptions", "DrafterSpec",
           "Entry", "JumpForward", "NGramDrafter", "NGramIndex", "NoDrafter", "NoOptions",
           "OptionError", "Proposal", "create", "entry", "fields", "names", "options",
           "register"]
