"""Grammar jump-forward: tokens the grammar forces become one-hot drafts, around any drafter."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from infernix_jax.pallas import OneHotQ
from infernix_jax.runtime.drafters.base import Drafter, Proposal, one_hot_rows


@dataclasses.dataclass(frozen=True, eq=False)
class JumpForward(Drafter):
  """Forced tokens first (the round computes them from each lane's constraint session).

  Alone (`inner=None`) it drafts only forced tokens (none on unconstrained lanes). Around a
  host drafter, the inner one continues after the forced tokens. Around a device network
  that conditions on them (`conditions_on_forced`: the MTP and EAGLE-3 chains), the network
  feeds the forced tokens as its first drafts and drafts on after them in the same call.
  Around another device drafter (which drafts before the forced tokens are known), the
  forced tokens take the first positions and the inner proposal keeps the positions after
  them (its q there unchanged). Forced positions always carry one-hot q. Around a tree drafter on the host, the forced tokens
  form a chain and the tree hangs off the last one; a device tree (drafted before the forced
  tokens are known) is replaced by the forced chain on lanes that have forced tokens. The
  target verifies every draft, so the output stays lossless.
  """

  k: int = 4
  inner: Drafter | None = None

  uses_forced = True

  def __post_init__(self):
    super().__post_init__()
    if self.inner is not None and self.inner.k != self.k:
      raise ValueError(f"jump-forward k={self.k} must equal its inner drafter's k={self.inner.k}")
    if isinstance(self.inner, JumpForward):
      raise ValueError("jump-forward cannot wrap another jump-forward drafter")

  @property
  def name(self):  # type: ignore[override]
    return "jump" if self.inner is None else f"jump+{self.inner.name}"

  @property
  def on_device(self):  # type: ignore[override]
    return self.inner is not None and self.inner.on_device

  @property
  def q_kind(self):  # type: ignore[override]
    return "onehot" if self.inner is None else self.inner.q_kind

  @property
  def sampling(self):  # type: ignore[override]
    return self.inner is not None and self.inner.sampling

  @property
  def tree(self):  # type: ignore[override]
    return self.inner is not None and self.inner.tree

  @property
  def feature_taps(self):  # type: ignore[override]
    return None if self.inner is None else self.inner.feature_taps

  @property
  def candidates(self):  # type: ignore[override]
    return self.k if self.inner is None else self.inner.candidates

  def init(self, spec):
    return (None, None) if self.inner is None else self.inner.init(spec)

  def propose(self, params, state, inp):
    if self.inner is None:
      n = np.minimum(inp.n_forced, inp.limit).astype(np.int32)
      return Proposal(np.asarray(inp.forced, np.int32), n, OneHotQ()), state
    if not self.inner.on_device:
      n_forced = np.minimum(inp.n_forced, inp.limit)
      rest = dataclasses.replace(inp, limit=inp.limit - n_forced)
      prop, state = self.inner.propose(params, state, rest)
      width = prop.drafts.shape[1]  # K, or a host tree's candidates
      drafts = np.zeros((len(n_forced), width), np.int32)  # [B, K]
      drafts[:, :self.k] = inp.forced
      n = n_forced + prop.n
      parents = None
      if prop.parents is not None:  # the inner tree hangs off the last forced token
        parents = np.broadcast_to(np.arange(-1, width - 1, dtype=np.int32), drafts.shape).copy()
      for b in np.flatnonzero(prop.n):
        f, m = int(n_forced[b]), int(prop.n[b])
        drafts[b, f:f + m] = prop.drafts[b, :m]
        if parents is not None:
          up = np.asarray(prop.parents[b, :m])
          parents[b, f:f + m] = np.where(up >= 0, up + f, f - 1)
      return Proposal(drafts, n.astype(np.int32), prop.q, parents), state
    prop, state = self.inner.propose(params, state, inp)
    n_forced = jnp.minimum(inp.n_forced, inp.limit)  # [B]
    if prop.parents is not None:  # a device tree, drafted before the forced tokens were known:
      # a lane with forced tokens drafts them alone (a chain), the others keep their tree
      has = n_forced > 0
      chain = jnp.broadcast_to(jnp.arange(-1, self.k - 1, dtype=jnp.int32), prop.parents.shape)
      return Proposal(jnp.where(has[:, None], inp.forced, prop.drafts).astype(jnp.int32),
                      jnp.where(has, n_forced, prop.n).astype(jnp.int32), prop.q,
                      jnp.where(has[:, None], chain, prop.parents)), state
    forced = jnp.arange(self.k)[None, :] < n_forced[:, None]  # [B, K]
    drafts = jnp.where(forced, inp.forced, prop.drafts)
    n = jnp.maximum(n_forced, prop.n).astype(jnp.int32)
    return Proposal(drafts, n, one_hot_rows(prop.q, drafts, forced)), state

  def advance(self, params, state, committed):
    return state if self.inner is None else self.inner.advance(params, state, committed)

  def extend(self, params, state, rows, hidden, reset):
    return state if self.inner is None else self.inner.extend(params, state, rows, hidden, reset)

  def clear(self, state, rows):
    return state if self.inner is None else self.inner.clear(state, rows)

  def admit(self, state, keys):
    return state if self.inner is None else self.inner.admit(state, keys)


def build(options, context) -> JumpForward:
  """Jump-forward alone: only the tokens the grammar forces are drafted (`DrafterOptions`)."""
  return JumpForward(k=options.k)
