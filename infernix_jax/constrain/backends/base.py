"""The constraint-backend interface: what every matcher library plugs in behind.

Axis letters (docs/CONTRACTS.md): B rows, K drafts, P = K + 1 positions, V vocabulary, W mask
words.

A backend turns an `OutputConstraint` into an immutable compiled object (shared by every
session of that constraint, cached by `ConstraintCompiler`) and opens sessions on it. A session
is one request's matcher with the transactions of DESIGN.md section 4. The runtime sees only
these two protocols; it never asks which library sits behind them.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class ConstraintSession(Protocol):
  """One request's grammar state (one matcher, never shared; one caller at a time).

  Masks are packed int32 words (mask_layout): bit ``id % 32`` of word ``id // 32``, bits of
  ids >= V always 0.
  """

  backend: str  # the registry name of the backend that opened it

  def lookahead(self, drafts: Sequence[int], out: np.ndarray) -> np.ndarray:
    """Masks of positions 0..K for a draft chain into out int32 [K+1, W]; -> int8 states [K+1].

    No persistent side effect (DESIGN.md section 3: Ready / DeadEnd / Unreachable).
    """

  def preview(self, tokens: Sequence[int]) -> Any:
    """Provisionally accepts produced tokens -> PreviewResult(accepted, complete, terminated,
    dead_end). Temporary until commit() / discard()."""

  def commit(self) -> None:
    """Confirms the preview (allocates and checks nothing)."""

  def discard(self) -> None:
    """Returns to the state before the preview."""

  def accept(self, tokens: Sequence[int]) -> Any:
    """preview + commit."""

  def fill_mask(self, out: np.ndarray) -> bool:
    """The committed state's legal set into out int32 [W]; False when empty."""

  def forced_tokens(self, max_n: int) -> list[int]:
    """Up to max_n tokens the grammar forces next (jump-forward; never EOS; may be [])."""

  @property
  def complete(self) -> bool:
    """The output may end now (EOS legal) or has ended."""

  @property
  def terminated(self) -> bool:
    """EOS was accepted."""

  @property
  def can_continue(self) -> bool:
    """Some non-EOS token is legal now."""

  @property
  def previewing(self) -> bool:
    """An uncommitted preview exists."""


class ConstraintBackend(Protocol):
  """A matcher library behind the constraint layer (registered by name in `backends`).

  Implementations are stateless singletons; per-vocabulary resources (token indexes,
  library compilers) live in `vocab.lazy(...)`.
  """

  name: ClassVar[str]  # registry name: "xgrammar", "trie", "llguidance", ...

  def check(self, constraint: Any) -> None:
    """Raises `UnsupportedConstraintError` (naming this backend and the construct) when the
    backend cannot express `constraint`; cheap, no compile."""

  def build(self, vocab: Any, constraint: Any) -> Any:
    """Validates and compiles `constraint` for `vocab` (uncached; the compiler caches).

    Returns:
      An immutable compiled object with `nbytes` (int, charged to the cache budget),
      `compiled_source` (str) and `dropped` (tuple of (json_pointer, keyword)) attributes.

    Raises:
      ConstraintError: a subclass naming what and where.
    """

  def new_session(self, compiled: Any, prefix: bytes) -> ConstraintSession:
    """A session on `compiled` positioned after the continuation `prefix` (PrefixError)."""

  def fill_batch(self, sessions: Sequence[ConstraintSession], drafts: np.ndarray,
                 n_drafts: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Lookahead of many of this backend's sessions in one call.

    Args:
      sessions: R sessions opened by this backend.
      drafts: i32[R, K]; n_drafts: i32[R] real extent per row (0..K).
      out: C-contiguous int32 [R, K+1, W]; every position is written (zeros past the extent).

    Returns:
      int8 [R, K+1] states (UNREACHABLE past each row's extent), exactly what per-row
      `lookahead` gives.
    """
