"""One decode round, written once; the two host bridges execute the same function.

Axis letters (docs/CONTRACTS.md): B lanes, K drafts, P = K + 1 positions, W mask words,
Vm logits width, D model width, T appended tokens.

  begin (host: limits, forced tokens)
  -> propose (the drafter) -> verify (target over [anchor, drafts])
  -> masks (host lookahead, only when a lane is constrained; the min_tokens EOS ban on top)
  -> finish (masked q, masked sampling, acceptance)
  -> trace (only while a lane is traced: `runtime.trace`) -> logprobs (only while a lane
  asks for them) -> commit (host protocol)
  -> advance (the drafter: what was really committed) -> clear lanes that went non-finite

This module is the only caller of drafter hooks (`init`, `propose`, `advance`, `extend`,
`clear`). Where a drafter runs is its capability (`Drafter.on_device`) and this module's
business: host drafters are called with numpy arrays (on the callback bridge through
`io_callback`), device drafters are traced into the device steps. `_state.DecodeState` is
the one owner of what the device carries across rounds (the cache with its lengths, anchors,
output positions, the drafter's state); the host's commit returns per-lane counts and
`io.commit` applies them to it (`_state.commit_lanes`, the same rule on every executor).

`run_round` takes an executor (`_bridges`): `StagesIO` runs host steps in Python between
jitted device steps, `CallbackIO` traces the same function inside one compiled
`lax.while_loop` and reaches the host through `io_callback`, and `_device_loop.DeviceIO`
runs host-free rounds with the host's begin and commit on the device. Only small arrays
cross: draft ids in, masks and committed tokens out; q and logits stay on the device.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from infernix_jax.runtime import _deps, _masked_q, _min_tokens, _state, _tree
from infernix_jax.runtime import trace as _trace
from infernix_jax.runtime.drafters import Committed, DraftInput


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RoundArgs:
  """Traced inputs that stay fixed for a round (or a compiled loop of rounds).

  Attributes:
    state: the target's parameters (from `nnx.split`).
    dparams: the device drafter's parameters (None for host drafters).
    params: pallas SamplingParams per lane; seed: u32[B] request seeds.
    automaton: the trie lanes' device automaton, or None.
  """

  state: Any
  dparams: Any
  params: Any
  seed: Any
  automaton: Any = None  # DeviceAutomaton of the trie lanes (device_automaton option)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RoundInputs:
  """What the host's `begin` step hands the device each round (one pytree).

  Attributes:
    draft: the drafter's DraftInput (seed, limit, forced tokens; its anchor, lengths and
      position are the host's view, which the round replaces by the DecodeState's).
    constrained: bool[] some lane needs host lookahead masks this round.
    nodes: i32[B] trie lanes' states in the device automaton; trie_rows: bool[B] those lanes.
    eos_block: i32[B] positions from the round's first at which EOS is illegal (min_tokens).
  """

  draft: DraftInput
  constrained: Any
  nodes: Any
  trie_rows: Any
  eos_block: Any


@dataclasses.dataclass(frozen=True)
class RoundStatics:
  """Static facts of the compiled round (hashable: jit static argument)."""

  graphdef: Any
  drafter: Any
  vocab_size: int
  masked_q: bool
  lanes: int
  words: int  # W
  device_automaton: bool = False  # trie lanes take their masks from the device automaton
  drop_illegal: bool = False  # the wrong acceptance rule (exactness study only)
  placement: Any = None  # _placement.Placement of a mesh: where stages put host inputs
  eos_ids: tuple = ()  # the vocabulary's EOS ids (min_tokens bans them)


# --- device steps (pure; jitted one by one by StagesIO, inlined by CallbackIO) --------------
def propose_step(drafter, dparams, dstate, inp):
  """The device drafter's proposal -> (Proposal, dstate)."""
  return drafter.propose(dparams, dstate, inp)


def verify_step(graphdef, state, cache, lengths, anchor, drafts, span=None, taps=None):
  """The target over [anchor, drafts] at each lane's committed length -> (logits [B, P, Vm],
  hidden [B, P, D] (D * len(taps): the drafter's `feature_taps`), cache); attention reads
  the first `span` cache positions (None: all). `lengths` None: the cache's own (the round
  passes none: the cache is donated, so its lengths cannot also be a separate argument)."""
  if lengths is not None:
    cache = cache.with_lengths(lengths)
  tokens = jnp.concatenate([anchor[:, None], drafts], axis=1)  # [B, P]
  return _deps.verify(graphdef, state, cache, tokens, span=span, taps=taps)


