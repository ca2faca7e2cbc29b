"""Engine adapters for the drafter networks of `models/drafters` (MTP, DFlash, DFlash2).

Axis letters: B lanes, P = K + 1, C prompt bucket, D target width, S capacity.

The networks' protocol (`models/drafters/base.py`): each call appends the context committed
since the previous call (tokens + the target hidden state that predicted each), then drafts.
The engine keeps that pending context in the drafter state: after each round it is the
committed tokens of the round (accepted drafts + correction) with the verify hidden states;
at admission the prompt is appended in one call of its own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from infernix_jax.runtime.device_drafters import _DeviceDrafter


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class NetState:
  """Device state of a network drafter.

  Attributes:
    cache: the network's own cache (context keys/values).
    tokens: i32[B, P] pending context tokens (committed, not yet appended).
    hidden: [B, P, D] target hidden state that predicted each pending token.
    counts: i32[B] valid pending entries.
  """

  cache: Any
  tokens: jax.Array
  hidden: jax.Array
  counts: jax.Array


def _keys(seed, position, salt: int):
  base = jax.random.key(salt)
  return jax.vmap(lambda s, p: jax.random.fold_in(jax.random.fold_in(base, s), p))(
      seed.astype(jnp.uint32), position)


@dataclasses.dataclass(frozen=True, eq=False)
class NetDrafter(_DeviceDrafter):
  """MTP, DFlash or DFlash2 (sparse q) behind the engine's device-drafter hooks."""

  k: int = 4
  kind: str = "mtp"  # mtp | dflash | dflash2
  net: Any = None  # the models.drafters object (MTPDrafter / DFlashDrafter)
  dim: int = 0  # D of the target hidden states

  @property
  def name(self):  # type: ignore[override]
    return self.kind

  @property
  def q_kind(self):  # type: ignore[override]
    return "sparse" if self.kind == "dflash2" else "onehot"

  @property
  def sampling(self):  # type: ignore[override]
    return self.kind == "dflash2"

  def init_device(self, engine):
    cache = self.net.init_state(engine.b, engine.capacity + 2 * (self.k + 1))
    p = self.k + 1
    dtype = engine.cfg.jnp_dtype
    state = NetState(cache=cache, tokens=jnp.zeros((engine.b, p), jnp.int32),
                     hidden=jnp.zeros((engine.b, p, self.dim), dtype),
                     counts=jnp.zeros((engine.b,), jnp.int32))
    return (self.net.state, self.net.head), state

  def _call(self, dparams, cache, ctx, keys):
    from infernix_jax.models.drafters import dflash, mtp
    state, head = dparams
    if self.kind == "mtp":
      ids, cache = mtp.propose_mtp(self.net.graphdef, state, head, cache, ctx, k=self.k)
      return ids, None, None, cache
    return dflash.propose_dflash(self.net.graphdef, state, head, cache, ctx, keys, k=self.k,
                                 sparse=self.kind == "dflash2",
                                 temperature=self.net.temperature)

  def prefill_rows(self, engine, prompts, hidden):
    """Resets the admitted lanes' context and appends prompt[:-1]; prompt[-1] is pending.

    Args:
      prompts: lane -> prompt ids of the lanes admitted now.
      hidden: the target prefill's hidden states [B, T, D] (None when every prompt has one
        token); hidden[b, t] predicted prompt[t + 1].
    """
    from infernix_jax.models.drafters import DraftContext
    st = engine.dstate
    b, p = st.tokens.shape
    admitted = np.zeros((b,), bool)
    counts = np.zeros((b,), np.int32)
    pending = np.zeros((b, p), np.int32)
    for lane, ids in prompts.items():
      admitted[lane] = True
      counts[lane] = len(ids) - 1
      pending[lane, 0] = ids[-1]
    adm = jnp.asarray(admitted)
    cache = st.cache.with_lengths(jnp.where(adm, 0, st.cache.lengths))
    last = jnp.zeros((b, self.dim), st.hidden.dtype)
    if hidden is not None and counts.max() > 0:
      c = hidden.shape[1]
      tokens = np.zeros((b, c), np.int32)
      for lane, ids in prompts.items():
        tokens[lane, :len(ids) - 1] = ids[:-1]
      h = hidden.astype(st.hidden.dtype)
      # Shift right by one: the state that predicted each token (zeros before the first).
      feats = jnp.concatenate([jnp.zeros_like(h[:, :1]), h[:, :-1]], axis=1)  # [B, T, D]
      ctx = DraftContext(tokens=jnp.asarray(tokens), hidden=feats, counts=jnp.asarray(counts))
      keys = _keys(jnp.zeros((b,), jnp.uint32), jnp.zeros((b,), jnp.int32), 7)
      _, _, _, cache = self._call(engine.dparams, cache, ctx, keys)
      idx = jnp.asarray(np.maximum(counts - 1, 0))
      last = jnp.where(jnp.asarray(counts > 0)[:, None],
                       jnp.take_along_axis(h, idx[:, None, None], axis=1)[:, 0], 0)
    hid = jnp.zeros_like(st.hidden).at[:, 0].set(last)
    return NetState(cache=cache, tokens=jnp.where(adm[:, None], jnp.asarray(pending), st.tokens),
                    hidden=jnp.where(adm[:, None, None], hid, st.hidden),
                    counts=jnp.where(adm, 1, st.counts))

  def device_propose(self, dparams, dstate, anchor, lengths, host_drafts, use_host, seed,
                     position):
    from infernix_jax.models.drafters import DraftContext
    ctx = DraftContext(tokens=dstate.tokens, hidden=dstate.hidden, counts=dstate.counts)
    keys = _keys(seed, position, 0x0D2F)
    ids, cand_ids, cand_probs, cache = self._call(dparams, dstate.cache, ctx, keys)
    if self.kind == "dflash2":
      from infernix_jax.runtime import _deps
      q = _deps.sparse_q(cand_ids, cand_probs)
    else:
      from infernix_jax.runtime import _deps
      q = _deps.onehot_q()
    n = jnp.full((ids.shape[0],), self.k, jnp.int32)
    return ids.astype(jnp.int32), n, q, dataclasses.replace(dstate, cache=cache)

  def clear_rows(self, dstate, rows):
    from infernix_jax.runtime import stages
    return dataclasses.replace(dstate, cache=stages.clear_rows(dstate.cache, rows),
                               hidden=jnp.where(rows[:, None, None], 0, dstate.hidden))

  def device_update(self, dparams, dstate, hidden, accepted, tokens):
    """The round's committed tokens (accepted drafts + correction) become pending context."""
    return dataclasses.replace(dstate, tokens=jnp.maximum(tokens, 0).astype(jnp.int32),
                               hidden=hidden.astype(dstate.hidden.dtype),
                               counts=(accepted + 1).astype(jnp.int32))


def make(name: str, *, k: int, target=None, seed: int = 0, temperature: float = 1.0):
  """A network drafter with random weights on the target's embedding and LM head.

  Args:
    name: "mtp", "dflash" or "dflash2".
    target: (cfg, model) of the target (shares its embedding / LM head; width D).
  """
  from flax import nnx

  from infernix_jax.models import drafters as md
  if target is None:
    raise ValueError(f"the {name} drafter needs the target model")
  cfg, model = target
  head = md.TargetHead.from_model(model)
  rngs = nnx.Rngs(seed)
  if name == "mtp":
    net = md.MTPDrafter.create(md.MTPHead(cfg, rngs=rngs), head, k)
  elif name in ("dflash", "dflash2"):
    dcfg = cfg.replace(num_layers=1)
    net = md.DFlashDrafter.create(md.DFlashNet(dcfg, cfg.dim, rngs=rngs), head, k,
                                  sparse=name == "dflash2", temperature=temperature)
  else:
    raise ValueError(f"unknown network drafter {name!r}")
  return NetDrafter(k=k, kind=name, net=net, dim=cfg.dim)
