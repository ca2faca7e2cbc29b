"""The round's two host bridges: executors of `_round.run_round`.

`StagesIO` runs host steps in Python between jitted device steps (the draft ids come back
while the verify still runs: async dispatch gives the overlap); `CallbackIO` traces the same
function inside one compiled `lax.while_loop` and reaches the host through `io_callback`.
`HostCallbacks` are the host steps both call, over the engine's `HostState`; `Timeline`
records a stages round's spans for overlap studies.
"""

from __future__ import annotations

import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from infernix_jax import mask_layout
from infernix_jax.pallas import OneHotQ
from infernix_jax.runtime import _placement, _round, _state, _tree
from infernix_jax.runtime import trace as _trace
from infernix_jax.runtime._round import (_JIT, RoundArgs, RoundInputs, RoundStatics,
                                         advance_step, attention_span, automaton_step,
                                         clear_step, logprobs_step, min_tokens_step,
                                         propose_step, run_round, tree_automaton_step,
                                         verify_step)
from infernix_jax.runtime.drafters import Committed, DraftInput, Proposal


class HostCallbacks:
  """The host steps of a round over a `HostState`, as flat tuples of numpy arrays; on the
  callback bridge it also holds a host drafter's state while a compiled loop runs."""

  def __init__(self):
    self.host = None  # the HostState of the engine running now (set before each call)
    self.stop_when = None  # callable() -> bool: leave the compiled loop after this round
    self.drafter = None  # the host drafter proposing inside a compiled loop
    self.draft_state = None  # its state during that loop

  def begin(self, token):
    """Round inputs; `token` (the previous round's stop flag) only orders this callback
    after that round's commit inside the compiled loop."""
    h = self.host
    inp = h.begin(self.seed)
    nodes, rows = h.automaton_rows()
    return RoundInputs(draft=inp, constrained=np.bool_(h.any_constrained()), nodes=nodes,
                       trie_rows=rows, eos_block=h.eos_block())

  def propose(self, inp):
    """A host drafter's proposal inside the compiled loop -> (drafts i32[B, K], n i32[B]),
    and parents i32[B, K] from a tree drafter."""
    prop, self.draft_state = self.drafter.propose(None, self.draft_state, inp)
    out = np.asarray(prop.drafts, np.int32), np.asarray(prop.n, np.int32)
    if self.drafter.tree:
      return (*out, np.asarray(prop.parents, np.int32))
    return out

  def advance(self, tokens, counts):
    """A host drafter learns what the compiled loop's round committed."""
    self.draft_state = self.drafter.advance(None, self.draft_state, Committed(tokens, counts))
    return np.int32(0)

  def clear(self, rows):
    """A host drafter forgets lanes `rows` (bool[B]) that went non-finite in the loop."""
    if np.asarray(rows).any():
      self.draft_state = self.drafter.clear(self.draft_state, np.asarray(rows))
    return np.int32(0)

  def masks(self, drafts, n):
    mask, states, enabled = self.host.masks(drafts, n)
    return mask, np.asarray(states, np.int8), np.asarray(enabled, bool)

  def tree_masks(self, drafts, parents, n, prune, budget):
    drafts, parents, n, mask, states, enabled = self.host.tree_masks(drafts, parents, n, prune,
                                                                     budget)
    return (np.asarray(drafts, np.int32), np.asarray(parents, np.int32), np.asarray(n, np.int32),
            mask, np.asarray(states, np.int8), np.asarray(enabled, bool))

  def bias(self, drafts, n):
    return self.host.bias(drafts, n)

  def commit(self, accepted, tokens, flags, n):
    committed, poisoned = self.host.commit(accepted, tokens, flags, n)
    stop = self.stop_when() if self.stop_when is not None else False
    return committed.tokens, committed.counts, poisoned, np.bool_(stop)


