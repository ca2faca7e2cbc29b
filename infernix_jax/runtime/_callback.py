"""The `callback` bridge: one compiled multi-round loop calling the host through io_callback.

Each round inside `lax.while_loop`: host proposals (callback) -> Forward core -> host masks
(callback, data-dependent on the drafts) -> Finish core -> host commit (callback). The loop
leaves early when a lane frees while requests wait (so they can be admitted) or when no lane
is active. Axis letters as in `stages`.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from infernix_jax.runtime import stages
from infernix_jax.runtime.drafters import stage_drafter


class _Bridge:
  """Host callbacks of the engine running the loop (a static jit argument, by identity)."""

  engine = None

  def begin(self, _token):
    eng = self.engine
    t0 = time.perf_counter()
    eng.host.propose()
    h = eng.host
    out = (h.lengths.copy(), h.anchor.copy(), h.host_drafts.copy(), h.host_n.copy(),
           h.use_host.copy(), eng._positions())
    eng.stats["callback_seconds"] += time.perf_counter() - t0
    return out

  def masks(self, drafts, n_drafts, *q_leaves):
    eng = self.engine
    h = eng.host
    t0 = time.perf_counter()
    drafts, n_drafts = np.asarray(drafts), h.clip(n_drafts)  # thinking budget extents
    q_host = None
    if h.any_constrained():
      if eng.masked_q and eng.drafter.sampling and q_leaves:
        q_host = eng.drafter.q_leaves_to_host(q_leaves)
      drafts, n_drafts, _ = h.fill_masks(drafts, n_drafts, q_host)
      mask, states, enabled = h.mask_buf, h.states, h.enabled
    else:
      h.drop_bonus.fill(False)
      mask = np.zeros_like(h.mask_buf)
      states, enabled = np.full_like(h.states, 2), np.zeros_like(h.enabled)
    q_out = (eng.drafter.q_host_to_leaves(q_host) if q_host is not None
             else tuple(np.asarray(x) for x in q_leaves))
    eng.stats["mask_seconds"] += time.perf_counter() - t0
    return (mask.copy(), states.copy(), enabled.copy(), drafts.astype(np.int32),
            n_drafts.astype(np.int32)) + tuple(q_out)

  def commit(self, accepted, tokens, flags, n_drafts):
    eng = self.engine
    t0 = time.perf_counter()
    finished = eng.host.commit(accepted, tokens, flags, n_drafts)
    freed = bool(finished)
    eng._retire()
    # Penalty histories live in the loop's fixed SamplingParams: rebuild them every round.
    # A forced thinking close is appended outside the loop (the engine's own step).
    stop = ((freed and bool(eng._waiting)) or not eng.host.any_active()
            or eng._penalties_active() or bool(eng.host.closes_due()))
    eng.stats["rounds"] += 1
    eng.stats["callback_seconds"] += time.perf_counter() - t0
    return np.bool_(stop)


@functools.partial(jax.jit, static_argnames=("graphdef", "bridge", "drafter", "rounds",
                                             "vocab_size", "shapes"),
                   donate_argnames=("cache", "dstate"))
def _loop(graphdef, state, cache, dstate, dparams, params, seed, *, bridge, drafter, rounds,
          vocab_size, shapes):
  b, k, p, w = shapes
  i32 = jnp.int32
  begin_shapes = (jax.ShapeDtypeStruct((b,), i32), jax.ShapeDtypeStruct((b,), i32),
                  jax.ShapeDtypeStruct((b, k), i32), jax.ShapeDtypeStruct((b,), i32),
                  jax.ShapeDtypeStruct((b,), jnp.bool_), jax.ShapeDtypeStruct((b,), i32))

  def body(carry):
    i, stop, cache, dstate = carry
    lengths, anchor, hd, hn, uh, position = io_callback(bridge.begin, begin_shapes, stop)
    drafts, n_drafts, q, logits, hidden, cache, dstate = stages.forward_core(
        graphdef, state, cache, lengths, anchor, hd, hn, uh, seed, position, drafter, dparams,
        dstate)
    q_leaves, q_def = jax.tree.flatten(q)
    mask_shapes = (jax.ShapeDtypeStruct((b, p, w), i32), jax.ShapeDtypeStruct((b, p), jnp.int8),
                   jax.ShapeDtypeStruct((b,), jnp.bool_), jax.ShapeDtypeStruct((b, k), i32),
                   jax.ShapeDtypeStruct((b,), i32)) + tuple(
                       jax.ShapeDtypeStruct(x.shape, x.dtype) for x in q_leaves)
    res = io_callback(bridge.masks, mask_shapes, drafts, n_drafts, *q_leaves)
    mask, states, enabled, drafts, n_drafts = res[:5]
    q = jax.tree.unflatten(q_def, list(res[5:]))
    accepted, tokens, flags = stages.finish_core(logits, mask, enabled, states, drafts, n_drafts,
                                                 q, params, seed, position, vocab_size)
    if drafter.device:
      dstate = drafter.device_update(dparams, dstate, hidden, accepted, tokens)
    stop = io_callback(bridge.commit, jax.ShapeDtypeStruct((), jnp.bool_), accepted, tokens,
                       flags, n_drafts)
    return i + 1, stop, cache, dstate

  def cond(carry):
    i, stop, _, _ = carry
    return (i < rounds) & ~stop

  _, _, cache, dstate = jax.lax.while_loop(cond, body, (jnp.int32(0), jnp.bool_(False), cache,
                                                        dstate))
  return cache, dstate


_BRIDGE = _Bridge()


def run_rounds(engine) -> None:
  """Runs up to `engine.callback_rounds` rounds in one compiled call."""
  bridge = _BRIDGE
  bridge.engine = engine  # one loop runs at a time; the singleton keeps compiles shared
  params, seed = engine._sampling()
  t0 = time.perf_counter()
  engine.cache, engine.dstate = _loop(
      engine.graphdef, engine.state, engine.cache, engine.dstate, engine.dparams, params, seed,
      bridge=bridge, drafter=stage_drafter(engine.drafter), rounds=engine.callback_rounds,
      vocab_size=engine.vocab.size,
      shapes=(engine.b, engine.k, engine.k + 1, engine.host.w))
  jax.block_until_ready(engine.cache)
  engine.stats["round_seconds"] += time.perf_counter() - t0