def forward_step(graphdef, state, cache, anchor, position, last, counts, drafts, span=None,
                 taps=None):
  """The forward phase of a stages round: the previous round's commit, waiting in the state
  (last i32[B, 1], counts i32[B]: `_state.settle_lanes`; zero counts when none waits),
  applied, then the target over [anchor, drafts] at the committed lengths.

  Returns:
    (logits [B, P, Vm], hidden [B, P, D] (`verify_step`'s taps), cache (the committed
    lengths), anchor i32[B], position i32[B], lengths i32[B] before the commit: the cache is
    donated, and a prefetched forward that guessed the counts wrong starts over from them).
  """
  before = cache.lengths
  lengths, anchor, position = _state.settle_lanes(before, anchor, position, last, counts)
  logits, hidden, cache = verify_step(graphdef, state, cache.with_lengths(lengths), None,
                                      anchor, drafts, span=span, taps=taps)
  return logits, hidden, cache, anchor, position, before


SPAN_STEP = 512  # attention spans are multiples of this (few compiles, short attention)


def attention_span(lengths, p: int, capacity: int) -> int | None:
  """The cache positions a verify must attend over: max(lengths) + P rounded up to a multiple
  of SPAN_STEP; None (the whole capacity) when that reaches it."""
  need = -(-(int(np.max(lengths)) + p) // SPAN_STEP) * SPAN_STEP
  return None if need >= capacity else need


def finish_step(logits, mask, states, enabled, prop, params, seed, position, bias=None, *,
                vocab_size, masked_q, drop_illegal=False):
  """Masked q (sampling drafters), then masked sampling + acceptance with the real q
  (`drop_illegal`: the wrong rule of `_masked_q.drop_illegal`, for the exactness study).

  `bias` (f32[B, P, Vm] or None) is added to the logits first: lanes under another sampling
  law (`faithful`) are verified against that law's p* with the same acceptance and residual
  rule; zero rows leave a lane's logits unchanged, and None (no such lane) compiles the step
  without it.

  Returns:
    (accepted i32[B], tokens i32[B, P], flags i32[B], n_drafts i32[B]) -- n_drafts after
    masked-q redraws.
  """
  drafts, n, q = prop.drafts, prop.n, prop.q
  if bias is not None:
    logits = logits + bias  # [B, P, Vm]
  if mask is not None and masked_q:
    q, drafts, n, states = _masked_q.apply(q, mask, enabled, states, drafts, n, seed, position,
                                           vocab_size)
  if mask is not None and drop_illegal:
    n = _masked_q.drop_illegal(mask, enabled, states, drafts, n, vocab_size)
  out = _deps.spec_accept(logits, mask, enabled, states, drafts, n, q, params, seed, position,
                          vocab_size=vocab_size)
  return out.accepted, out.tokens, out.flags, n


def min_tokens_step(mask, states, enabled, eos_block, depth=None, *, positions, vocab_size,
                    eos_ids):
  """EOS out of the legal sets of lanes below their min_tokens (`_min_tokens.apply`); `depth`
  i32[B, P]: each position's output offset in a tree round (None: a chain's 0 .. P - 1)."""
  return _min_tokens.apply(mask, states, enabled, eos_block, depth, positions=positions,
                           vocab_size=vocab_size, eos_ids=eos_ids)


def tree_verify_step(graphdef, state, cache, lengths, anchor, drafts, parents, n, span=None,
                     taps=None):
  """The target over a draft tree's positions [anchor, nodes] in one tree-attention call ->
  (logits [B, P, Vm], hidden [B, P, D] (`verify_step`'s taps), cache with node t's K/V in
  slot lengths + t); `lengths` None: the cache's own."""
  if lengths is not None:
    cache = cache.with_lengths(lengths)
  tokens = jnp.concatenate([anchor[:, None], drafts], axis=1)  # [B, P]
  return _deps.verify(graphdef, state, cache, tokens, span=span,
                      tree=_tree.tree_shape(parents, n), taps=taps)


def tree_finish_step(logits, mask, states, enabled, prop, params, seed, position, cache,
                     lengths, hidden, *, vocab_size):
  """Acceptance over the tree (`pallas.tree_accept`), then the accepted path's K/V moved to
  the chain's slots.

  Returns:
    (accepted i32[B], tokens i32[B, P], flags i32[B], rows i32[B, P] (the positions whose
    outputs produced tokens: `_tree.chain_rows`), hidden [B, P, D] at those rows, cache).
    `lengths` None: the cache's own.
  """
  lengths = cache.lengths if lengths is None else lengths
  b, p = logits.shape[:2]
  parents = _tree.positions_parents(prop.parents, prop.n)
  tokens = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), prop.drafts.astype(jnp.int32)], 1)
  out = _deps.tree_accept(logits, mask, enabled, states, tokens, parents, prop.n + 1, params,
                          seed, position, vocab_size)
  rows = _tree.chain_rows(out.path, out.accepted)
  cache = _tree.compact(cache, lengths, out.path, out.accepted)
  return out.accepted, out.tokens, out.flags, rows, _tree.gather_rows(hidden, rows), cache