class Timeline:
  """Wall-clock spans of rounds on the `stages` bridge, for overlap studies.

  Each span is (round, name, start, end) in `time.perf_counter` seconds. Names: "begin",
  "commit" (host steps), "wait:<step>" (blocked reading device results before a host step),
  "dispatch:<step>" (launching a device step; with `serial` it also waits for the result,
  so the span is the step's device time), "dispatch:next forward" (a `Prefetch`), "propose"
  (a host drafter), "draft wait", "lookahead", "upload", "wait:round end" (the round's
  device work finishing, a prefetched verify's included).

  Attributes:
    serial: block after every device step (no overlap: the reference for what overlap hides).
    spans: the recorded spans.
  """

  def __init__(self, serial: bool = False):
    self.serial = serial
    self.spans: list[tuple[int, str, float, float]] = []
    self.round = 0

  def add(self, name: str, start: float) -> None:
    self.spans.append((self.round, name, start, time.perf_counter()))


class Prefetch:
  """The next round's forward phase of ordinary decoding (K = 0), dispatched before the host's
  commit so that the device runs it while the host commits (grammar sessions included).

  Every lane that can go on will most likely commit the one token Finish produced. So
  `StagesIO` dispatches the next forward right after Finish with those counts as its waiting
  commit (Finish's tokens as the last committed ones: `_state.settle_lanes`, the commit's own
  rule, with no host read), then commits on the host. When the host's counts are the
  predicted ones, the prefetch's state is the round's committed state, and the next round
  takes its result if its forward is the same call: its state's cache is that round's own (no
  admission, retired lane, forced close or clear in between), the same attention span, no
  drafts. Otherwise the round leaves the host's counts waiting over the prefetch's cache (its
  lengths set back to the ones before: the prefetch only wrote each lane's anchor slot, which
  the next forward writes again). Tokens are the same either way.

  Attributes:
    pending: [counts i32[B], span, logits, hidden, the predicted DecodeState, the committed
      cache it is valid for (None until the host's counts confirm it)] of the dispatched
      forward, or None.
    hits, misses: rounds that took / could not take a pending prefetch.
  """

  def __init__(self):
    self.pending = None
    self.hits = self.misses = 0

  def take(self, cache, drafts, span):
    """The pending (logits, hidden, DecodeState) if a forward of these arguments would equal
    it."""
    p, self.pending = self.pending, None
    if p is None:
      return None
    if not (cache is p[5] and drafts.shape[1] == 0 and span == p[1]):
      self.misses += 1
      return None
    self.hits += 1
    return p[2], p[3], p[4]


