"""Rounds without the host: up to N rounds of lanes that need no host step, in one dispatch.

A lane needs the host each round when a grammar session fills its masks, a host drafter
proposes for it, or its request asks for per-round host work (logprobs, a trace, another
sampling law, penalties rebuilt from the output, a thinking budget, a min_tokens ban). When no
active lane does, `run` executes `_round.run_round` -- the same round as both bridges --
inside one compiled `lax.while_loop`, with the host's two steps written on the device:

  begin  -> each lane's draft limit from its remaining tokens and draft cap;
  commit -> the tokens each lane keeps (cut after the last produced token, after EOS unless
            the request ignores it, at max_tokens) and its remaining tokens; a lane stops at
            EOS, at max_tokens and on a kernel flag. The counts go into the DecodeState by
            the round's one commit rule (`_state.commit_lanes`), as the host's do.

The loop leaves after N rounds, when no lane is live, or (when requests wait for a lane)
when a lane stops. The host then replays each round's Finish outputs through its ordinary
commit (`HostState.commit`), so results, streaming events, stop strings and errors are the
per-round ones; they only arrive N rounds at a time, and a cancellation takes effect at the
next loop. A stop string ends its request at replay; the rounds the loop ran past it are
dropped. The replay checks that the host kept, round by round, the counts the device
committed for every lane that goes on. Tokens equal N = 1: the loop attends over the span the stages bridge would use for
these rounds (it runs fewer rounds rather than cross a span bucket).

Axis letters (docs/CONTRACTS.md): B lanes, K drafts, P = K + 1 positions, N rounds.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from infernix_jax.pallas import FLAG_NONFINITE, OneHotQ
from infernix_jax.runtime import _bridges, _round
from infernix_jax.runtime.drafters import DraftInput, Proposal


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LoopLanes:
  """Per-lane state the loop carries (what the host's begin and commit read and write).

  Attributes:
    remaining: i32[B] max_tokens minus the output's length (`Lane.remaining`).
    cap: i32[B] drafts a lane may take per round (K, or its request's max_drafts).
    eos_stops: bool[B] EOS ends the lane (False under ignore_eos).
    live: bool[B] the lane decodes (False: free, finished or failed).
  """

  remaining: jax.Array
  cap: jax.Array
  eos_stops: jax.Array
  live: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Record:
  """Finish's outputs of each round the loop ran, for the host's replay.

  Attributes: accepted i32[N, B]; tokens i32[N, B, P]; flags i32[N, B]; n i32[N, B];
  counts i32[N, B] the tokens each lane committed on the device.
  """

  accepted: jax.Array
  tokens: jax.Array
  flags: jax.Array
  n: jax.Array
  counts: jax.Array


class DeviceIO(_bridges.CallbackIO):
  """The round's executor inside the loop: device steps inline, the host's begin and commit
  on the device over `lanes` (set from the loop's carry before each traced round)."""

  def __init__(self, st: _round.RoundStatics, span: int | None, stop_on_finish: bool):
    super().__init__(None, {})
    self.st, self._span, self.stop_on_finish = st, span, stop_on_finish
    self.lanes: LoopLanes | None = None
    self.out = None  # (accepted, tokens, flags, n) of the round traced last
    self.seed = None

  def span(self, p, cache):
    return self._span

  def propose(self, drafter, params, state, inp):
    if drafter.on_device:
      return _round.propose_step(drafter, params, state, inp)
    b = inp.anchor.shape[0]  # K = 0: the anchors alone
    return Proposal(jnp.zeros((b, 0), jnp.int32), jnp.zeros((b,), jnp.int32), OneHotQ()), state

  def advance(self, drafter, params, state, tokens, counts, hidden):
    if drafter.on_device:
      return _round.advance_step(drafter, params, state, tokens, counts, hidden)
    return state

  def masks(self, constrained, drafts, n):
    return None, None, None  # no lane in the loop is host-masked

  def min_tokens(self, eos_block, p, mask, states, enabled, st, depth=None):
    return mask, states, enabled  # no lane in the loop is below its min_tokens

  def clear(self, rows, drafter, cache, state):
    return jax.lax.cond(rows.any(), lambda c, d: _round.clear_step(drafter, c, d, rows),
                        lambda c, d: (c, d), cache, state)

  def host(self, name, *args):
    return getattr(self, f"_{name}")(*args)

  def _begin(self, token):
    x, k = self.lanes, self.st.drafter.k
    b = x.live.shape[0]
    limit = jnp.where(x.live, jnp.clip(jnp.minimum(x.cap, x.remaining - 1), 0, k), 0)
    zeros = jnp.zeros((b,), jnp.int32)  # anchors, lengths, positions: the round's DecodeState
    draft = DraftInput(anchor=zeros, lengths=zeros, seed=self.seed,
                       position=zeros, limit=limit.astype(jnp.int32),
                       forced=jnp.zeros((b, k), jnp.int32), n_forced=zeros)
    return _round.RoundInputs(draft=draft, constrained=jnp.bool_(False), nodes=zeros,
                              trie_rows=jnp.zeros((b,), bool), eos_block=zeros)

  def _commit(self, accepted, tokens, flags, n):
    """`HostState.commit` of lanes without a session, on the device: the counts (the round
    applies them to the DecodeState like the host's)."""
    x = self.lanes
    p = tokens.shape[1]
    idx = jnp.arange(p)[None, :]
    produced = jnp.cumprod(tokens >= 0, axis=1).astype(bool) & (idx <= accepted[:, None])
    count = jnp.sum(produced, axis=1).astype(jnp.int32)
    eos = jnp.isin(tokens, jnp.asarray(self.st.eos_ids or (-1,), jnp.int32))
    eos = eos & produced & x.eos_stops[:, None]
    first_eos = jnp.argmax(eos, axis=1).astype(jnp.int32)
    count = jnp.where(eos.any(axis=1), jnp.minimum(count, first_eos + 1), count)
    count = jnp.minimum(count, x.remaining)
    hit_eos = eos.any(axis=1) & (first_eos < count)
    ok = x.live & (flags == 0) & (count > 0)
    count = jnp.where(ok, count, 0)
    remaining = x.remaining - count
    live = ok & ~hit_eos & (remaining > 0)
    self.lanes = dataclasses.replace(x, remaining=remaining, live=live)
    self.out = (accepted, tokens, flags, n, count)
    out_tokens = jnp.where(idx < count[:, None], tokens, 0)
    poisoned = x.live & ((flags & FLAG_NONFINITE) != 0)
    stopped = x.live & ~live
    stop = ~live.any() | (self.stop_on_finish & stopped.any())
    return out_tokens, count, poisoned, stop


@functools.partial(jax.jit, static_argnames=("st", "rounds", "span", "stop_on_finish"),
                   donate_argnames=("rs",))
def _loop(rs, lanes: LoopLanes, args, limit, *, st, rounds: int, span, stop_on_finish: bool):
  """Up to `limit` (traced, <= `rounds`) rounds -> (rs, lanes, Record, rounds run)."""
  io = DeviceIO(st, span, stop_on_finish)
  io.seed = args.seed
  b, p = st.lanes, st.drafter.k + 1
  zeros = jnp.zeros((rounds, b), jnp.int32)
  rec = Record(accepted=zeros, tokens=jnp.full((rounds, b, p), -1, jnp.int32), flags=zeros,
               n=zeros, counts=zeros)

  def body(carry):
    i, stop, rs, lanes, rec = carry
    io.lanes = lanes
    rs, stop = _round.run_round(io, rs, args, stop, st)
    accepted, tokens, flags, n, counts = io.out
    rec = Record(rec.accepted.at[i].set(accepted), rec.tokens.at[i].set(tokens),
                 rec.flags.at[i].set(flags), rec.n.at[i].set(n), rec.counts.at[i].set(counts))
    return i + 1, stop, rs, io.lanes, rec

  def cond(carry):
    i, stop = carry[:2]
    return (i < limit) & ~stop

  i, _, rs, lanes, rec = jax.lax.while_loop(
      cond, body, (jnp.int32(0), jnp.bool_(False), rs, lanes, rec))
  return rs, lanes, rec, i


def lane_qualifies(lane) -> bool:
  """Whether a lane's rounds need no host step (see the module docstring)."""
  if lane is None or lane.finish is not None:
    return True
  r = lane.request
  s = r.sampling
  return (lane.session is None and lane.tracker is None and lane.law is None
          and lane.trace is None and lane.logprobs is None and lane.error is None
          and not lane.cancelled and len(lane.output) >= r.min_tokens
          and not (s.presence_penalty or s.frequency_penalty or s.repetition_penalty != 1.0))


def drafter_qualifies(drafter) -> bool:
  """Device drafters and ordinary decoding (K = 0) draft without the host; trees do not run
  in the loop."""
  return (drafter.k == 0 or drafter.on_device) and not drafter.tree


def run(host, rs, args, st: _round.RoundStatics, capacity: int, rounds: int,
        stop_on_finish: bool):
  """Up to `rounds` rounds of `host`'s lanes in one dispatch, then the host's replay of each
  round's commit -> (DecodeState, rounds run)."""
  k = st.drafter.k
  p = k + 1
  b = host.b
  live = np.array([x is not None and x.finish is None for x in host.lanes], bool)
  caps = np.array([k if x is None or x.request.max_drafts is None
                   else min(k, x.request.max_drafts) for x in host.lanes], np.int32)
  eos_stops = np.array([x is None or not x.request.ignore_eos for x in host.lanes], bool)
  remaining = np.array([x.remaining if x is not None else 0 for x in host.lanes], np.int32)
  lengths = host.kv_lengths()
  # The span the stages bridge attends over for these lengths; the loop stays inside it
  # (each round adds at most P to a lane's length).
  span = _round.attention_span(lengths, p, capacity)
  fit = ((span if span is not None else capacity) - int(np.max(lengths, initial=0))) // p
  limit = max(1, min(rounds, fit))
  lanes = LoopLanes(remaining=remaining, cap=caps, eos_stops=eos_stops, live=live)
  rs, lanes, rec, n_run = _loop(rs, jax.tree.map(jnp.asarray, lanes), args, jnp.int32(limit),
                                st=st, rounds=rounds, span=span,
                                stop_on_finish=stop_on_finish)
  rec, n_run = jax.device_get((rec, n_run))
  for r in range(int(n_run)):
    committed, _ = host.commit(rec.accepted[r], rec.tokens[r], rec.flags[r], rec.n[r])
    for i, x in enumerate(host.lanes):  # the device's commit and the host's agree
      if x is not None and x.finish is None and committed.counts[i] != rec.counts[r, i]:
        raise RuntimeError(
            f"device rounds: lane {i} committed {int(rec.counts[r, i])} tokens in round {r} "
            f"on the device but {int(committed.counts[i])} on the host")
  return rs, int(n_run)