def logprobs_step(logits, mask, enabled, tokens, params, bias=None, *, vocab_size, top):
  """Log-probabilities of the round's produced tokens (`pallas.token_logprobs_reference`)
  under the p Finish sampled from (the sampling-law bias added like Finish adds it)."""
  if bias is not None:
    logits = logits + bias
  return _deps.token_logprobs(logits, mask, enabled, tokens, params, vocab_size, top)


def automaton_step(auto, nodes, rows, drafts, n, mask, states, enabled):
  """Masks of the trie lanes `rows` (bool[B]) from the device automaton, merged with the host
  masks of the other lanes (mask None: no host-masked lane)."""
  from infernix_jax.runtime import device_automaton
  dmask, dstates, _ = device_automaton.lookahead(auto, nodes, drafts, n)  # [B, P, W], [B, P]
  if mask is None:
    return dmask, dstates, rows
  return (jnp.where(rows[:, None, None], dmask, mask), jnp.where(rows[:, None], dstates, states),
          enabled | rows)


def tree_automaton_step(auto, nodes, rows, drafts, parents, n, mask, states, enabled):
  """`automaton_step` for a draft tree: the trie lanes' node masks from the device automaton
  walking each node's root path."""
  from infernix_jax.runtime import device_automaton
  dmask, dstates = device_automaton.tree_lookahead(auto, nodes, drafts, parents, n)
  if mask is None:
    return dmask, dstates, rows
  return (jnp.where(rows[:, None, None], dmask, mask), jnp.where(rows[:, None], dstates, states),
          enabled | rows)


def advance_step(drafter, dparams, dstate, tokens, counts, hidden):
  """The device drafter learns what each lane really committed."""
  return drafter.advance(dparams, dstate, Committed(tokens, counts, hidden))


def clear_step(drafter, cache, dstate, rows):
  """Zeros the KV rows (and a device drafter's rows) of lanes `rows` (bool[B]) that went
  non-finite: attention multiplies masked positions by 0, and 0 * NaN would poison the next
  request."""
  keep = ~rows[None, :, None, None, None]
  cache = dataclasses.replace(cache, k=jnp.where(keep, cache.k, 0),
                              v=jnp.where(keep, cache.v, 0))
  return cache, drafter.clear(dstate, rows) if drafter.on_device else dstate


_JIT = {
    propose_step: jax.jit(propose_step, static_argnames=("drafter",),
                          donate_argnames=("dstate",)),
    verify_step: jax.jit(verify_step, static_argnames=("graphdef", "span", "taps"),
                         donate_argnames=("cache",)),
    forward_step: jax.jit(forward_step, static_argnames=("graphdef", "span", "taps"),
                          donate_argnames=("cache",)),
    finish_step: jax.jit(finish_step, static_argnames=("vocab_size", "masked_q", "drop_illegal")),
    automaton_step: jax.jit(automaton_step),
    tree_automaton_step: jax.jit(tree_automaton_step),
    logprobs_step: jax.jit(logprobs_step, static_argnames=("vocab_size", "top")),
    min_tokens_step: jax.jit(min_tokens_step,
                             static_argnames=("positions", "vocab_size", "eos_ids")),
    tree_verify_step: jax.jit(tree_verify_step, static_argnames=("graphdef", "span", "taps"),
                              donate_argnames=("cache",)),
    tree_finish_step: jax.jit(tree_finish_step, static_argnames=("vocab_size",),
                              donate_argnames=("cache",)),
    _tree.gather_rows: jax.jit(_tree.gather_rows),
    advance_step: jax.jit(advance_step, static_argnames=("drafter",),
                          donate_argnames=("dstate",)),
    clear_step: jax.jit(clear_step, static_argnames=("drafter",),
                        donate_argnames=("cache", "dstate")),
    _trace.trace_step: jax.jit(_trace.trace_step,
                               static_argnames=("vocab_size", "masked_q", "top")),
}


