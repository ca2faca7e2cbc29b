"""Shared engine plumbing of the network drafters (draft model, MTP, block, sparse block).

Axis letters: B lanes, P = K + 1, C context width, T prompt bucket, D target width.

Each wraps a `models.drafters` network behind its one protocol,
`ids, q, cache = net.propose(cache, DraftContext, keys)`: a call appends the context
committed since the previous call, then drafts K tokens (scratch positions, never rolled
back). The drafter state keeps that pending context: after each round it is what the round
committed, with the target's hidden state that predicted each token.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from infernix_jax.models.drafters import DraftContext
from infernix_jax.pallas import OneHotQ
from infernix_jax.runtime.drafters.base import Drafter, OptionError, Proposal

_DRAFT_SALT = 0x0D2F  # the drafters' sampling stream (distinct from the target's)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class NetState:
  """Device state of a network drafter.

  Attributes:
    cache: the network's own cache (its committed context).
    tokens: i32[B, P] pending context (committed, not yet appended to the cache).
    hidden: [B, P, D] the target's hidden state that predicted each pending token.
    counts: i32[B] valid pending entries.
  """

  cache: Any
  tokens: jax.Array
  hidden: jax.Array
  counts: jax.Array


def draft_keys(seed, position, salt: int = _DRAFT_SALT):
  """Per-lane PRNG keys [B] from (seed u32[B], position i32[B]): rows never share a stream."""
  base = jax.random.key(salt)
  return jax.vmap(lambda s, p: jax.random.fold_in(jax.random.fold_in(base, s), p))(
      jnp.asarray(seed).astype(jnp.uint32), jnp.asarray(position, jnp.int32))


def _params_of(net) -> dict:
  """The array-holding fields of a network drafter (traced arguments, never static)."""
  return {f.name: getattr(net, f.name) for f in dataclasses.fields(net)
          if any(isinstance(x, jax.Array) for x in jax.tree.leaves(getattr(net, f.name)))}


@dataclasses.dataclass(frozen=True, eq=False)
class NetDrafter(Drafter):
  """A `models.drafters` network as an on-device drafter (subclasses set name and q)."""

  k: int = 4
  net: Any = None  # the models.drafters object (DraftModelDrafter, MTPDrafter, DFlashDrafter)
  tree: bool = False  # a greedy token tree of k nodes (the network's propose_tree)
  tree_shape: str = "dynamic"  # models.drafters.trees shape: "dynamic" | "topk"
  tree_width: int = 4  # candidate children per node

  on_device = True
  # The q a network drafting at temperature > 0 hands Finish ("sparse" or "dense"); None: the
  # network is greedy whatever its temperature (q one-hot). One rule for every network drafter.
  sampled_q: ClassVar[str | None] = None

  @property
  def q_kind(self):  # type: ignore[override]
    return self.sampled_q if self.sampling else "onehot"

  @property
  def sampling(self):  # type: ignore[override]
    return self.sampled_q is not None and getattr(self.net, "temperature", 0.0) > 0

  def _bound(self, params):
    """The network with `params` (traced or concrete) in place of its own arrays."""
    return dataclasses.replace(self.net, **params)

  def init(self, spec):
    b, p = spec.lanes, self.k + 1
    cache = self.net.init_state(b, spec.capacity + 2 * p)
    state = NetState(cache=cache, tokens=jnp.zeros((b, p), jnp.int32),
                     hidden=jnp.zeros((b, p, spec.dim), spec.dtype),
                     counts=jnp.zeros((b,), jnp.int32))
    return _params_of(self.net), state

  def propose(self, params, state, inp):
    ctx = DraftContext(tokens=state.tokens, hidden=state.hidden, counts=state.counts)
    done = lambda cache: dataclasses.replace(  # noqa: E731
        state, cache=cache, counts=jnp.zeros_like(state.counts))
    limit = jnp.minimum(jnp.asarray(inp.limit, jnp.int32), self.k)
    if self.tree:
      ids, parents, n, cache = self._bound(params).propose_tree(
          state.cache, ctx, limit, width=self.tree_width, shape=self.tree_shape)
      return Proposal(ids.astype(jnp.int32), n.astype(jnp.int32), OneHotQ(), parents), done(
          cache)
    net = self._bound(params)
    keys = draft_keys(inp.seed, inp.position)
    if getattr(net, "conditions_on_forced", False) and inp.forced is not None:
      # behind jump-forward: the network drafts after the forced prefix, conditioned on it
      ids, q, cache = net.propose(state.cache, ctx, keys, jnp.asarray(inp.forced, jnp.int32),
                                  jnp.minimum(jnp.asarray(inp.n_forced, jnp.int32), limit))
    else:
      ids, q, cache = net.propose(state.cache, ctx, keys)
    return Proposal(ids.astype(jnp.int32), limit, q), done(cache)

  def advance(self, params, state, committed):
    return dataclasses.replace(
        state, tokens=jnp.asarray(committed.tokens, jnp.int32),
        hidden=committed.hidden.astype(state.hidden.dtype),
        counts=jnp.asarray(committed.counts, jnp.int32))

  def extend(self, params, state, rows, hidden, reset):
    """See `Drafter.extend`: flushes pending + tokens[:-1] into the cache; tokens[-1] pends."""
    from infernix_jax.runtime import prefill
    tok_p, hid_p, cnt_p = jax.device_get((state.tokens, state.hidden, state.counts))
    hid = None if hidden is None else np.asarray(jax.device_get(hidden)).astype(hid_p.dtype)
    b, p = tok_p.shape
    d = hid_p.shape[-1]
    feeds: dict[int, tuple[list[int], np.ndarray]] = {}
    new_tok, new_hid, new_cnt = tok_p.copy(), hid_p.copy(), cnt_p.copy()
    for lane, tokens in rows.items():
      tokens = [int(t) for t in tokens]
      m = len(tokens)
      if m == 0:
        continue
      pred = np.zeros((m, d), hid_p.dtype)  # pred[j]: the state that predicted tokens[j]
      if hid is not None:
        if reset:
          pred[1:] = hid[lane, :m - 1]
        else:
          pred[:] = hid[lane, :m]
      n0 = 0 if reset else int(cnt_p[lane])
      feed_tok = list(tok_p[lane, :n0]) + tokens[:-1]
      feed_hid = np.concatenate([hid_p[lane, :n0], pred[:-1]], axis=0)
      feeds[lane] = (feed_tok, feed_hid)
      new_tok[lane], new_hid[lane] = 0, 0
      new_tok[lane, 0], new_hid[lane, 0], new_cnt[lane] = tokens[-1], pred[-1], 1
    cache = state.cache
    if reset and rows:
      lanes = np.zeros((b,), bool)
      lanes[list(rows)] = True
      cache = cache.with_lengths(jnp.where(jnp.asarray(lanes), 0, cache.lengths))
    longest = max((len(t) for t, _ in feeds.values()), default=0)
    if longest:
      width = prefill.bucket(longest)
      tokens = np.zeros((b, width), np.int32)  # [B, C]
      feats = np.zeros((b, width, d), hid_p.dtype)  # [B, C, D]
      counts = np.zeros((b,), np.int32)
      for lane, (t, h) in feeds.items():
        tokens[lane, :len(t)], feats[lane, :len(t)], counts[lane] = t, h, len(t)
      ctx = DraftContext(tokens=jnp.asarray(tokens), hidden=jnp.asarray(feats),
                         counts=jnp.asarray(counts))
      cache = _append(self, params, cache, ctx)
    return NetState(cache=cache, tokens=jnp.asarray(new_tok), hidden=jnp.asarray(new_hid),
                    counts=jnp.asarray(new_cnt))

  def clear(self, state, rows):
    from infernix_jax.runtime import prefill
    rows = jnp.asarray(rows)
    return dataclasses.replace(state, cache=prefill.clear_rows(state.cache, rows),
                               hidden=jnp.where(rows[:, None, None], 0, state.hidden))


@functools.partial(jax.jit, static_argnames=("drafter",), donate_argnames=("cache",))
def _append(drafter: NetDrafter, params, cache, ctx):
  """Appends ctx to the network's cache (its drafts are discarded)."""
  b = ctx.tokens.shape[0]
  keys = draft_keys(jnp.zeros((b,), jnp.uint32), jnp.zeros((b,), jnp.int32))
  _, _, cache = drafter._bound(params).propose(cache, ctx, keys)
  return cache


