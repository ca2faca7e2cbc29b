"""The drafter interface: context pytree, target head, and the proposal protocol.

Axis letters: B rows, C context tokens per call, K drafts, D target width, Vm logits width.

Protocol (every drafter):
  dstate = drafter.init_state(batch, capacity)
  ids, q, dstate = drafter.propose(dstate, ctx, keys)   # ids i32[B, K]; q: OneHotQ |
                                                        # SparseQ | DenseQ (infernix_jax.pallas)
The context carries the tokens committed since the previous call (accepted drafts, then the
correction or bonus token; the prompt on the first call), so the last valid one is the
anchor. After `propose`, the drafter's own cache has committed exactly the context; its
draft positions are scratch. Rolling back therefore needs no call at all.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from infernix_jax.models.transformer import Transformer
from infernix_jax.pallas import SPARSE_Q_WIDTH, DenseQ, OneHotQ, SparseQ


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DraftContext:
  """What the engine hands a drafter each round.

  Attributes:
    tokens: i32[B, C] newly committed tokens, right padded; tokens[b, counts[b] - 1] is
      the anchor (committed, not yet run through the target).
    hidden: [B, C, D] target hidden state (last layer, before the final norm) at the
      position *before* each token: the state that predicted tokens[b, c]. From `verify`
      this is hidden[:, :n+1] for [anchor, d1..dn]; from `prefill`, hidden shifted right
      by one (zeros before the first prompt token). Drafters that ignore it (the draft
      model) accept zeros.
    counts: i32[B] valid context entries per row (>= 1 for rows that draft).
  """

  tokens: jax.Array
  hidden: jax.Array
  counts: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TargetHead:
  """The target's token embedding and LM head, shared (never copied into) drafters.

  A head restricted to a draft vocabulary (`restricted`) scores only those target ids: its
  proposals cost Vd columns instead of Vm, and every other id gets -inf.

  Attributes:
    embed: [Vm, D] input embedding.
    lm_head: [D, Vm] output projection (the transposed embedding when tied); [D, Vd], the
      columns of `vocab`, when restricted.
    vocab: i32[Vd] the sorted target ids a restricted head scores (None: all Vm).
  """

  embed: jax.Array
  lm_head: jax.Array
  vocab: jax.Array | None = None

  @classmethod
  def from_model(cls, model: Transformer) -> "TargetHead":
    """Takes the arrays of a target model (no copy)."""
    embed = model.embed[...]
    head = embed.T if model.cfg.tie_embeddings else model.lm_head[...]
    return cls(embed=embed, lm_head=head)

  def restricted(self, vocab) -> "TargetHead":
    """The head over the target ids `vocab` (a sorted int sequence of Vd distinct ids).

    Raises:
      ValueError: ids unsorted, repeated or outside [0, Vm), or the head already restricted.
    """
    ids = np.asarray(vocab)
    vm = self.embed.shape[0]
    if self.vocab is not None:
      raise ValueError("the head is already restricted to a draft vocabulary")
    if (ids.ndim != 1 or not len(ids) or ids[0] < 0 or ids[-1] >= vm
        or np.any(np.diff(ids) <= 0)):
      raise ValueError(f"a draft vocabulary must be sorted distinct target ids in [0, {vm}) "
                       f"(got {len(ids)} ids)")
    ids = jnp.asarray(ids, jnp.int32)
    return TargetHead(embed=self.embed, lm_head=jnp.take(self.lm_head, ids, axis=1), vocab=ids)

  def draft_logits(self, h: jax.Array) -> jax.Array:
    """Normed hidden [..., D] -> f32 logits over the head's own columns [..., Vd or Vm]."""
    return jnp.einsum("...D,DV->...V", h, self.lm_head, preferred_element_type=jnp.float32)

  def logits(self, h: jax.Array) -> jax.Array:
    """Normed hidden [..., D] -> f32 logits [..., Vm] (-inf outside a draft vocabulary)."""
    lg = self.draft_logits(h)
    if self.vocab is None:
      return lg
    full = jnp.full(lg.shape[:-1] + (self.embed.shape[0],), -jnp.inf, jnp.float32)
    return full.at[..., self.vocab].set(lg)

  def draft_index(self, tokens: jax.Array):
    """Target ids [...] -> (column in `draft_logits` i32[...], in the head's vocabulary
    bool[...])."""
    if self.vocab is None:
      return tokens, jnp.ones(tokens.shape, bool)
    col = jnp.clip(jnp.searchsorted(self.vocab, tokens), 0, self.vocab.shape[0] - 1)
    return col.astype(jnp.int32), self.vocab[col] == tokens


class Drafter(Protocol):
  """A network that proposes K tokens per row in one call."""

  k: int

  def init_state(self, batch: int, capacity: int) -> Any:
    """The drafter's own decode state (a pytree), empty."""

  def propose(self, dstate: Any, ctx: DraftContext, keys: jax.Array):
    """Appends the context, then drafts.

    Args:
      dstate: state from `init_state` or the previous `propose`.
      ctx: tokens (and target hidden states) committed since the previous call.
      keys: per-row PRNG keys [B] (used only by sampling drafters).

    Returns:
      (ids i32[B, K], q, dstate).
    """


def last_valid(x: jax.Array, counts: jax.Array) -> jax.Array:
  """x[b, counts[b] - 1] for x [B, C, ...] -> [B, ...]."""
  idx = jnp.maximum(counts - 1, 0).reshape((-1,) + (1,) * (x.ndim - 1))
  return jnp.take_along_axis(x, idx, axis=1)[:, 0]


def choose(logits: jax.Array, temperature: float, keys: jax.Array | None):
  """Greedy or tempered sampling of one token per row.

  Args:
    logits: f32[B, Vm].
    temperature: static; 0 means argmax (ties to the smaller id).
    keys: per-row keys [B] for temperature > 0.

  Returns:
    (ids i32[B], probs f32[B, Vm] the distribution the id was drawn from, or None if greedy).
  """
  if temperature == 0:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32), None
  scaled = logits / temperature
  ids = jax.vmap(jax.random.categorical)(keys, scaled).astype(jnp.int32)
  return ids, jax.nn.softmax(scaled, axis=-1)


def choose_sparse(logits: jax.Array, temperature: float, keys: jax.Array):
  """Draws from the top-J candidates (DFlash2 style) and returns them as the proposal q.

  q is the softmax of logits / temperature restricted to its J most probable ids and
  renormalized: exactly the distribution the id is drawn from.

  Returns:
    (ids i32[B], cand_ids i32[B, J], cand_probs f32[B, J]) with J = SPARSE_Q_WIDTH.
  """
  scaled = logits / max(temperature, 1e-6)
  top_logits, top_ids = jax.lax.top_k(scaled, SPARSE_Q_WIDTH)  # [B, J], sorted descending
  probs = jax.nn.softmax(top_logits, axis=-1)
  pick = jax.vmap(jax.random.categorical)(keys, jnp.log(probs))
  ids = jnp.take_along_axis(top_ids, pick[:, None], axis=1)[:, 0]
  return ids.astype(jnp.int32), top_ids.astype(jnp.int32), probs


def split_keys(keys: jax.Array, k: int) -> jax.Array:
  """Per-row keys [B] -> per-row, per-draft keys [K, B]."""
  return jnp.swapaxes(jax.vmap(lambda key: jax.random.split(key, k))(keys), 0, 1)


__all__ = ["DraftContext", "TargetHead", "Drafter", "OneHotQ", "SparseQ", "DenseQ",
           "last_valid", "choose", "choose_sparse", "split_keys"]