class StagesIO:
  """Executes the round in Python: host steps directly, device steps as jitted stages.

  The host's commit waits in the state (`_state.defer`) and the next round's forward phase
  applies it (`_round.forward_step`): a round of a host drafter dispatches its forward and
  its Finish. With a `Prefetch` (ordinary decoding on one device), the commit step first
  dispatches the next round's forward (`Prefetch`)."""

  def __init__(self, steps: HostCallbacks, timeline: Timeline | None = None, placement=None,
               prefetch: Prefetch | None = None):
    self.steps, self.timeline, self.placement = steps, timeline, placement
    self.prefetch = prefetch if placement is None else None
    self._forward = None  # (graphdef, state, taps) of this round's forward
    self._verified = None  # the DecodeState this round's forward produced
    self._next = None  # (counts, lengths before, DecodeState) of a prefetched forward
    self._begin = None  # the host's numpy DraftInput of this round (host drafters)

  def _rows(self, arrays):
    """Host arrays [B, ...] onto the devices (lanes on the mesh's "data" axis)."""
    if self.placement is not None:
      return self.placement.rows(arrays)
    return _placement.host_copies(arrays)

  def span(self, p, cache):
    """The host knows each lane's committed length from the counts its commits returned
    (`HostState.kv_lengths`): attend over a bucketed span, not the whole capacity."""
    return attention_span(self.steps.host.kv_lengths(), p, cache.capacity)

  def settle(self, ds):
    """A waiting commit applied now (one small dispatch, the program the engine's own
    `_state.settle` runs): device and tree drafters start from the committed state."""
    return _state.settle(ds)

  def forward(self, graphdef, state, ds, drafts, span, taps):
    """The forward phase: the waiting commit applied, then the verify (`forward_step`), or a
    prefetched forward that equals it -> (logits, hidden, the round's DecodeState)."""
    self._forward = (graphdef, state, taps)
    if self.prefetch is not None:
      got = self.prefetch.take(ds.cache, drafts, span)
      if got is not None:
        logits, hidden, self._verified = got
        return logits, hidden, dataclasses.replace(self._verified, draft=ds.draft)
    b = ds.anchor.shape[0]
    last, counts = ds.pending if ds.pending is not None else (np.zeros((b, 1), np.int32),
                                                               np.zeros((b,), np.int32))
    logits, hidden, cache, anchor, position, _ = self.device(
        _round.forward_step, graphdef, state, ds.cache, ds.anchor, ds.position, last, counts,
        drafts, span=span, taps=taps)
    self._verified = _state.DecodeState(cache, anchor, position, ds.draft)
    return logits, hidden, self._verified

  def propose(self, drafter, params, state, inp):
    """A device drafter's jitted propose step, or a host drafter's call on numpy inputs.

    A host proposal verifies P' = K' + 1 positions, K' the least verified width that holds
    its longest lane's drafts (`verified_width`: the anchors alone when nobody drafted):
    on CPU a verify over B * P' rows costs far more at P' = K + 1 than at 1."""
    if drafter.on_device:
      return self.device(propose_step, drafter, params, state, inp)
    t0 = time.perf_counter()
    prop, state = drafter.propose(None, state, self._begin)  # numpy: the host's own view
    stats = self.steps.host.stats
    stats["begin_seconds"] += time.perf_counter() - t0
    if self.timeline is not None:
      self.timeline.add("propose", t0)
    parents = None if prop.parents is None else np.asarray(prop.parents, np.int32)
    prop = Proposal(np.asarray(prop.drafts, np.int32), np.asarray(prop.n, np.int32), OneHotQ(),
                    parents)
    width = _round.verified_width(drafter, int(np.max(prop.n, initial=0)))
    if width < prop.drafts.shape[1]:  # padding past a lane's n is never accepted
      stats["narrowed_rounds"] += 1
      stats["anchor_only_rounds"] += width == 0
      prop = dataclasses.replace(prop, drafts=prop.drafts[:, :width],
                                 parents=None if parents is None else parents[:, :width])
    return prop, state

  def traced(self) -> bool:
    return self.steps.host.any_traced()

  def logprobs_top(self) -> int | None:
    return self.steps.host.logprobs_top()

  def logprobs(self, logits, mask, enabled, tokens, params, bias, top, st):
    """The round's logprobs step (device), read back for the commit step's lanes."""
    t0 = time.perf_counter()
    out = self.device(logprobs_step, logits, mask, enabled, tokens, params, bias,
                      vocab_size=st.vocab_size, top=top)
    self.steps.host.round_logprobs = jax.device_get(out)
    self.steps.host.stats["logprobs_seconds"] += time.perf_counter() - t0

  def trace(self, logits, mask, states, enabled, prop, args, inp, bias, st):
    """The round's trace step (device), read back for the traced lanes' records."""
    t0 = time.perf_counter()
    arrays = self.device(_trace.trace_step, logits, mask, states, enabled, prop, args.params,
                         inp.seed, inp.position, bias, vocab_size=st.vocab_size,
                         masked_q=st.masked_q and st.drafter.sampling)
    proposed, n, arrays = jax.device_get((prop.drafts, prop.n, arrays))
    self.steps.host.trace_round(np.asarray(proposed), np.asarray(n), arrays)
    self.steps.host.stats["trace_seconds"] += time.perf_counter() - t0

  def advance(self, drafter, params, state, tokens, counts, hidden):
    if drafter.on_device:
      return self.device(advance_step, drafter, params, state, tokens, counts, hidden)
    tokens, counts = jax.device_get((tokens, counts))
    return drafter.advance(None, state, Committed(tokens, counts))

  def host(self, name, *args):
    if name == "commit" and self.prefetch is not None:
      self._dispatch_next_forward(args[1])
    tl = self.timeline
    if tl is None:
      out = getattr(self.steps, name)(*jax.device_get(args))
    else:
      t0 = time.perf_counter()
      args = jax.device_get(args)
      tl.add(f"wait:{name}", t0)
      t0 = time.perf_counter()
      out = getattr(self.steps, name)(*args)
      tl.add(name, t0)
    if name == "begin":
      self._begin = out.draft
    return out

  def commit(self, ds, tokens, counts):
    """The host's counts (`tokens` [B, P], `counts` [B], numpy) left waiting in the state for
    the next forward phase; with a prefetch, the prefetched state itself when its counts were
    the host's, else the counts waiting over its cache (this round's own was donated to it)."""
    counts = np.asarray(counts, np.int32)
    last = _state.last_committed(tokens, counts)
    if self._next is not None:
      (predicted, before, nxt), self._next = self._next, None
      if np.array_equal(counts, predicted):
        self.prefetch.pending[5] = nxt.cache
        return dataclasses.replace(nxt, draft=ds.draft)
      ds = dataclasses.replace(ds, cache=nxt.cache.with_lengths(before))
    return _state.defer(ds, last, counts)

  def device(self, fn, *args, **static):
    args = self._rows(args)
    tl = self.timeline
    if tl is None:
      return _JIT[fn](*args, **static)
    t0 = time.perf_counter()
    out = _JIT[fn](*args, **static)
    if tl.serial:
      jax.block_until_ready(out)
    tl.add(f"dispatch:{fn.__name__.removesuffix('_step')}", t0)
    return out

  def _dispatch_next_forward(self, tokens):
    """`Prefetch`: the next round's forward, dispatched before the commit reads Finish's
    outputs (nothing is dispatched when no lane can go on, or the round drafted)."""
    v, self._verified = self._verified, None
    h = self.steps.host
    if v is None or self._forward is None or h.k != 0:  # ordinary decoding only
      return
    graphdef, state, taps = self._forward
    active = np.array([x is not None and x.finish is None and x.remaining > 1
                       for x in h.lanes], bool)
    if not active.any():
      return
    counts = active.astype(np.int32)
    span = attention_span(h.kv_lengths() + counts, 1, v.cache.capacity)
    drafts = np.zeros((counts.shape[0], 0), np.int32)
    t0 = time.perf_counter()
    logits, hidden, cache, anchor, position, before = _JIT[_round.forward_step](
        graphdef, state, v.cache, v.anchor, v.position, tokens,
        *_placement.host_copies((counts, drafts)), span=span, taps=taps)
    if self.timeline is not None:
      self.timeline.add("dispatch:next forward", t0)
    nxt = _state.DecodeState(cache, anchor, position, None)
    self.prefetch.pending = [counts, span, logits, hidden, nxt, None]
    self._next = (counts, before, nxt)

  def masks(self, constrained, drafts, n):
    if not constrained:  # no constrained lane: no host wait, no upload, no mask read
      return None, None, None
    tl = self.timeline
    t0 = time.perf_counter()
    drafts, n = jax.device_get((drafts, n))  # waits for the proposal only, not the verify
    self.steps.host.stats["draft_wait_seconds"] += time.perf_counter() - t0
    if tl is not None:
      tl.add("draft wait", t0)
    t0 = time.perf_counter()
    mask, states, enabled = self.steps.masks(drafts, n)
    if tl is not None:
      tl.add("lookahead", t0)
    t0 = time.perf_counter()
    out = _placement.upload((mask, states, enabled), self.placement)  # a transfer, no compile
    if tl is not None:
      if tl.serial:
        jax.block_until_ready(out)
      tl.add("upload", t0)
    return out

  def tree_masks(self, constrained, prop, masked_q, budget):
    """Every node's mask (host walk), illegal nodes pruned under masked q, the best `budget`
    nodes kept, before the verify; (prop, None, None, None) when no lane is host-constrained
    (its first `budget` nodes kept)."""
    if not constrained:
      return _tree.truncate(prop, budget), None, None, None
    t0 = time.perf_counter()
    drafts, parents, n = jax.device_get((prop.drafts, prop.parents, prop.n))
    drafts, parents, n, mask, states, enabled = self.steps.host.tree_masks(drafts, parents, n,
                                                                          masked_q, budget)
    if self.timeline is not None:
      self.timeline.add("lookahead", t0)
    prop = dataclasses.replace(prop, drafts=drafts, parents=parents, n=n)
    return (prop, *_placement.upload((mask, states, enabled), self.placement))

  def tree_automaton(self, auto, nodes, rows, prop, mask, states, enabled):
    if not np.asarray(rows).any():
      return mask, states, enabled
    return self.device(tree_automaton_step, auto, nodes, rows, prop.drafts, prop.parents,
                       prop.n, mask, states, enabled)

  def bias(self, drafts, n):
    """The sampling-law bias; None (nothing uploaded) when every lane samples the local law."""
    if not self.steps.host.any_law():
      return None
    drafts, n = jax.device_get((drafts, n))
    t0 = time.perf_counter()
    out = self.steps.bias(drafts, n)
    if self.timeline is not None:
      self.timeline.add("bias", t0)
    return _placement.upload(out, self.placement)

  def automaton(self, auto, nodes, rows, drafts, n, mask, states, enabled):
    if not np.asarray(rows).any():
      return mask, states, enabled
    return self.device(automaton_step, auto, nodes, rows, drafts, n, mask, states, enabled)

  def min_tokens(self, eos_block, p, mask, states, enabled, st, depth=None):
    """The min_tokens ban; nothing runs (and no mask is built) while no lane needs it."""
    if not np.any(np.asarray(eos_block) > 0):
      return mask, states, enabled
    return self.device(min_tokens_step, mask, states, enabled, eos_block, depth, positions=p,
                       vocab_size=st.vocab_size, eos_ids=st.eos_ids)

  def clear(self, rows, drafter, cache, state):
    rows = np.asarray(rows)
    if not rows.any():
      return cache, state
    if drafter.on_device:
      return self.device(clear_step, drafter, cache, state, rows)
    cache, _ = self.device(clear_step, drafter, cache, None, rows)
    return cache, drafter.clear(state, rows)


