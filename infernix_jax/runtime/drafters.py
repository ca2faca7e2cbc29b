"""Drafters: who proposes the K draft tokens of a round, and with which q.

Host drafters (`NoDrafter`, `NGramDrafter`, `JumpForward`) propose on the host before the
Forward stage; their q is one-hot. Device drafters (draft model, MTP, DFlash, DFlash2; see
`runtime/device_drafters.py`) propose inside the Forward stage. `JumpForward` wraps any of
them: where the grammar forces tokens, those become the row's one-hot drafts.

All drafters are frozen, hashable (by identity) objects, passed as static arguments to the
jitted stages.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from infernix_jax.runtime._ngram import NGramIndex

__all__ = ["HOST_DRAFTS", "Drafter", "JumpForward", "NGramDrafter", "NoDrafter", "Proposal",
           "stage_drafter"]


@dataclasses.dataclass(frozen=True)
class Proposal:
  """A host proposal for one row."""

  drafts: tuple[int, ...]  # the row's draft ids (len <= K)
  host: bool  # True: these drafts replace the device drafter's for this row
  jump_forward: int = 0  # how many of them the grammar forced


@dataclasses.dataclass(frozen=True, eq=False)
class Drafter:
  """Base drafter: no drafts (ordinary decoding through the same stages, K = 0)."""

  k: int = 0  # drafts per round (K); static shapes use it

  name = "none"
  device = False  # proposes inside the Forward stage
  q_kind = "onehot"  # onehot | sparse | dense: the q the Finish stage receives
  sampling = False  # drafts are sampled from q (masked q applies)

  def __post_init__(self):
    if self.k < 0:
      raise ValueError(f"draft length k={self.k} must be >= 0")

  def row_state(self, prompt_ids: Sequence[int]) -> Any:
    """Per-request host state, created at admission."""
    return None

  def observe(self, row_state: Any, tokens: Sequence[int]) -> None:
    """Committed tokens of the request (after each round's commit)."""

  def host_propose(self, row_state: Any, session: Any, k: int) -> Proposal:
    """The host's drafts for one row (device drafters: usually none, host=False)."""
    return Proposal((), host=not self.device)


@dataclasses.dataclass(frozen=True, eq=False)
class NoDrafter(Drafter):
  """Ordinary decoding: K = 0, one token per round."""

  k: int = 0

  def __post_init__(self):
    if self.k != 0:
      raise ValueError(f"NoDrafter has k=0, got k={self.k}")


@dataclasses.dataclass(frozen=True, eq=False)
class NGramDrafter(Drafter):
  """Prompt lookup / n-gram copy: the continuation of the latest earlier match of the suffix.

  Greedy, so q is one-hot (DESIGN.md section 5).
  """

  k: int = 4
  n: int = 3  # longest n-gram matched (tried first)
  min_n: int = 1  # shortest n-gram matched

  name = "ngram"

  def __post_init__(self):
    super().__post_init__()
    if not 1 <= self.min_n <= self.n:
      raise ValueError(f"n-gram sizes must satisfy 1 <= min_n <= n, got n={self.n} "
                       f"min_n={self.min_n}")

  def row_state(self, prompt_ids):
    index = NGramIndex(self.n, self.min_n)
    index.extend(prompt_ids)
    return index

  def observe(self, row_state, tokens):
    row_state.extend(tokens)

  def host_propose(self, row_state, session, k, extra: Sequence[int] = ()):
    return Proposal(tuple(row_state.propose(k, extra)), host=True)


@dataclasses.dataclass(frozen=True, eq=False)
class JumpForward(Drafter):
  """Grammar jump-forward: tokens the grammar forces become one-hot drafts.

  Alone (`inner=None`) it drafts only forced tokens (none on unconstrained rows). With a
  host inner drafter the inner one continues after the forced tokens; with a device inner
  drafter, rows with forced tokens use them instead of the device proposal this round.
  The target verifies every draft, so the output stays lossless.
  """

  k: int = 4
  inner: Drafter | None = None

  def __post_init__(self):
    super().__post_init__()
    if self.inner is not None and self.inner.k != self.k:
      raise ValueError(f"JumpForward k={self.k} must equal its inner drafter's k={self.inner.k}")
    if isinstance(self.inner, JumpForward):
      raise ValueError("JumpForward cannot wrap another JumpForward")

  @property
  def name(self):  # type: ignore[override]
    return "jump" if self.inner is None else f"jump+{self.inner.name}"

  @property
  def device(self):  # type: ignore[override]
    return self.inner is not None and self.inner.device

  @property
  def q_kind(self):  # type: ignore[override]
    return "onehot" if self.inner is None else self.inner.q_kind

  @property
  def sampling(self):  # type: ignore[override]
    return self.inner is not None and self.inner.sampling

  def row_state(self, prompt_ids):
    return None if self.inner is None else self.inner.row_state(prompt_ids)

  def observe(self, row_state, tokens):
    if self.inner is not None:
      self.inner.observe(row_state, tokens)

  def host_propose(self, row_state, session, k):
    forced = list(session.forced_tokens(k)) if session is not None and k > 0 else []
    forced = forced[:k]
    if self.inner is None:
      return Proposal(tuple(forced), host=True, jump_forward=len(forced))
    if self.inner.device:
      if forced:
        return Proposal(tuple(forced), host=True, jump_forward=len(forced))
      return Proposal((), host=False)
    rest = self.inner.host_propose(row_state, session, k - len(forced), extra=forced).drafts
    return Proposal(tuple(forced) + tuple(rest), host=True, jump_forward=len(forced))

  def __getattr__(self, item):
    # Device hooks (device_propose, init_state, ...) come from the inner drafter.
    inner = object.__getattribute__(self, "inner")
    if inner is None:
      raise AttributeError(item)
    return getattr(inner, item)


HOST_DRAFTS = Drafter()  # the stages' static drafter for every host drafter (one compile)


def stage_drafter(drafter: Drafter) -> Drafter:
  """The static drafter the jitted stages see: host drafters share one (fewer compiles)."""
  return drafter if drafter.device else HOST_DRAFTS
