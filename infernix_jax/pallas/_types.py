"""Public value types of the mask-consuming kernels: sampling parameters, proposal q, flags.

Axis letters (docs/CONTRACTS.md): R rows of a kernel call, B lanes, K drafts, P = K + 1
positions, V tokenizer vocabulary, Vm logits width (>= V), W = ceil(V / 32) mask words,
M history entries per row, J = 16 sparse proposal candidates.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

# Per-row result flags (bit values of ``flags``).
FLAG_DEAD_END = 1    # verification reached a DeadEnd position (no token produced there)
FLAG_NONFINITE = 2   # NaN/+inf among the legal logits, or no legal logit is finite
FLAG_EMPTY = 4       # the legal set is empty

# Purposes of the counter-based random streams (DESIGN.md section 5).
PURPOSE_SAMPLE = 0   # token draws: ordinary sampling, corrections and bonus tokens

SPARSE_Q_WIDTH = 16  # J: candidates of a sparse proposal (DFlash2)


def pack_ids(ids, rows: int, width: int | None = None) -> np.ndarray:
  """Host-side packed bitsets i32[R, Wp] of per-row id lists (-1 ignored), in the mask
  layout (DESIGN.md section 3) over ``width`` ids: Wp = ceil(width / 32).

  Args:
    ids: None, or per row an iterable of token ids (a ragged list or an i32[R, L] array).
    rows: R.
    width: ids covered (ids >= width dropped); None: the largest id + 1 (at least 32).
  """
  if width is None:
    top = [int(np.max(np.asarray(r), initial=-1)) for r in ids] if ids is not None else []
    width = max([31] + top) + 1
  words = np.zeros((rows, -(-width // 32)), np.uint32)
  if ids is not None:
    for r, row in enumerate(ids):
      row = np.asarray(row, np.int64).reshape(-1)
      row = row[(row >= 0) & (row < width)]
      np.bitwise_or.at(words[r], row >> 5, np.uint32(1) << (row & 31).astype(np.uint32))
  return words.view(np.int32)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SamplingParams:
  """Per-row sampling parameters (a pytree of arrays with leading axis R).

  Attributes:
    temperature: f32[R]; 0 means greedy (argmax over the legal set, ties to the smaller id).
    top_k: i32[R]; 0 means off. Chosen over legal tokens only.
    top_p: f32[R]; 1 means off.
    min_p: f32[R]; 0 means off (relative to the most probable legal token).
    presence_penalty: f32[R]; subtracted once from every token in the history.
    frequency_penalty: f32[R]; subtracted ``count`` times.
    history_ids: i32[R, M] token ids of the output so far, -1 padding.
    history_counts: i32[R, M] occurrences of each history id.
    repetition_penalty: f32[R] (> 0; 1 means off): every id in the prompt (``prompt_mask``)
      or the history has its logit divided by it when positive, multiplied when not; applied
      before presence and frequency (vLLM's order).
    prompt_mask: i32[R, Wp] packed prompt ids (the mask layout; ids >= 32 Wp are not in the
      prompt, ids >= Vm ignored); Wp = 0 when no row of the call has a repetition penalty
      (then ``repetition_penalty`` is ignored and nothing is unpacked).
  """
  temperature: jax.Array
  top_k: jax.Array
  top_p: jax.Array
  min_p: jax.Array
  presence_penalty: jax.Array
  frequency_penalty: jax.Array
  history_ids: jax.Array
  history_counts: jax.Array
  repetition_penalty: jax.Array = None
  prompt_mask: jax.Array = None

  def __post_init__(self):  # the two optional fields default to "no repetition penalty"
    if self.repetition_penalty is None:
      object.__setattr__(self, "repetition_penalty",
                         jnp.ones(jnp.shape(self.temperature), jnp.float32))
    if self.prompt_mask is None:
      object.__setattr__(self, "prompt_mask",
                         jnp.zeros(jnp.shape(self.temperature) + (0,), jnp.int32))

  @classmethod
  def create(cls, rows: int, *, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
             presence_penalty=0.0, frequency_penalty=0.0, history_ids=None,
             history_counts=None, repetition_penalty=1.0,
             prompt_ids=None) -> "SamplingParams":
    """Builds parameters for ``rows`` rows, broadcasting scalars.

    Args:
      rows: R.
      temperature, top_k, top_p, min_p, presence_penalty, frequency_penalty: scalars or [R].
      history_ids: i32[R, M] (-1 padding) or None for no history.
      history_counts: i32[R, M]; defaults to 1 for every valid history id.
      repetition_penalty: scalar or [R] (1 = off).
      prompt_ids: i32[R, L] prompt ids (-1 padding) seen by the repetition penalty, or None
        (no prompt); packed into ``prompt_mask`` (``pack_ids``).

    Returns:
      A SamplingParams with every field shaped [R] (history [R, M]).
    """
    f32 = lambda x: jnp.broadcast_to(jnp.asarray(x, jnp.float32), (rows,))
    i32 = lambda x: jnp.broadcast_to(jnp.asarray(x, jnp.int32), (rows,))
    if history_ids is None:
      history_ids = jnp.full((rows, 0), -1, jnp.int32)
    history_ids = jnp.asarray(history_ids, jnp.int32)
    if history_counts is None:
      history_counts = (history_ids >= 0).astype(jnp.int32)
    history_counts = jnp.asarray(history_counts, jnp.int32)
    if history_ids.shape != history_counts.shape or history_ids.shape[0] != rows:
      raise ValueError(f"{history_ids.shape=} and {history_counts.shape=} must both be "
                       f"[{rows}, M]")
    rep = f32(repetition_penalty)
    if not np.any(np.asarray(repetition_penalty) != 1.0):
      prompt_mask = jnp.zeros((rows, 0), jnp.int32)
    else:
      prompt_mask = jnp.asarray(pack_ids(prompt_ids, rows))
    return cls(f32(temperature), i32(top_k), f32(top_p), f32(min_p), f32(presence_penalty),
               f32(frequency_penalty), history_ids, history_counts, rep, prompt_mask)

  @property
  def rows(self) -> int:
    return self.temperature.shape[0]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class OneHotQ:
  """Proposal of a greedy drafter (n-gram, MTP, DFlash, jump-forward): q = one-hot(draft)."""


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SparseQ:
  """Sparse proposal (DFlash2): ids i32[B, K, J] (-1 padding), probs f32[B, K, J]."""
  ids: jax.Array
  probs: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DenseQ:
  """Dense proposal of a sampling draft model: probs f32[B, K, Vm] (possibly grammar-masked)."""
  probs: jax.Array


Proposal = OneHotQ | SparseQ | DenseQ
