"""OutputConstraint: the user's content constraint (grammar, JSON object/schema, choice, regex)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Iterable

DEFAULT_MAX_WHITESPACE = 32  # JSON: insignificant whitespace runs of at most 32 between tokens


class ConstraintKind(str, enum.Enum):
  """The five content-constraint kinds (reference 000, OutputConstraint)."""

  GRAMMAR = "grammar"
  JSON_OBJECT = "json_object"
  JSON_SCHEMA = "json_schema"
  CHOICE = "choice"
  REGEX = "regex"


@dataclasses.dataclass(frozen=True)
class OutputConstraint:
  """An immutable content constraint: its kind, its source and its compile options.

  Build one with the class methods; validation happens in `ConstraintCompiler.compile`
  (errors are `ConstraintError` subclasses raised before anything is queued).

  Attributes:
    kind: which language the source describes.
    source: GBNF / JSON Schema / regex text, or the tuple of choice literals ("" for
      json_object).
    lenient: JSON Schema only: drop unsupported assertion keywords (recorded with their JSON
      Pointer on the compiled constraint) instead of rejecting them. Off by default.
    max_whitespace: JSON kinds: the longest run of insignificant whitespace between tokens.
    framing: "" for bare content; otherwise the name of the output framing (e.g. "qwen")
      whose whole-output grammar the source is (grammar kind only; built by
      `constrain.framing`, which may match control tokens by id). Part of the cache identity;
      a continuation prefix is not.
    backend: the constraint backend that compiles it: a registered name
      (`constrain.backends.names()`) or "auto" (routing by `backends.resolve`). An explicit
      ``ConstraintCompiler.compile(..., backend=)`` overrides it.
  """

  kind: ConstraintKind
  source: str | tuple[str, ...]
  lenient: bool = False
  max_whitespace: int = DEFAULT_MAX_WHITESPACE
  framing: str = ""
  backend: str = "auto"

  @classmethod
  def grammar(cls, gbnf: str) -> "OutputConstraint":
    """GBNF text with entry rule ``root``."""
    return cls(ConstraintKind.GRAMMAR, gbnf)

  @classmethod
  def json_object(cls, *, max_whitespace: int = DEFAULT_MAX_WHITESPACE) -> "OutputConstraint":
    """Any JSON object at the root (not an arbitrary scalar)."""
    return cls(ConstraintKind.JSON_OBJECT, "", max_whitespace=max_whitespace)

  @classmethod
  def json_schema(cls, text: str, *, lenient: bool = False,
                  max_whitespace: int = DEFAULT_MAX_WHITESPACE) -> "OutputConstraint":
    """A JSON Schema document (2020-12 semantics unless it names draft-07).

    Args:
      text: the schema as JSON text.
      lenient: drop unsupported assertion keywords instead of rejecting them (recorded on
        the compiled constraint; the output never claims to satisfy them).
      max_whitespace: longest whitespace run between JSON tokens (default 32).
    """
    return cls(ConstraintKind.JSON_SCHEMA, text, lenient=lenient, max_whitespace=max_whitespace)

  @classmethod
  def choice(cls, values: Iterable[str]) -> "OutputConstraint":
    """A finite set of exact strings (order-free, deduplicated; "" allowed)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
      return cls(ConstraintKind.CHOICE, values)  # type: ignore[arg-type]  (rejected at compile)
    return cls(ConstraintKind.CHOICE, tuple(values))

  @classmethod
  def regex(cls, pattern: str) -> "OutputConstraint":
    """A regex that must match the whole content (ECMAScript-style classes)."""
    return cls(ConstraintKind.REGEX, pattern)

  def with_framing(self, framing: str) -> "OutputConstraint":
    """The same grammar as the whole output of framing ``framing`` (a different cache identity;
    see the ``framing`` attribute)."""
    return dataclasses.replace(self, framing=framing)

  def with_backend(self, backend: str) -> "OutputConstraint":
    """The same constraint for another backend (a registered name or "auto").

    Raises:
      ValueError: an unknown name (the message lists the registered backends).
    """
    from infernix_jax.constrain import backends

    backends.requested(self, backend)
    return dataclasses.replace(self, backend=backend)