def _host_call(fn, shapes, *args, **kwargs):
  """`io_callback(fn, shapes, *args)` with `fn` seeing numpy arrays: io_callback hands the
  host JAX arrays, and host code indexing those compiles small programs on first use."""
  return io_callback(lambda *a: fn(*jax.tree.map(np.asarray, a)), shapes, *args, **kwargs)


class CallbackIO:
  """Traces the round: host steps through `io_callback`, device steps inline."""

  def __init__(self, steps: HostCallbacks, shapes: dict):
    self.steps, self.shapes = steps, shapes

  def span(self, p, cache):
    return None  # traced lengths: one compiled loop attends over the whole capacity

  def settle(self, ds):
    return _state.settle(ds, jit=False)

  def forward(self, graphdef, state, ds, drafts, span, taps):
    """The verify, traced (the loop's commits are applied in their rounds: none waits)."""
    ds = _state.settle(ds, jit=False)
    logits, hidden, cache = verify_step(graphdef, state, ds.cache, None, ds.anchor, drafts,
                                        span=span, taps=taps)
    return logits, hidden, dataclasses.replace(ds, cache=cache)

  def commit(self, ds, tokens, counts):
    """The host's counts applied inside the compiled loop (`_state.commit`, traced)."""
    return _state.commit(ds, tokens, counts, jit=False)

  def traced(self) -> bool:
    return False  # the engine refuses traced requests on this bridge (submit)

  def logprobs_top(self) -> None:
    return None  # the engine refuses logprobs requests on this bridge (submit)

  def propose(self, drafter, params, state, inp):
    """Device drafters inline; host drafters through a callback on the steps' own state
    (traced shapes: the compiled loop always verifies K + 1 positions)."""
    if drafter.on_device:
      return propose_step(drafter, params, state, inp)
    if drafter.tree:
      drafts, n, parents = _host_call(self.steps.propose, self.shapes["propose_tree"], inp,
                                       ordered=True)
      return Proposal(drafts, n, OneHotQ(), parents), state
    drafts, n = _host_call(self.steps.propose, self.shapes["propose"], inp, ordered=True)
    return Proposal(drafts, n, OneHotQ()), state

  def advance(self, drafter, params, state, tokens, counts, hidden):
    if drafter.on_device:
      return advance_step(drafter, params, state, tokens, counts, hidden)
    _host_call(self.steps.advance, self.shapes["advance"], tokens, counts, ordered=True)
    return state

  def host(self, name, *args):
    return _host_call(getattr(self.steps, name), self.shapes[name], *args)

  def device(self, fn, *args, **static):
    return fn(*args, **static)

  def masks(self, constrained, drafts, n):
    shapes = self.shapes["masks"]

    def fill(drafts, n):
      return _host_call(self.steps.masks, shapes, drafts, n)

    def skip(drafts, n):  # nothing crosses when no lane is constrained
      return (jnp.zeros(shapes[0].shape, jnp.int32),
              jnp.full(shapes[1].shape, mask_layout.UNREACHABLE, jnp.int8),
              jnp.zeros(shapes[2].shape, bool))

    return jax.lax.cond(constrained, fill, skip, drafts, n)

  def bias(self, drafts, n):
    return None  # the engine refuses other sampling laws on this bridge (submit)

  def automaton(self, auto, nodes, rows, drafts, n, mask, states, enabled):
    if auto is None:  # no trie lane when the loop started (none can join inside it)
      return mask, states, enabled
    return automaton_step(auto, nodes, rows, drafts, n, mask, states, enabled)

  def min_tokens(self, eos_block, p, mask, states, enabled, st, depth=None):
    """The min_tokens ban, traced (it leaves lanes without a ban unchanged)."""
    if not st.eos_ids:
      return mask, states, enabled
    return min_tokens_step(mask, states, enabled, eos_block, depth, positions=p,
                           vocab_size=st.vocab_size, eos_ids=st.eos_ids)

  def tree_masks(self, constrained, prop, masked_q, budget):
    """Every node's mask through one callback (fixed shapes: pruned nodes leave padding);
    the best `budget` nodes are kept."""
    shapes = self.shapes["tree_masks"]

    def fill(drafts, parents, n):
      return _host_call(functools.partial(self.steps.tree_masks, prune=masked_q,
                                          budget=budget), shapes, drafts, parents, n)

    def skip(drafts, parents, n):
      cut = _tree.truncate(Proposal(drafts, n, None, parents), budget)
      return (cut.drafts, cut.parents, cut.n, jnp.zeros(shapes[3].shape, jnp.int32),
              jnp.full(shapes[4].shape, mask_layout.UNREACHABLE, jnp.int8),
              jnp.zeros(shapes[5].shape, bool))

    drafts, parents, n, mask, states, enabled = jax.lax.cond(constrained, fill, skip,
                                                             prop.drafts, prop.parents, prop.n)
    return dataclasses.replace(prop, drafts=drafts, parents=parents, n=n), mask, states, enabled

  def tree_automaton(self, auto, nodes, rows, prop, mask, states, enabled):
    if auto is None:
      return mask, states, enabled
    return tree_automaton_step(auto, nodes, rows, prop.drafts, prop.parents, prop.n, mask,
                               states, enabled)

  def clear(self, rows, drafter, cache, state):
    if not drafter.on_device:
      _host_call(self.steps.clear, self.shapes["advance"], rows, ordered=True)
    return jax.lax.cond(rows.any(), lambda c, d: clear_step(drafter, c, d, rows),
                        lambda c, d: (c, d), cache, state)


