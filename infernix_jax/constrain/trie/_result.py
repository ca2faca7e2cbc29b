"""The preview result type of the trie session (fields as in the OutputSession contract)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class PreviewResult:
  """Outcome of ``preview(tokens)``.

  Attributes:
    accepted: tokens accepted (a prefix of the produced tokens).
    complete: the output may end after them (a value is complete, or EOS was accepted).
    terminated: EOS was accepted.
    dead_end: the state reached has no legal token.
  """

  accepted: int
  complete: bool
  terminated: bool
  dead_end: bool
