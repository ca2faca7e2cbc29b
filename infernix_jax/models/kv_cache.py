"""Explicit key/value cache pytree: fixed capacity per lane, per-row committed lengths."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from infernix_jax.models.config import ModelConfig


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KVCache:
  """Keys and values of every layer for B lanes of capacity S.

  Entries at positions `>= lengths[b]` are scratch: `verify` writes draft keys there and
  the engine commits a prefix by raising `lengths` by the host's committed counts
  (`runtime._state.commit_lanes`), or rolls back by leaving them as they were. Nothing else
  marks an entry valid, so rollback costs nothing.

  Capacity: writes at positions >= S are dropped, so keep S >= the longest committed
  length + P (the verify scratch). Masked entries still enter the attention product with
  weight 0, so a lane whose scratch holds NaN/inf (after a non-finite forward) must be
  zeroed before reuse.

  Attributes:
    k: keys, [L, B, S, G, H].
    v: values, [L, B, S, G, H].
    lengths: committed tokens per row, i32[B].
  """

  k: jax.Array
  v: jax.Array
  lengths: jax.Array

  @classmethod
  def init(cls, cfg: ModelConfig, batch: int, capacity: int, dtype=None) -> "KVCache":
    """An empty cache (all lengths 0).

    Args:
      cfg: the model the cache belongs to (L, G, H).
      batch: B, lanes.
      capacity: S, positions per lane (prompt + generated + K+1 scratch).
      dtype: storage dtype; defaults to the model dtype.
    """
    shape = (cfg.num_layers, batch, capacity, cfg.num_kv_heads, cfg.head_dim)
    dtype = dtype or cfg.jnp_dtype
    return cls(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype),
               lengths=jnp.zeros((batch,), jnp.int32))

  @property
  def batch(self) -> int:
    """B."""
    return self.k.shape[1]

  @property
  def capacity(self) -> int:
    """S."""
    return self.k.shape[2]

  def with_lengths(self, lengths) -> "KVCache":
    """The same buffers with new committed lengths (commit or rollback), i32[B]."""
    lengths = jnp.asarray(lengths, jnp.int32)
    if lengths.shape != self.lengths.shape:
      raise ValueError(f"{lengths.shape=} must equal {self.lengths.shape=}")
    return dataclasses.replace(self, lengths=lengths)