# --- the round -------------------------------------------------------------------------------
def _draft_input(ds: _state.DecodeState, inp: RoundInputs) -> DraftInput:
  """The drafter's input: the host's limits and forced tokens, the device's anchors, lengths
  and positions."""
  return dataclasses.replace(inp.draft, anchor=ds.anchor, lengths=ds.cache.lengths,
                             position=ds.position)


def run_round(io, ds: _state.DecodeState, args: RoundArgs, token, st: RoundStatics):
  """One round over every lane -> (DecodeState, stop flag from the host's commit step)."""
  drafter = st.drafter
  inp = io.host("begin", token)
  if drafter.on_device or drafter.tree:  # they propose (or compact) from the committed state
    ds = io.settle(ds)
  dinp = _draft_input(ds, inp)
  prop, draft = io.propose(drafter, args.dparams, ds.draft, dinp)
  if drafter.tree:
    return _tree_round(io, ds, args, st, inp, dinp, prop, draft)
  logits, hidden, ds = io.forward(st.graphdef, args.state, ds, prop.drafts,
                                  span=io.span(prop.drafts.shape[1] + 1, ds.cache),
                                  taps=drafter.feature_taps)
  dinp = _draft_input(ds, inp)  # a host drafter's round settled the last commit just now
  mask, states, enabled = io.masks(inp.constrained, prop.drafts, prop.n)
  if st.device_automaton:
    mask, states, enabled = io.automaton(args.automaton, inp.nodes, inp.trie_rows, prop.drafts,
                                         prop.n, mask, states, enabled)
  mask, states, enabled = io.min_tokens(inp.eos_block, prop.drafts.shape[1] + 1, mask, states,
                                        enabled, st)
  bias = io.bias(prop.drafts, prop.n)
  accepted, tokens, flags, n = io.device(
      finish_step, logits, mask, states, enabled, prop, args.params, dinp.seed,
      dinp.position, bias, vocab_size=st.vocab_size, masked_q=st.masked_q and drafter.sampling,
      drop_illegal=st.drop_illegal)
  if io.traced():  # a Python bool: untraced rounds never reach the trace step
    io.trace(logits, mask, states, enabled, prop, args, dinp, bias, st)
  top = io.logprobs_top()  # None (a Python value) while no lane asks for logprobs
  if top is not None:
    io.logprobs(logits, mask, enabled, tokens, args.params, bias, top, st)
  return _commit(io, ds, args, st, draft, hidden, accepted, tokens, flags, n)


def _commit(io, ds, args, st, draft, hidden, accepted, tokens, flags, n):
  """The host's commit (per-lane counts) into the state (`ds`: the round's, its cache the
  verified one): applied on the device, or left waiting for the next forward phase; the
  drafter learns it; lanes that went non-finite are cleared."""
  out_tokens, counts, poisoned, stop = io.host("commit", accepted, tokens, flags, n)
  ds = io.commit(ds, out_tokens, counts)
  draft = io.advance(st.drafter, args.dparams, draft, out_tokens, counts, hidden)
  cache, draft = io.clear(poisoned, st.drafter, ds.cache, draft)
  return dataclasses.replace(ds, cache=cache, draft=draft), stop


