"""Device drafters: proposals computed inside the Forward stage (draft model, MTP, DFlash).

Axis letters: B lanes, K drafts, Vm logits width, D width, S cache capacity, J candidates.

Each device drafter is a frozen object (static jit argument) with pure, traced hooks:
  device_propose(dparams, dstate, anchor, lengths, host_drafts, use_host, seed, position)
      -> (drafts i32[B, K], n_drafts i32[B], q, dstate)
  device_update(dparams, dstate, hidden [B, P, D], accepted i32[B], tokens i32[B, P])
      -> dstate
and host hooks: init_device(engine) -> (dparams, dstate), prefill_rows(engine, prompts,
hidden) -> dstate (prompts: lane -> ids; hidden: the target prefill's [B, T, D]),
and q conversions for masked q (`q_to_host`, `q_from_host`, ...).
Rows whose drafts come from the host (jump-forward) feed those drafts through the drafter's
own state so it stays consistent with what the target verifies.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from infernix_jax.runtime import _deps
from infernix_jax.runtime.drafters import Drafter

__all__ = ["DraftModelDrafter", "make"]


@dataclasses.dataclass(frozen=True, eq=False)
class _DeviceDrafter(Drafter):
  """Shared plumbing of device drafters."""

  device = True

  def host_rows_one_hot(self, q, host_drafts, use_host):
    """q with the host-drafted rows replaced by one-hot q of their drafts."""
    if self.q_kind == "onehot":
      return q
    if self.q_kind == "dense":
      vm = q.probs.shape[-1]
      oh = jax.nn.one_hot(host_drafts, vm, dtype=q.probs.dtype)  # [B, K, Vm]
      return _deps.dense_q(jnp.where(use_host[:, None, None], oh, q.probs))
    ids = jnp.where(use_host[:, None, None], jnp.full_like(q.ids, -1), q.ids)
    ids = ids.at[:, :, 0].set(jnp.where(use_host[:, None], host_drafts, ids[:, :, 0]))
    probs = jnp.where(use_host[:, None, None], jnp.zeros_like(q.probs), q.probs)
    probs = probs.at[:, :, 0].set(jnp.where(use_host[:, None], 1.0, probs[:, :, 0]))
    return _deps.sparse_q(ids, probs)

  def device_update(self, dparams, dstate, hidden, accepted, tokens):
    return dstate

  def clear_rows(self, dstate, rows):
    """Zeros lanes `rows` (bool[B]) of the drafter's cache after a non-finite failure."""
    from infernix_jax.runtime import stages
    return stages.clear_rows(dstate, rows)

  # Masked-q transfers (sampling drafters only).
  def q_to_host(self, q):
    leaves = jax.device_get(jax.tree.leaves(q))
    return self.q_leaves_to_host(leaves)

  def q_leaves_to_host(self, leaves):
    arrays = [np.array(x, copy=True) for x in leaves]
    if self.q_kind == "dense":
      return ("dense", arrays[0])
    ids, probs = (arrays if arrays[0].dtype.kind == "i" else arrays[::-1])
    return ("sparse", ids, probs)

  def q_host_to_leaves(self, q_host):
    if q_host[0] == "dense":
      return (q_host[1],)
    leaves = jax.tree.leaves(_deps.sparse_q(q_host[1], q_host[2]))
    return tuple(np.asarray(x) for x in leaves)

  def q_from_host(self, q_host):
    if q_host[0] == "dense":
      return _deps.dense_q(jnp.asarray(q_host[1]))
    return _deps.sparse_q(jnp.asarray(q_host[1]), jnp.asarray(q_host[2]))


