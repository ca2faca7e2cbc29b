"""Engine warm-up: the round written once (`_round.run_round`), run on idle lanes down each of
its branches, so every device step compiles with the arguments a real round passes it.

Axis letters (docs/CONTRACTS.md): B lanes, K drafts, P = K' + 1 verified positions.

A round's shapes are set by a few facts, each a branch here: the verified width K' (host
drafters pad their proposal to the next of `_round.verified_widths`, the anchors alone or K;
device drafters always verify K), the attention span (a multiple of `_round.SPAN_STEP`),
whether some lane is constrained (masks uploaded) and, when asked, whether some lane is below
its min_tokens (the EOS ban). Idle lanes commit nothing, so the host state is unchanged; host
stats are restored.
"""

from __future__ import annotations

import collections
import dataclasses

import jax
import numpy as np

from infernix_jax.pallas import OneHotQ
from infernix_jax.runtime import _bridges, _placement, _round, _state
from infernix_jax.runtime.drafters import Proposal

__all__ = ["WarmIO", "warm_callback", "warm_rounds"]


class WarmIO(_bridges.StagesIO):
  """The stages bridge steered down one branch of the round on idle lanes.

  Args:
    steps: the engine's `_bridges.HostCallbacks` (host and seed set).
    placement: the engine's mesh placement, or None (one device).
    width: K', the drafts a host drafter's proposal holds (a device drafter proposes K).
    span: the attention span of the verify (None: the whole capacity).
    masked: every lane counts as constrained: the host fills (empty) masks and uploads them.
    min_tokens: every lane is below its min_tokens: the EOS-ban step runs.
    trace: the trace step runs (as while a lane is traced).
    law: a (zero) sampling-law bias is uploaded (as while a lane samples another law).
  """

  def __init__(self, steps, placement, *, width: int, span: int | None, masked: bool,
               min_tokens: bool, trace: bool = False, law: bool = False):
    super().__init__(steps, None, placement)
    self.width, self._span, self.masked, self.min_tokens_on = width, span, masked, min_tokens
    self.trace_on, self.law_on = trace, law

  def host(self, name, *args):
    out = super().host(name, *args)
    if name == "begin":  # RoundInputs: the branch this round takes
      out = dataclasses.replace(out, constrained=np.bool_(self.masked),
                                eos_block=np.full_like(out.eos_block, int(self.min_tokens_on)))
    return out

  def span(self, p, cache):
    return self._span

  def traced(self) -> bool:
    return self.trace_on

  def bias(self, drafts, n):
    if not self.law_on:
      return super().bias(drafts, n)
    out = self.steps.bias(*jax.device_get((drafts, n)))  # zeros: no lane has a law
    return _placement.upload(out, self.placement)

  def propose(self, drafter, params, state, inp):
    if drafter.on_device:
      return super().propose(drafter, params, state, inp)
    b = inp.anchor.shape[0]  # a host proposal of width K' after narrowing (n = 0: no drafts)
    parents = np.full((b, self.width), -1, np.int32) if drafter.tree else None
    return Proposal(np.zeros((b, self.width), np.int32), np.zeros((b,), np.int32), OneHotQ(),
                    parents), state


def warm_rounds(host, rs: _state.DecodeState, args: _round.RoundArgs, st: _round.RoundStatics,
                spans, *, trace: bool = False, laws: bool = False,
                min_tokens: bool = False) -> _state.DecodeState:
  """Runs `_round.run_round` on idle lanes for every verified width and span, and at the first
  span with masks -> the DecodeState afterwards.

  Args:
    host: the engine's HostState, no lane active.
    spans: every attention span a verify can take.
    trace: also the trace step, with and without masks (chain drafters: trees trace nothing).
    laws: also Finish under a sampling-law bias, with and without masks (chain drafters).
    min_tokens: also the min_tokens EOS ban, with and without masks.
  """
  steps = _bridges.HostCallbacks()
  steps.host, steps.seed = host, np.asarray(args.seed)
  stats = collections.Counter(host.stats)
  plain = dict(masked=False, min_tokens=False)
  bans = ((False, True), (True, True)) if min_tokens else ()
  branches = ([dict(plain, span=span) for span in spans]
              + [dict(span=spans[0], masked=masked, min_tokens=ban)
                 for masked, ban in ((True, False), *bans)])
  for wanted, field in ((trace, "trace"), (laws, "law")):
    if wanted and not st.drafter.tree:
      branches += [dict(span=spans[0], masked=masked, min_tokens=False, **{field: True})
                   for masked in (False, True)]
  for width in _round.verified_widths(st.drafter):
    for branch in branches:
      io = WarmIO(steps, st.placement, width=width, **branch)
      rs, _ = _round.run_round(io, rs, args, None, st)
  rs = _state.settle(rs)  # the waiting commit's own program (admissions settle first)
  jax.block_until_ready(rs)
  host.stats.clear()
  host.stats.update(stats)
  return rs


def warm_callback(host, rs: _state.DecodeState, args: _round.RoundArgs,
                  st: _round.RoundStatics, rounds: int) -> _state.DecodeState:
  """Compiles the callback bridge's loop by running it on idle lanes for one round."""
  stats = collections.Counter(host.stats)
  rs = _bridges.run_callback(host, rs, args, st, rounds, stop_when=lambda: True)
  host.stats.clear()
  host.stats.update(stats)
  return rs
