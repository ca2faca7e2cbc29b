"""The schema oracle's matcher protocol over an llguidance matcher (byte vocabularies).

Shared by the llguidance soundness tests and `benchmarks/schema_coverage.py --backend
llguidance`: `schema_oracle.Walker` forks it to search for a serialization of a value.
"""

from __future__ import annotations

from typing import Any, Iterator


class LLGuidanceFork:
  """Walker protocol (fork / accept_string / accept_token / is_terminated) over an llguidance
  matcher whose token ids are bytes 0..255 and whose EOS is `eos_id`."""

  def __init__(self, m: Any, eos_id: int, eos: bool = False):
    self.m, self.eos_id, self.eos = m, eos_id, eos

  def fork(self) -> "LLGuidanceFork":
    return LLGuidanceFork(self.m.deep_copy(), self.eos_id, self.eos)

  def accept_string(self, data: bytes) -> bool:
    ids = list(data)
    if self.eos or self.m.validate_tokens(ids) != len(ids):
      return False
    return self.m.consume_tokens(ids)

  def accept_token(self, t: int) -> bool:
    if t != self.eos_id or self.eos or not self.m.is_accepting():
      return False
    self.eos = True
    return True

  def is_terminated(self) -> bool:
    return self.eos


def value_chars(v: Any) -> Iterator[str]:
  """Every character of the strings (and object keys) inside a JSON value."""
  if isinstance(v, str):
    yield from v
  elif isinstance(v, dict):
    for k, x in v.items():
      yield from k
      yield from value_chars(x)
  elif isinstance(v, list):
    for x in v:
      yield from value_chars(x)