def _tree_round(io, ds: _state.DecodeState, args: RoundArgs, st: RoundStatics, inp, dinp,
                prop, draft):
  """The round of a tree drafter: masks for every node (the grammar's walk of the tree, which
  prunes illegal nodes under masked q) before one tree verify, acceptance over the tree, and
  the accepted path's K/V kept. The trace and other sampling laws refuse tree drafters."""
  prop, mask, states, enabled = io.tree_masks(inp.constrained, prop, st.masked_q,
                                              st.drafter.k)
  p = prop.drafts.shape[1] + 1
  if st.device_automaton:
    mask, states, enabled = io.tree_automaton(args.automaton, inp.nodes, inp.trie_rows, prop,
                                              mask, states, enabled)
  depth = io.device(_tree_depth, prop.parents, prop.n)
  mask, states, enabled = io.min_tokens(inp.eos_block, p, mask, states, enabled, st, depth)
  logits, hidden, cache = io.device(tree_verify_step, st.graphdef, args.state, ds.cache,
                                    None, ds.anchor, prop.drafts, prop.parents,
                                    prop.n, span=io.span(p, ds.cache),
                                    taps=st.drafter.feature_taps)
  accepted, tokens, flags, rows, hidden, cache = io.device(
      tree_finish_step, logits, mask, states, enabled, prop, args.params, dinp.seed,
      dinp.position, cache, None, hidden, vocab_size=st.vocab_size)
  top = io.logprobs_top()
  if top is not None:  # the produced tokens' distributions: the rows of their positions
    chain_logits = io.device(_tree.gather_rows, logits, rows)
    chain_mask = None if mask is None else io.device(_tree.gather_rows, mask, rows)
    io.logprobs(chain_logits, chain_mask, enabled, tokens, args.params, None, top, st)
  ds = dataclasses.replace(ds, cache=cache)
  return _commit(io, ds, args, st, draft, hidden, accepted, tokens, flags, prop.n)


def _tree_depth(parents, n):
  """i32[B, P] output offset of each tree position (the anchor's 0, a node's its depth)."""
  return _tree.tree_shape(parents, n)[0]


_JIT[_tree_depth] = jax.jit(_tree_depth)


# --- drafter hooks outside a round -----------------------------------------------------------
def init_drafter(drafter, spec, placement):
  """(params, state) of the drafter for `spec.lanes` empty lanes; a device drafter's arrays
  are placed on the engine's devices (`_placement`), a host drafter's state stays Python."""
  params, state = drafter.init(spec)
  if drafter.on_device:
    params, state = placement.drafter(params, state)
  return params, state


def extend_drafter(drafter, params, ds: _state.DecodeState, rows, hidden,
                   reset: bool) -> _state.DecodeState:
  """The drafter learns tokens committed outside a round: prompts at admission (reset=True)
  or a forced thinking close (appended), with the prefill's hidden states [B, T, D]."""
  return dataclasses.replace(ds, draft=drafter.extend(params, ds.draft, rows, hidden, reset))


# The verified widths below K of a host drafter's stages round (K itself is always one). A
# host proposal is padded up to the next of them (`verified_width`), each lane keeping its
# real draft count n, so a padding position is never accepted and tokens do not depend on
# this choice. Each width compiles its own verify per attention span and its own Finish, so
# fewer widths compile fewer programs and verify more padding. Anchor-only rounds (no lane
# drafted: frequent for n-gram drafts) keep their one position. Measured on the main job
# (SmolLM2, n-gram + jump-forward, K = 4, 1 lane, capacity 2048: 4 spans;
# `benchmarks/warmup_programs.py`), warm-up programs (widths x (4 verifies + 2 Finish) + 1
# prefill) and decode tokens/s relative to every width 0 .. K (medians of 3 interleaved runs
# on a loaded 2-core CPU, so about +-10% noise): 0 .. K: 31 programs, 1.00x; {0, 1, K}: 19,
# 0.93x; {0, K}: 13, 0.86x; {K}: 7, 0.62x. {0, K} is the one that keeps warm-up within 16
# programs without paying K + 1 positions in rounds nobody drafted.
NARROW_WIDTHS = (0,)


def verified_widths(drafter) -> tuple[int, ...]:
  """The draft widths K' a stages round may verify: a device drafter always proposes K; a
  host proposal is padded to the next of `NARROW_WIDTHS` and K."""
  if drafter.on_device:
    return (drafter.k,)
  return tuple(sorted({w for w in NARROW_WIDTHS if w < drafter.k} | {drafter.k}))


def verified_width(drafter, width: int) -> int:
  """The width a host proposal whose longest lane drafted `width` is verified at: the least
  of `verified_widths` >= width (a tree drafter's overdraft beyond K keeps `width`: its
  round keeps the best K nodes after the grammar's walk)."""
  return next((w for w in verified_widths(drafter) if w >= width), width)


def finish_compiles_with_proposal(drafter) -> bool:
  """Whether Finish compiles for a drafter's own q type on its first round (device drafters
  produce their q in the round) rather than on one-hot q at warmup."""
  return bool(drafter.on_device)