@dataclasses.dataclass(frozen=True, eq=False)
class DraftModelDrafter(_DeviceDrafter):
  """A smaller model sharing the vocabulary drafts K tokens autoregressively.

  Greedy (`sampling=False`): one-hot q. Sampling: drafts are drawn from
  softmax(logits / temperature) restricted to the tokenizer's V, and q is that dense
  distribution (`DenseQ`), which masked q can restrict to the grammar.

  The draft model keeps its own KV cache (lanes x capacity), committed with the target's
  lengths; it consumes K + 1 tokens a round so every committed position has its keys.
  """

  k: int = 4
  graphdef: Any = None  # the draft model's static graph (nnx.split)
  cfg: Any = None  # its ModelConfig
  params: Any = None  # its parameters (passed to the stages as a traced pytree)
  sampling: bool = False
  temperature: float = 1.0
  vocab_size: int = 0  # V (tokenizer): drafts never exceed it; 0 = the draft's Vm
  seed: int = 0

  name = "draft"

  @property
  def q_kind(self):  # type: ignore[override]
    return "dense" if self.sampling else "onehot"

  def init_device(self, engine):
    return self.params, _deps.kv_cache_init(self.cfg, engine.b, engine.capacity)

  def prefill_rows(self, engine, prompts, hidden):
    """Prefills prompt[:-1] of the admitted lanes into the draft model's cache (batched)."""
    from infernix_jax.runtime import stages
    longest = max(len(p) - 1 for p in prompts.values())
    if longest <= 0:
      return engine.dstate
    tokens = np.zeros((engine.b, stages.bucket(longest)), np.int32)
    counts = np.zeros((engine.b,), np.int32)
    start = engine.host.lengths.copy()
    for b, p in prompts.items():
      tokens[b, :len(p) - 1] = p[:-1]
      counts[b] = len(p) - 1
      start[b] = 0
    cache = engine.dstate.with_lengths(jnp.asarray(start))
    _, cache = stages.prefill_row(self.graphdef, engine.dparams, cache, jnp.asarray(tokens),
                                  jnp.asarray(counts))
    return cache

  def device_propose(self, dparams, dstate, anchor, lengths, host_drafts, use_host, seed,
                     position):
    from flax import nnx
    model = nnx.merge(self.graphdef, dparams)
    b, k = host_drafts.shape
    v = self.vocab_size or self.cfg.vocab_size
    cache = dstate.with_lengths(lengths)
    tok = anchor
    drafts, probs = [], []
    base = jax.random.key(self.seed)
    # Counter-based per-row keys (request seed, logical position): independent across
    # requests and rounds, unchanged when a request moves between lanes.
    row_keys = jax.vmap(lambda s, p: jax.random.fold_in(jax.random.fold_in(base, s), p))(
        seed.astype(jnp.uint32), position)
    for i in range(k + 1):
      hidden, cache = model(tok[:, None], cache)
      cache = cache.with_lengths(cache.lengths + 1)
      if i == k:
        break  # the last step only writes the keys of d_K
      logits = model.logits(hidden[:, 0])[:, :v]  # [B, V]
      if self.sampling:
        p = jax.nn.softmax(logits / self.temperature, axis=-1)
        keys = jax.vmap(lambda kk: jax.random.fold_in(kk, i))(row_keys)
        d = jax.vmap(jax.random.categorical)(keys, logits / self.temperature).astype(jnp.int32)
        probs.append(jnp.pad(p, ((0, 0), (0, self.cfg.vocab_size - v))))
      else:
        d = jnp.argmax(logits, axis=-1).astype(jnp.int32)
      drafts.append(d)
      tok = jnp.where(use_host, host_drafts[:, i], d)  # host rows feed the verified drafts
    drafts = jnp.stack(drafts, axis=1)  # [B, K]
    n = jnp.full((b,), k, jnp.int32)
    q = _deps.dense_q(jnp.stack(probs, axis=1)) if self.sampling else _deps.onehot_q()
    return drafts, n, q, cache


def make(name: str, *, k: int, target=None, draft_model=None, sampling: bool = False,
         seed: int = 0, vocab_size: int = 0) -> Drafter:
  """A device drafter by name ("draft", "mtp", "dflash", "dflash2")."""
  from flax import nnx
  if name == "draft":
    if draft_model is None:
      raise ValueError("the draft-model drafter needs a draft model (cfg, model)")
    cfg, model = draft_model
    if target is not None and target[0].vocab_size != cfg.vocab_size:
      raise ValueError(f"the draft model's vocabulary ({cfg.vocab_size} logits) differs from "
                       f"the target's ({target[0].vocab_size}); a draft model must share it")
    graphdef, params = nnx.split(model)
    return DraftModelDrafter(k=k, graphdef=graphdef, cfg=cfg, params=params,
                             sampling=sampling, seed=seed, vocab_size=vocab_size)
  from infernix_jax.runtime import _net_drafters
  return _net_drafters.make(name, k=k, target=target, seed=seed)