@dataclasses.dataclass(frozen=True)
class TreeOptions:
  """The tree fields of a network drafter's options (mixed into its options class)."""

  tree: bool = False  # a greedy token tree of k nodes instead of a chain of k drafts
  tree_shape: str = "dynamic"  # dynamic: best path score first (EAGLE-2); topk: by depth
  tree_width: int = 4  # candidate children per tree node (the network's top-w)

  def validate_tree(self, greedy: bool) -> None:
    """Raises OptionError naming the first invalid tree field."""
    if not isinstance(self.tree, bool):
      raise OptionError("tree", f"tree={self.tree!r} must be true or false")
    if self.tree and not greedy:
      raise OptionError("tree", "token trees are drafted greedily: drop sampling=true or "
                                "tree=true")
    if self.tree_shape not in ("dynamic", "topk"):
      raise OptionError("tree_shape", f"tree_shape={self.tree_shape!r} must be 'dynamic' or "
                                      f"'topk'")
    if isinstance(self.tree_width, bool) or not isinstance(self.tree_width, int) or not (
        1 <= self.tree_width <= 64):
      raise OptionError("tree_width", f"tree_width={self.tree_width!r} must be an integer in "
                                      f"[1, 64]")

  def tree_fields(self) -> dict:
    """The NetDrafter keyword arguments of these options."""
    return {"tree": self.tree, "tree_shape": self.tree_shape, "tree_width": self.tree_width}
