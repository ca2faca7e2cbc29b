"""Host side of one decode round: proposals, masks (+ masked q), and the commit protocol.

Axis letters: B lanes, K drafts, P = K + 1 positions, W mask words, C sparse candidates,
Vm logits width.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from infernix_jax import mask_layout
from infernix_jax.runtime import _deps
from infernix_jax.runtime._lane import Lane
from infernix_jax.runtime.errors import (ConstraintDeadEnd, GenerationError, NonFiniteLogits,
                                         RequestCancelled, StateIntegrityError)
from infernix_jax.runtime.types import FinishReason, RoundStat

_MASKED_Q_PURPOSE = 0x6D71  # "mq": host redraws of masked-q drafts (distinct RNG purpose)


def _bit(words: np.ndarray, token: int) -> bool:
  """Whether `token` is allowed in one packed mask row words [W]."""
  return bool((int(words[token >> 5]) >> (token & 31)) & 1)


class RoundHost:
  """Owns the preallocated host buffers and the per-lane committed state (lengths, anchor).

  The engine calls, per round: `propose` -> (Forward) -> `fill_masks` -> (Finish) -> `commit`.
  """

  def __init__(self, lanes: list[Lane | None], k: int, vocab: Any, drafter: Any,
               masked_q: bool):
    b = len(lanes)
    self.lanes = lanes
    self.k, self.p = k, k + 1
    self.vocab, self.drafter, self.masked_q = vocab, drafter, masked_q
    self.w = mask_layout.mask_words(vocab.size)
    # Preallocated, C-contiguous; masks are filled in place every round.
    self.mask_buf = np.zeros((b, self.p, self.w), np.int32)  # [B, P, W]
    self.states = np.full((b, self.p), mask_layout.UNREACHABLE, np.int8)  # [B, P]
    self.enabled = np.zeros((b,), bool)  # [B]
    self.host_drafts = np.zeros((b, k), np.int32)  # [B, K]
    self.host_n = np.zeros((b,), np.int32)
    self.use_host = np.zeros((b,), bool)
    self.cap = np.full((b,), k, np.int32)  # per-row draft extent limit (thinking budget)
    self.lengths = np.zeros((b,), np.int32)  # committed KV length per lane
    self.anchor = np.zeros((b,), np.int32)  # last committed token, not yet in the cache
    self.drop_bonus = np.zeros((b,), bool)
    self.eos = frozenset(int(e) for e in vocab.eos_ids)
    self.dead_bit, self.nonfinite_bit, self.empty_bit = _deps.flag_bits()
    self.finished: list[int] = []  # lanes that finished in the last commit
    self.host_seconds = 0.0  # host work of the bridge (proposals, masks, commit)

  # --- proposals -----------------------------------------------------------------------------
  def propose(self) -> None:
    """Host drafts for every active lane (n-gram, jump-forward) into host_drafts/host_n."""
    t0 = time.perf_counter()
    self.host_drafts.fill(0)
    self.host_n.fill(0)
    self.use_host.fill(False)
    self.cap.fill(self.k)
    for b, lane in enumerate(self.lanes):
      if lane is None or self.k == 0:
        continue
      # Never draft past the budget: the bonus/correction token needs one slot.
      k = max(0, min(self.k, lane.remaining - 1))
      left = lane.reasoning_left()
      if left is not None:  # nor past the thinking budget (the row commits <= left tokens)
        k = max(0, min(k, left - 1))
        self.cap[b] = k
      prop = self.drafter.host_propose(lane.draft_state, lane.session, k)
      n = min(len(prop.drafts), k)
      self.host_drafts[b, :n] = prop.drafts[:n]
      self.host_n[b] = n
      self.use_host[b] = prop.host
      if lane.report is not None:
        lane.report.jump_forward_tokens += min(prop.jump_forward, n)
    self.host_seconds += time.perf_counter() - t0

  def clip(self, n_drafts: np.ndarray) -> np.ndarray:
    """Device drafters' extents limited by `cap` (host drafts are limited when proposed)."""
    return np.minimum(np.asarray(n_drafts, np.int32), self.cap)

  def any_capped(self) -> bool:
    return bool((self.cap < self.k).any())

  def closes_due(self) -> list[int]:
    """Active lanes whose reasoning reached the thinking budget (a forced close is due)."""
    due = []
    for b, lane in enumerate(self.lanes):
      if lane is None or lane.finish is not None or lane.error is not None:
        continue
      left = lane.reasoning_left()
      if left is not None and left <= 0 and lane.remaining > 0:
        due.append(b)
    return due

  def any_constrained(self) -> bool:
    return any(lane is not None and lane.constrained for lane in self.lanes)

  def any_active(self) -> bool:
    return any(lane is not None for lane in self.lanes)

  # --- masks ---------------------------------------------------------------------------------
  def fill_masks(self, drafts: np.ndarray, n_drafts: np.ndarray, q: Any = None):
    """Lookahead per constrained row into the preallocated mask buffer.

    With masked q (sampling drafters, q host arrays given), each constrained row's q is
    masked by the grammar at every looked-ahead position (q' = norm(q * 1[A])), and the
    first illegal draft is redrawn from q'. Drawing from q and redrawing illegal draws from q'
    yields exactly q', so acceptance with q' stays exact. A redrawn draft ends the row's
    drafts (the target verified the old one), and the bonus after it is dropped.

    Args:
      drafts: i32[B, K] as verified by Forward. n_drafts: i32[B].
      q: None, or ("sparse", ids i32[B,K,C], probs f32[B,K,C]) or ("dense", probs f32[B,K,Vm]),
        writable host copies (modified in place).

    Returns:
      (drafts, n_drafts, changed): changed is True when masked q modified drafts or q.
    """
    t0 = time.perf_counter()
    self.enabled.fill(False)
    self.states.fill(mask_layout.UNREACHABLE)
    self.drop_bonus.fill(False)
    changed = False
    drafts = np.array(drafts, np.int32, copy=True)
    n_drafts = np.array(n_drafts, np.int32, copy=True)
    for b, lane in enumerate(self.lanes):
      if lane is None or lane.session is None:
        continue
      r0 = time.perf_counter()
      n = int(n_drafts[b])
      buf = self.mask_buf[b, :n + 1]  # contiguous [n+1, W]
      st = np.asarray(lane.session.lookahead(drafts[b, :n].copy(), out=buf), np.int8)
      if q is not None and self.masked_q and n:
        st, n, redrawn = self._mask_q_row(b, lane, drafts, n, st, q)
        if redrawn or n != n_drafts[b]:
          n_drafts[b] = n
        changed = True
      self.states[b, :len(st)] = st
      self.enabled[b] = True
      lane.report.mask_positions += int(np.count_nonzero(st != mask_layout.UNREACHABLE))
      lane.report.mask_bytes_uploaded += self.p * self.w * 4
      lane.report.lookahead_seconds += time.perf_counter() - r0
    self.host_seconds += time.perf_counter() - t0
    return drafts, n_drafts, changed

  def _mask_q_row(self, b, lane, drafts, n, st, q):
    """Masks q_b by the grammar and redraws the first illegal draft (see fill_masks)."""
    kind = q[0]
    seed = int(lane.request.sampling.seed)
    base = len(lane.output)
    redrawn = False
    i = 0
    while i < n:
      if st[i] != mask_layout.READY:
        break
      words = self.mask_buf[b, i]
      if kind == "sparse":
        ids, probs = q[1][b, i], q[2][b, i]
        legal = np.array([0 <= t < self.vocab.size and _bit(words, int(t)) for t in ids])
        masked = np.where(legal, probs, 0.0)
      else:
        probs = q[1][b, i]
        legal = mask_layout.unpack(words, self.vocab.size)
        masked = np.zeros_like(probs)
        masked[:self.vocab.size] = np.where(legal, probs[:self.vocab.size], 0.0)
      z = float(masked.sum())
      if z <= 0:  # no legal mass: keep the real q (the draft is rejected normally)
        break
      masked = (masked / z).astype(probs.dtype)
      d = int(drafts[b, i])
      ok = 0 <= d < self.vocab.size and _bit(words, d)
      probs[...] = masked
      if ok:
        i += 1
        continue
      # Redraw from q' (counter-based: seed, logical position, purpose).
      rng = np.random.default_rng([seed, base + i, _MASKED_Q_PURPOSE])
      cdf = np.cumsum(masked.astype(np.float64))
      j = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
      j = min(j, len(masked) - 1)
      drafts[b, i] = int(q[1][b, i, j]) if kind == "sparse" else j
      n = i + 1
      self.drop_bonus[b] = True
      redrawn = True
      self.states[b].fill(mask_layout.UNREACHABLE)
      buf = self.mask_buf[b, :n + 1]
      st = np.asarray(lane.session.lookahead(drafts[b, :n].copy(), out=buf), np.int8)
      break
    return st, n, redrawn

  # --- commit protocol -----------------------------------------------------------------------
  def commit(self, accepted, tokens, flags, n_drafts) -> list[int]:
    """Preview -> model-state commit (lengths) -> session commit -> publish, per row.

    A row whose verification reached a DeadEnd, whose logits were non-finite, or that was
    cancelled commits nothing and fails alone; every other row commits.

    Returns:
      Lanes that finished this round (their results are ready; the lanes are free).
    """
    t0 = time.perf_counter()
    accepted, tokens, flags = np.asarray(accepted), np.asarray(tokens), np.asarray(flags)
    plans = []
    for b, lane in enumerate(self.lanes):
      if lane is None:
        continue
      error = self._row_error(b, lane, int(flags[b]))
      if error is not None:
        plans.append((b, lane, None, None, error))
        continue
      n = int(accepted[b])
      out = []
      for t in tokens[b, :n + 1]:
        if t < 0:  # no token after an accepted EOS (the next position is Unreachable)
          break
        out.append(int(t))
      if self.drop_bonus[b] and n == int(n_drafts[b]):
        out = out[:n]
      finish = None
      for i, t in enumerate(out):
        if t in self.eos:
          out, finish = out[:i + 1], FinishReason.STOP
          break
      if len(out) >= lane.remaining:
        if len(out) > lane.remaining or finish is None:
          finish = FinishReason.LENGTH
        out = out[:lane.remaining]
      if not out or any(t >= self.vocab.size for t in out):
        plans.append((b, lane, None, None, StateIntegrityError(
            f"the kernel produced an invalid token id in {out}", lane.request.request_id)))
        continue
      if lane.session is not None:
        r0 = time.perf_counter()
        r = lane.session.preview(out)
        lane.report.accept_seconds += time.perf_counter() - r0
        if getattr(r, "dead_end", False) or int(r.accepted) != len(out):
          lane.session.discard()
          plans.append((b, lane, None, None, StateIntegrityError(
              f"the constraint session accepted {int(r.accepted)} of {len(out)} tokens the "
              f"kernel produced under its own mask", lane.request.request_id)))
          continue
      lane.rounds.append(RoundStat(drafted=int(n_drafts[b]), accepted=min(n, len(out))))
      plans.append((b, lane, out, finish, None))
    # Model-state commit: the cache keeps anchor + out[:-1]; out[-1] is the next anchor.
    for b, lane, out, finish, error in plans:
      if error is None and out:
        self.lengths[b] += len(out)
        self.anchor[b] = out[-1]
    # Session commit, then publish.
    self.finished = []
    for b, lane, out, finish, error in plans:
      if error is not None:
        lane.error = error
        lane.finish = (FinishReason.CANCELLED if isinstance(error, RequestCancelled)
                       else FinishReason.ERROR)
        lane.publish([], final=True)
        self.finished.append(b)
        continue
      if lane.session is not None:
        r0 = time.perf_counter()
        lane.session.commit()
        lane.report.accept_seconds += time.perf_counter() - r0
      if finish is None and lane.session is not None and getattr(lane.session, "terminated",
                                                                   False):
        finish = FinishReason.STOP
      visible = [t for t in out if t not in self.eos]
      lane.publish(visible, final=finish is not None)
      self.drafter.observe(lane.draft_state, out)
      if lane.tracker is not None:
        lane.tracker.observe(out)
      if finish is None and lane.session is None and lane.check_stop_strings():
        finish = FinishReason.STOP_STRING
      if finish is not None:
        lane.finish = finish
        self.finished.append(b)
    self.host_seconds += time.perf_counter() - t0
    return self.finished

  def _row_error(self, b: int, lane: Lane, flags: int) -> GenerationError | None:
    rid = lane.request.request_id
    if lane.cancelled:
      return RequestCancelled(f"request {rid} was cancelled", rid)
    if flags & self.nonfinite_bit:
      return NonFiniteLogits(
          f"request {rid}: the target's logits left no finite choice at output position "
          f"{len(lane.output)} (internal numerical error, not a constraint problem)", rid)
    if flags & (self.dead_bit | self.empty_bit):
      if lane.session is None:
        return NonFiniteLogits(f"request {rid}: no token could be sampled", rid)
      return ConstraintDeadEnd(
          f"request {rid}: the constraint allows no next token after {len(lane.output)} "
          f"committed output tokens (the grammar has no continuation here)", rid)
    return None