def _shapes(b: int, k: int, w: int, c: int) -> dict:
  """Callback result shapes: B lanes, K drafts, W mask words, C tree candidates (>= K)."""
  i32, s = jnp.int32, jax.ShapeDtypeStruct
  p = k + 1
  lane = s((b,), i32)
  draft = DraftInput(anchor=lane, lengths=lane, seed=s((b,), jnp.uint32), position=lane,
                     limit=lane, forced=s((b, k), i32), n_forced=lane)
  return {
      "begin": RoundInputs(draft=draft, constrained=s((), jnp.bool_), nodes=lane,
                           trie_rows=s((b,), jnp.bool_), eos_block=lane),
      "propose": (s((b, k), i32), lane),
      "propose_tree": (s((b, c), i32), lane, s((b, c), i32)),
      "tree_masks": (s((b, k), i32), s((b, k), i32), lane, s((b, p, w), i32),
                     s((b, p), jnp.int8), s((b,), jnp.bool_)),
      "advance": s((), i32),
      "masks": (s((b, p, w), i32), s((b, p), jnp.int8), s((b,), jnp.bool_)),
      "commit": (s((b, p), i32), s((b,), i32), s((b,), jnp.bool_), s((), jnp.bool_)),
  }


@functools.partial(jax.jit, static_argnames=("io", "st", "rounds"), donate_argnames=("rs",))
def _loop(rs: _state.DecodeState, args: RoundArgs, *, io: CallbackIO, st: RoundStatics,
          rounds: int):
  def body(carry):
    i, stop, rs = carry
    rs, stop = run_round(io, rs, args, stop, st)
    return i + 1, stop, rs

  def cond(carry):
    i, stop, _ = carry
    return (i < rounds) & ~stop

  _, _, rs = jax.lax.while_loop(cond, body, (jnp.int32(0), jnp.bool_(False), rs))
  return rs


