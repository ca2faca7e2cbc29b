"""The constraint-backend interface: what every matcher library plugs in behind.

Axis letters (docs/CONTRACTS.md): B rows, K drafts, P = K + 1 positions, V vocabulary, W mask
words.

A backend turns an `OutputConstraint` into an immutable compiled object (shared by every
session of that constraint, cached by `ConstraintCompiler`) and opens sessions on it. A session
is one request's matcher with the transactions of DESIGN.md section 4. A backend implements
only the `Matcher` primitives (fill the next mask, accept one token, roll back, terminated /
completed, the continuation prefix, optional hints); `constrain.session.MatcherSession`
writes lookahead, preview, commit, discard, rollback, jump-forward, the flags, the mask cache
and the strict UTF-8 filter once over them (after vLLM's structured_output backend_types).
The runtime sees only `ConstraintBackend` and `ConstraintSession`; it never asks which
library sits behind them, only for capabilities (``exports_automaton``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Protocol, Sequence, runtime_checkable

import numpy as np

from infernix_jax import mask_layout


@dataclasses.dataclass(frozen=True)
class BuildResult:
  """What `ConstraintBackend.build` returns; the compile cache keeps it (immutable, shared).

  Attributes:
    grammar: the backend's compiled object, opaque to everyone but the backend (its sessions
      are opened on it; `CompiledConstraint.grammar` hands it back).
    nbytes: bytes it holds (charged to the cache's byte budget).
    compiled_source: the exact text (or a description) handed to the matcher library.
    dropped: ``(json_pointer, keyword)`` of each schema keyword dropped under ``lenient``.
  """

  grammar: Any
  nbytes: int
  compiled_source: str
  dropped: tuple[tuple[str, str], ...] = ()


class Matcher(Protocol):
  """One request's matcher state: the primitives a `MatcherSession` is written over.

  Every call sees the state after all tokens accepted so far (the session's lookahead and
  preview accept temporarily and roll back). Optional members are looked up with getattr.

  Capabilities (class attributes):
    strict_utf8: the masks admit strict UTF-8 only already (the session adds no filter).
    exact_accept: ``accept(t)`` succeeds exactly when t's mask bit is set (else the session
      checks previewed and jump-forward tokens against the mask first).
    eos_marks_complete (optional, default False): an EOS bit is set in the mask exactly when
      the output may end (preview then reads ``complete`` from its mask).
  """

  strict_utf8: ClassVar[bool]
  exact_accept: ClassVar[bool]

  def fill(self, out: np.ndarray, row: int) -> None:
    """The current legal set into ``out[row]`` (C-contiguous int32 [N, W], checked by the
    session); bits of ids >= V may be set (the session clears them). May raise RuntimeError
    once EOS was accepted."""

  def accept(self, token: int) -> bool:
    """Accepts one token (EOS included) and returns True, or refuses it (False, unchanged)."""

  def rollback(self, n: int) -> None:
    """Undoes the last ``n`` accepted tokens (an accepted EOS counts as one)."""

  def is_terminated(self) -> bool:
    """EOS was accepted."""

  def is_completed(self) -> bool:
    """The output may end now (before the session's UTF-8 check)."""

  def accept_prefix(self, data: bytes) -> int:
    """Accepts the continuation bytes at the start of the output; returns ``len(data)``, or
    the offset of the first byte no output of the constraint allows there."""

  # Optional (getattr): forced_bytes() -> bytes | None (jump-forward bytes, None when they
  # end inside a character: the session then walks single legal tokens); forced_hint(max_n)
  # -> list[int] (native forced tokens; the session keeps the prefix its masks allow);
  # has_legal() -> bool (a cheap emptiness test: preview then builds no mask);
  # can_continue() -> bool (a cheap "some non-EOS token is legal", strict_utf8 matchers only).


@runtime_checkable
class ConstraintSession(Protocol):
  """One request's grammar state (one matcher, never shared; one caller at a time).

  Masks are packed int32 words (mask_layout): bit ``id % 32`` of word ``id // 32``, bits of
  ids >= V always 0. Backends' sessions are `MatcherSession`s (which also have
  ``lookahead_rows``, ``rollback``, ``frontier_cached`` / ``set_frontier`` and ``matcher``);
  a wrapper (framing) may expose ``mask_session``: the session whose masks are its own, on
  which a batch fill runs its fast path.
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
  # Optional capability (default False): its sessions' masks may come from a device-resident
  # automaton; such sessions have ``automaton_tables() -> (automaton, node)`` (the host
  # automaton, whose numpy tables ``trie.tables.export`` builds for the device, and the
  # session's node). The runtime asks
  # `backends.exports_automaton(session)`.
  exports_automaton: ClassVar[bool]

  def check(self, constraint: Any) -> None:
    """Raises `UnsupportedConstraintError` (naming this backend and the construct) when the
    backend cannot express `constraint`; cheap, no compile."""

  def build(self, vocab: Any, constraint: Any) -> BuildResult:
    """Validates and compiles `constraint` for `vocab` (uncached; the compiler caches).

    Called after `check` passed. A choice constraint arrives with its canonical source (the
    deduplicated literal set sorted by UTF-8 bytes), the cache identity.

    Returns:
      A `BuildResult` (the compiled object + what the cache and the user read about it).

    Raises:
      ConstraintError: a subclass naming what and where.
    """

  def new_session(self, compiled: Any, prefix: bytes) -> ConstraintSession:
    """A session on `compiled` positioned after the continuation `prefix` (PrefixError).

    Args:
      compiled: the `CompiledConstraint` (``compiled.grammar`` is this backend's
        `BuildResult.grammar`; ``compiled.vocab`` the vocabulary); the session keeps it as
        ``session.compiled``.
      prefix: bytes already emitted of the output.
    """

  def fill_batch(self, sessions: Sequence[ConstraintSession | None], drafts: np.ndarray,
                 n_drafts: np.ndarray, out: np.ndarray, *, threads: int = 0) -> np.ndarray:
    """Lookahead of many of this backend's sessions in one call (`ic.fill_batch` groups rows).

    Args:
      sessions: B entries: a session opened by this backend, or None for a row this call
        must leave untouched (unconstrained, or another backend's).
      drafts: i32[B, K]; n_drafts: i32[B] real extent per row (0..K).
      out: C-contiguous int32 [B, K+1, W]; every position of every session row is written
        (zeros past the extent); None rows are not touched.
      threads: host threads the call may use beyond the caller's (0 = the calling thread
        only); a hint a backend may ignore.

    Returns:
      int8 [B, K+1] states of the session rows (UNREACHABLE past each row's extent), exactly
      what per-row `lookahead` gives; None rows READY (ignored).
    """


def fill_rows(sessions: Sequence[ConstraintSession | None], drafts: np.ndarray,
              n_drafts: np.ndarray, out: np.ndarray) -> np.ndarray:
  """`ConstraintBackend.fill_batch` by per-row `lookahead` (for backends with no batch path).

  Same arguments and result as `ConstraintBackend.fill_batch`.
  """
  states = np.full(out.shape[:2], mask_layout.READY, np.int8)  # [B, P]
  p = out.shape[1]
  ns = np.asarray(n_drafts).reshape(-1).tolist()
  for b, s in enumerate(sessions):
    if s is None:
      continue
    n = int(ns[b])
    states[b, :n + 1] = s.lookahead(drafts[b, :n], out[b, :n + 1])
    if n + 1 < p:
      states[b, n + 1:] = mask_layout.UNREACHABLE
      out[b, n + 1:] = 0
  return states
