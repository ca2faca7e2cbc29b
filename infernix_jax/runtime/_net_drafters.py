"""Engine adapters for the drafter networks of `models/drafters` (draft model, MTP, DFlash).

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
  """Draft model, MTP, DFlash or DFlash2 (sparse q) behind the engine's device-drafter hooks.

  The draft model (`models.drafters.DraftModelDrafter`) ignores the hidden states; greedy it
  gives one-hot q, sampling (temperature > 0) the dense q it drew from. It drafts over the
  model's whole logits width: a padding id is simply rejected by the target (ids >= V have
  p = 0), so outputs stay exact.
  """

  k: int = 4
  kind: str = "mtp"  # draft | mtp | dflash | dflash2
  net: Any = None  # the models.drafters object (DraftModelDrafter / MTPDrafter / DFlashDrafter)
  dim: int = 0  # D of the target hidden states (0: the engine's target width)

  @property
  def name(self):  # type: ignore[override]
    return self.kind

  @property
  def q_kind(self):  # type: ignore[override]
    if self.kind == "draft":
      return "dense" if self.net.temperature > 0 else "onehot"
    return "sparse" if self.kind == "dflash2" else "onehot"

  @property
  def sampling(self):  # type: ignore[override]
    return self.kind == "dflash2" or (self.kind == "draft" and self.net.temperature > 0)

  def init_device(self, engine):
    cache = self.net.init_state(engine.b, engine.capacity + 2 * (self.k + 1))
    p = self.k + 1
    dtype = engine.cfg.jnp_dtype
    dim = self.dim or engine.cfg.dim
    state = NetState(cache=cache, tokens=jnp.zeros((engine.b, p), jnp.int32),
                     hidden=jnp.zeros((engine.b, p, dim), dtype),
                     counts=jnp.zeros((engine.b,), jnp.int32))
    return (self.net.state, getattr(self.net, "head", None)), state

  def _call(self, dparams, cache, ctx, keys):
    """-> (ids i32[B, K], q parts: None | (cand_ids, cand_probs) | dense probs, cache)."""
    from infernix_jax.models.drafters import dflash, draft_model, mtp
    state, head = dparams
    if self.kind == "draft":
      ids, probs, cache = draft_model.propose_draft_model(
          self.net.graphdef, state, cache, ctx.tokens, ctx.counts, keys, k=self.k,
          temperature=self.net.temperature, width=self.net.target_width)
      return ids, probs, cache
    if self.kind == "mtp":
      ids, cache = mtp.propose_mtp(self.net.graphdef, state, head, cache, ctx, k=self.k)
      return ids, None, cache
    ids, cand_ids, cand_probs, cache = dflash.propose_dflash(
        self.net.graphdef, state, head, cache, ctx, keys, k=self.k,
        sparse=self.kind == "dflash2", temperature=self.net.temperature)
    return ids, (cand_ids, cand_probs), cache

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
    last = jnp.zeros((b, st.hidden.shape[-1]), st.hidden.dtype)
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
      _, _, cache = self._call(engine.dparams, cache, ctx, keys)
      idx = jnp.asarray(np.maximum(counts - 1, 0))
      last = jnp.where(jnp.asarray(counts > 0)[:, None],
                       jnp.take_along_axis(h, idx[:, None, None], axis=1)[:, 0], 0)
    hid = jnp.zeros_like(st.hidden).at[:, 0].set(last)
    return NetState(cache=cache, tokens=jnp.where(adm[:, None], jnp.asarray(pending), st.tokens),
                    hidden=jnp.where(adm[:, None, None], hid, st.hidden),
                    counts=jnp.where(adm, 1, st.counts))

  def append_rows(self, engine, rows, hidden):
    """Forced tokens appended outside a round (a thinking budget's close) become context.

    The pending context of each row (the last round's committed tokens) and the appended
    tokens c1..c_{m-1} are appended now; c_m stays pending as the anchor.

    Args:
      rows: lane -> appended ids [c1..cm] (the other lanes are untouched).
      hidden: the target's hidden states [B, T, D] of the append over [anchor, c1..c_{m-1}]
        (hidden[b, j] predicted c_{j+1}).
    """
    from infernix_jax.models.drafters import DraftContext
    from infernix_jax.runtime import stages
    st = engine.dstate
    tok_p, hid_p, cnt_p = jax.device_get((st.tokens, st.hidden, st.counts))
    hid = np.asarray(jax.device_get(hidden)).astype(hid_p.dtype)
    b, p = tok_p.shape
    width = stages.bucket(p + max(len(c) for c in rows.values()))
    tokens = np.zeros((b, width), np.int32)  # [B, C]
    feats = np.zeros((b, width, hid_p.shape[-1]), hid_p.dtype)  # [B, C, D]
    counts = np.zeros((b,), np.int32)
    new_tok, new_hid, new_cnt = tok_p.copy(), hid_p.copy(), cnt_p.copy()
    for lane, close in rows.items():
      n0, m = int(cnt_p[lane]), len(close)
      tokens[lane, :n0], feats[lane, :n0] = tok_p[lane, :n0], hid_p[lane, :n0]
      tokens[lane, n0:n0 + m - 1] = close[:-1]
      feats[lane, n0:n0 + m - 1] = hid[lane, :m - 1]
      counts[lane] = n0 + m - 1
      new_tok[lane], new_hid[lane] = 0, 0
      new_tok[lane, 0], new_hid[lane, 0], new_cnt[lane] = close[-1], hid[lane, m - 1], 1
    ctx = DraftContext(tokens=jnp.asarray(tokens), hidden=jnp.asarray(feats),
                       counts=jnp.asarray(counts))
    keys = _keys(jnp.zeros((b,), jnp.uint32), jnp.zeros((b,), jnp.int32), 7)
    _, _, cache = self._call(engine.dparams, st.cache, ctx, keys)
    return NetState(cache=cache, tokens=jnp.asarray(new_tok), hidden=jnp.asarray(new_hid),
                    counts=jnp.asarray(new_cnt))

  def device_propose(self, dparams, dstate, anchor, lengths, host_drafts, use_host, seed,
                     position):
    from infernix_jax.models.drafters import DraftContext
    ctx = DraftContext(tokens=dstate.tokens, hidden=dstate.hidden, counts=dstate.counts)
    keys = _keys(seed, position, 0x0D2F)
    from infernix_jax.runtime import _deps
    ids, parts, cache = self._call(dparams, dstate.cache, ctx, keys)
    if self.q_kind == "sparse":
      q = _deps.sparse_q(*parts)
    elif self.q_kind == "dense":
      q = _deps.dense_q(parts)
    else:
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


def make_draft_model(*, k: int, draft_model, target=None, sampling: bool = False,
                     temperature: float = 1.0) -> NetDrafter:
  """The draft-model drafter (`models.drafters.DraftModelDrafter`) for the engine.

  Args:
    draft_model: (cfg, model) of the draft model (it must share the target's vocabulary).
    target: (cfg, model) of the target or None (then q is as wide as the draft's logits).
    sampling: draw drafts at `temperature` (dense q) instead of greedy (one-hot q).
  """
  from infernix_jax.models import drafters as md
  cfg, model = draft_model
  width = target[0].vocab_size if target is not None else cfg.vocab_size
  net = md.DraftModelDrafter.from_model(model, k=k, temperature=temperature if sampling else 0.0,
                                        target_width=width)
  return NetDrafter(k=k, kind="draft", net=net, dim=target[0].dim if target is not None else 0)


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