_CALLBACK_IO: dict[tuple, CallbackIO] = {}  # per shape; the host is set before each call


def run_stages(host, rs: _state.DecodeState, args: RoundArgs, st: RoundStatics,
               timeline: Timeline | None = None, prefetch: Prefetch | None = None
               ) -> _state.DecodeState:
  """One round on the `stages` bridge (spans recorded into `timeline` when given; the next
  round's forward phase dispatched before the commit with a `Prefetch`)."""
  steps = HostCallbacks()
  steps.host, steps.seed = host, np.asarray(args.seed)
  if timeline is not None and timeline.serial:  # every device step waited for: no overlap
    prefetch = None
  rs, _ = run_round(StagesIO(steps, timeline, st.placement, prefetch), rs, args, None, st)
  if timeline is not None:  # the round ends when its device work (a prefetch's too) is done
    t0 = time.perf_counter()
    jax.block_until_ready(rs)
    timeline.add("wait:round end", t0)
    timeline.round += 1
  return rs


def run_callback(host, rs: _state.DecodeState, args: RoundArgs, st: RoundStatics, rounds: int,
                 stop_when) -> _state.DecodeState:
  """Up to `rounds` rounds in one compiled loop on the `callback` bridge. A host drafter's
  state leaves the traced carry for the loop's duration: its callbacks keep it."""
  key = (st.lanes, st.drafter.k, st.words, st.drafter.candidates)
  io = _CALLBACK_IO.get(key)
  if io is None:
    io = _CALLBACK_IO[key] = CallbackIO(HostCallbacks(), _shapes(*key))
  steps = io.steps
  steps.host, steps.seed, steps.stop_when = host, np.asarray(args.seed), stop_when
  rs = _state.settle(rs)
  on_host = not st.drafter.on_device
  if on_host:
    steps.drafter, steps.draft_state = st.drafter, rs.draft
    rs = dataclasses.replace(rs, draft=None)
  rs = _loop(rs, args, io=io, st=st, rounds=rounds)
  jax.block_until_ready(rs)
  if on_host:
    rs = dataclasses.replace(rs, draft=steps.draft_state)
    steps.drafter = steps.draft_state = None
  return rs
