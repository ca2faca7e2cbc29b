"""User-facing constraint errors: one base class, each error says what and where."""

from __future__ import annotations


class ConstraintError(ValueError):
  """Base of every user error about an output constraint (raised before anything is queued).

  Attributes:
    location: where the problem is: ``"line:column"`` for GBNF and regex sources, a JSON
      Pointer (``"/properties/a/minItems"``) for schemas, an index for choices; ``None``
      when the whole input is at fault.
  """

  def __init__(self, message: str, location: str | None = None):
    self.location = location
    super().__init__(f"{message} (at {location})" if location is not None else message)
    self.message = message


class GrammarSyntaxError(ConstraintError):
  """A GBNF grammar does not parse or references an undefined rule; location is line:column."""


class SchemaError(ConstraintError):
  """A JSON Schema is not valid JSON or not a valid schema; location is a JSON Pointer."""


class UnsupportedSchemaError(SchemaError):
  """A schema uses a keyword outside the supported subset; location names the keyword."""


class RegexError(ConstraintError):
  """A regex does not parse or uses an unsupported feature; location is line:column."""


class ChoiceError(ConstraintError):
  """A choice list is invalid (not a list of strings, or empty); location is the index."""


class FeatureConflictError(ConstraintError):
  """Options that cannot be combined (e.g. stop strings with a constraint, GBNF with tools)."""


class TokenReferenceError(ConstraintError):
  """A constraint references a token the vocabulary does not have."""


class PrefixError(ConstraintError):
  """A continuation prefix the constraint cannot accept; location is the byte offset."""


class UnsupportedConstraintError(ConstraintError):
  """A constraint backend cannot express a construct; names the backend and the construct.

  Attributes:
    backend: the backend's registry name ("trie", "llguidance", ...).
    construct: what it cannot express (a kind, a keyword, a grammar feature).
  """

  def __init__(self, backend: str, construct: str, message: str = "",
               location: str | None = None):
    self.backend, self.construct = backend, construct
    detail = f": {message}" if message else ""
    self.reason = f"the {backend} backend cannot express {construct}{detail}"
    super().__init__(f"{self.reason}; choose another backend (or 'auto')", location)


class NoExactBackendError(UnsupportedConstraintError):
  """Under ``auto``, every registered backend refused a construct of the constraint.

  Attributes:
    refusals: ``(backend name, its error)`` in the order they were tried.
    backend: ``"auto"``; construct, location: those of the first refusal.
  """

  def __init__(self, refusals: list):
    first = refusals[0][1]
    self.refusals = list(refusals)
    said = "; ".join(f"{name}: {getattr(e, 'reason', e.message)}" for name, e in refusals)
    ConstraintError.__init__(self, f"no registered backend enforces it exactly ({said})",
                             first.location)
    self.backend = "auto"
    self.construct = getattr(first, "construct", None) or getattr(first, "keyword", None) or ""
    self.reason = self.message
