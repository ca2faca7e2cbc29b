"""Host side of the engine: the lanes' committed state and the three host steps of a round.

Axis letters (docs/CONTRACTS.md): B lanes, K drafts, P = K + 1 positions, W mask words.

`HostState` is the one owner of host lane state: waiting requests, lanes, finished results.
What the device carries across rounds (KV lengths, anchors, output positions, the drafter's
state) lives in the round's `_state.DecodeState`; the host's commit returns per-lane counts
that the round applies to it. The round (`_round.run_round`) calls its steps `begin` ->
`masks` -> `commit`; the engine calls `admit`, the forced-close steps and `retire`. A row
whose session, stream callback or numerics fail ends alone with a typed error.
"""

from __future__ import annotations

import collections
import time
from typing import Any

import numpy as np

from infernix_jax import mask_layout
from infernix_jax.runtime.drafters import Committed, DraftInput, Drafter
from infernix_jax.runtime._lane import Lane
from infernix_jax.runtime.errors import (ConstraintDeadEnd, GenerationError, NonFiniteLogits,
                                         RequestCancelled, SessionFailure, StateIntegrityError)
from infernix_jax.runtime.types import FinishReason, GenerationResult, RoundStat


class HostState:
  """Host state of B lanes and the host steps of each round.

  Args:
    lanes: B.
    drafter: the engine's drafter (its K and whether it takes forced tokens).
    vocab: the tokenizer's Vocabulary (V, EOS ids, decoding).
    device_automaton: lanes whose backend exports an automaton take their masks on the
      device.
  """

  def __init__(self, lanes: int, drafter: Drafter, vocab: Any, device_automaton: bool = False):
    b, k = lanes, drafter.k
    self.b, self.k, self.p = b, k, k + 1
    self.vocab, self.drafter = vocab, drafter
    self.w = mask_layout.mask_words(vocab.size)
    self.lanes: list[Lane | None] = [None] * b
    self.waiting: collections.deque[Lane] = collections.deque()
    self.results: dict[str, GenerationResult] = {}
    self.limit = np.zeros((b,), np.int32)  # drafts each lane may take this round
    # [B, P', W] per verified width P' (K + 1, or 1 in rounds nobody drafted), filled in place
    self.mask_bufs: dict[int, np.ndarray] = {}
    self.eos = frozenset(int(e) for e in vocab.eos_ids)
    from infernix_jax.pallas import FLAG_DEAD_END, FLAG_EMPTY, FLAG_NONFINITE
    self.dead_bit, self.nonfinite_bit, self.empty_bit = FLAG_DEAD_END, FLAG_NONFINITE, FLAG_EMPTY
    self.vm = vocab.padded_size  # Vm, the logits width (the engine sets its model's)
    self.bias_bufs: dict[int, np.ndarray] = {}  # [B, P', Vm] f32 per width (law lanes)
    self.stats = collections.Counter()  # host seconds per step, mask bytes uploaded
    # Threads for per-lane grammar work (xgrammar lookahead rows and previews); 0: this one.
    from infernix_jax.constrain import lane_pool
    self.lane_threads = lane_pool.default_threads() if b > 1 else 0
    self.generation = 0  # bumped whenever a lane's request changes (per-lane params cache)
    self.round_logprobs = None  # the round's pallas TokenLogprobs (numpy), for commit
    # Trie-constrained lanes may take their masks from a device-resident automaton.
    self.automata = None
    if device_automaton:
      from infernix_jax.runtime.device_automaton import AutomatonSet
      self.automata = AutomatonSet()

  # --- lanes ---------------------------------------------------------------------------------
  def any_active(self) -> bool:
    return any(lane is not None for lane in self.lanes)

  def automaton_lane(self, lane: Lane | None) -> bool:
    """Whether the lane's masks come from the device automaton (no host lookahead)."""
    if self.automata is None or lane is None or lane.session is None:
      return False
    from infernix_jax.constrain import backends
    return backends.exports_automaton(lane.session)

  def host_masked(self, lane: Lane | None) -> bool:
    """Whether the lane needs host lookahead masks this round."""
    return (lane is not None and lane.session is not None and lane.error is None
            and lane.finish is None and not self.automaton_lane(lane))

  def any_constrained(self) -> bool:
    return any(self.host_masked(lane) for lane in self.lanes)

  def device_automaton(self):
    """The DeviceAutomaton of the trie lanes (None when the option is off or none is active)."""
    if self.automata is None:
      return None
    return self.automata.update([x.session for x in self.lanes if self.automaton_lane(x)])

  def automaton_rows(self) -> tuple[np.ndarray, np.ndarray]:
    """(nodes i32[B], rows bool[B]): each device-masked lane's state in the automaton."""
    nodes = np.zeros((self.b,), np.int32)
    rows = np.zeros((self.b,), bool)
    for i, lane in enumerate(self.lanes):
      if self.automaton_lane(lane) and lane.error is None and lane.finish is None:
        nodes[i], rows[i] = self.automata.node_of(lane.session), True
    return nodes, rows

  def eos_block(self) -> np.ndarray:
    """i32[B] per lane the round positions (from its first) at which EOS is illegal: the
    tokens still missing to its request's min_tokens (0: none; never under ignore_eos)."""
    out = np.zeros((self.b,), np.int32)
    for i, lane in enumerate(self.lanes):
      if lane is not None and lane.finish is None and not lane.request.ignore_eos:
        out[i] = max(0, lane.request.min_tokens - len(lane.output))
    return out

  def positions(self) -> np.ndarray:
    """i32[B] logical output position of each lane's next token."""
    return np.array([len(x.output) if x is not None else 0 for x in self.lanes], np.int32)

  def kv_lengths(self) -> np.ndarray:
    """i32[B] each lane's committed KV length from the host's counts (0: free lane)."""
    return np.array([x.kv_length if x is not None else 0 for x in self.lanes], np.int32)

  def admit(self) -> dict[int, list[int]]:
    """Moves waiting requests into free lanes -> lane -> prompt ids of the admitted ones.

    The caller prefills prompt[:-1] and sets the lanes' KV lengths and anchors in the
    DecodeState; prompt[-1] becomes the lane's first anchor, so the first round produces
    the first token like every later one.
    """
    admitted: dict[int, list[int]] = {}
    for b in range(self.b):
      if self.lanes[b] is not None:
        continue
      while self.waiting and self.waiting[0].cancelled:
        lane = self.waiting.popleft()
        rid = lane.request.request_id
        lane.fail(RequestCancelled(f"request {rid} was cancelled before it started", rid))
        self.results[rid] = lane.result()
      if not self.waiting:
        break
      lane = self.lanes[b] = self.waiting.popleft()
      admitted[b] = list(lane.request.prompt_ids)
    if admitted:
      self.generation += 1
    return admitted

  def retire(self) -> list[int]:
    """Frees the lanes whose request ended; their results become available. -> freed lanes."""
    freed = []
    for b, lane in enumerate(self.lanes):
      if lane is not None and lane.finish is not None:
        self.results[lane.request.request_id] = lane.result()
        self.lanes[b] = None
        freed.append(b)
    if freed:
      self.generation += 1
    return freed

  def cancel(self, request_id: str) -> bool:
    for lane in list(self.waiting) + [x for x in self.lanes if x is not None]:
      if lane.request.request_id == request_id:
        lane.cancelled = True
        return True
    return False

  def _fail(self, b: int, lane: Lane, where: str, exc: BaseException) -> None:
    """Ends lane b's request with a SessionFailure (its open preview, if any, discarded)."""
    rid = lane.request.request_id
    if lane.session is not None:
      try:
        lane.session.discard()
      except Exception:  # noqa: BLE001 (the row is failing already; keep the batch alive)
        pass
    lane.fail(SessionFailure(f"request {rid}: {where} raised {type(exc).__name__}: {exc}", rid))

  # --- step 1: round inputs ------------------------------------------------------------------
  def begin(self, seed: np.ndarray) -> DraftInput:
    """Draft limits and grammar-forced tokens: the drafter's input (numpy arrays)."""
    t0 = time.perf_counter()
    b, k = self.b, self.k
    self.limit.fill(0)
    forced = np.zeros((b, k), np.int32)  # [B, K]
    n_forced = np.zeros((b,), np.int32)
    for i, lane in enumerate(self.lanes):
      if lane is None or lane.finish is not None or k == 0:
        continue
      # Never draft past max_tokens (the correction/bonus token needs one slot), nor past
      # the thinking budget (the row commits at most `left` tokens before its forced close).
      lim = max(0, min(k, lane.remaining - 1))
      if lane.request.max_drafts is not None:
        lim = min(lim, lane.request.max_drafts)
      left = lane.reasoning_left()
      if left is not None:
        lim = max(0, min(lim, left - 1))
      self.limit[i] = lim
      if self.drafter.uses_forced and lane.session is not None and lim > 0:
        try:
          got = list(lane.session.forced_tokens(lim))[:lim]
        except Exception as e:  # noqa: BLE001 (one row's session never fails the batch)
          self._fail(i, lane, "jump-forward (forced_tokens)", e)
          self.limit[i] = 0
          continue
        forced[i, :len(got)] = got
        n_forced[i] = len(got)
    anchor = np.array([x.anchor if x is not None else 0 for x in self.lanes], np.int32)
    inp = DraftInput(anchor=anchor, lengths=self.kv_lengths(),
                     seed=np.asarray(seed, np.uint32),
                     position=self.positions(), limit=self.limit.copy(), forced=forced,
                     n_forced=n_forced)
    for i, lane in enumerate(self.lanes):
      if lane is not None and lane.report is not None:
        lane.report.jump_forward_tokens += int(n_forced[i])  # drafted first, whole
      if lane is not None and lane.trace is not None and lane.finish is None:
        lane.trace.begin(anchor[i], self.limit[i], forced[i, :n_forced[i]])
    self.stats["begin_seconds"] += time.perf_counter() - t0
    return inp

  # --- step 2: masks -------------------------------------------------------------------------
  def masks(self, drafts: np.ndarray, n_drafts: np.ndarray):
    """Lookahead masks of every constrained lane, one batch fill per backend.

    Args:
      drafts: i32[B, K'] as verified by Forward (K' = K, or 0 in a round nobody drafted);
        n_drafts: i32[B].

    Returns:
      (mask i32[B, P', W] (a preallocated buffer), states int8[B, P'], enabled bool[B]),
      P' = K' + 1. Unconstrained lanes are disabled (their rows are not filled, never read).
    """
    from infernix_jax import constrain as ic
    t0 = time.perf_counter()
    drafts = np.ascontiguousarray(drafts, np.int32)
    p = drafts.shape[1] + 1
    n_drafts = np.minimum(np.asarray(n_drafts, np.int32), p - 1)
    buf = self._mask_buffer(p)
    sessions = [lane.session if self.host_masked(lane) else None for lane in self.lanes]
    try:
      states, enabled = ic.fill_batch(sessions, drafts, n_drafts, buf,
                                      batch_threads=self.lane_threads)
    except Exception:  # noqa: BLE001 (find the failing rows; the others fill normally)
      states = np.full((self.b, p), mask_layout.UNREACHABLE, np.int8)
      for i, s in enumerate(sessions):
        if s is None:
          continue
        n = int(n_drafts[i])
        try:
          states[i, :n + 1] = s.lookahead(drafts[i, :n].copy(), out=buf[i, :n + 1])
          buf[i, n + 1:] = 0
        except Exception as e:  # noqa: BLE001
          self._fail(i, self.lanes[i], "lookahead", e)
          sessions[i] = None
      enabled = np.array([s is not None for s in sessions], bool)
    self._record_masks(buf, states, enabled, time.perf_counter() - t0)
    return buf, states, enabled

  def _mask_buffer(self, p: int) -> np.ndarray:
    buf = self.mask_bufs.get(p)
    if buf is None:
      buf = self.mask_bufs[p] = np.zeros((self.b, p, self.w), np.int32)
    return buf

  def _record_masks(self, buf, states, enabled, seconds: float) -> None:
    """The round's mask costs into the lanes' reports and the engine's stats."""
    p = buf.shape[1]
    rows = np.flatnonzero(enabled)
    for i in rows:
      report = self.lanes[i].report
      report.mask_positions += int(np.count_nonzero(states[i] != mask_layout.UNREACHABLE))
      report.mask_bytes_uploaded += p * self.w * 4  # this lane's row of the upload
      report.lookahead_seconds += seconds / len(rows)
    self.stats["mask_bytes_uploaded"] += buf.nbytes
    self.stats["mask_seconds"] += seconds

  def tree_masks(self, drafts: np.ndarray, parents: np.ndarray, n_nodes: np.ndarray,
                 prune: bool, budget: int):
    """Masks of every node of the constrained lanes' draft trees (`constrain.tree`), and
    with `prune` the nodes the grammar rules out dropped before the verify; then the first
    `budget` nodes of each tree are kept (proposals list their nodes best first, parents
    first, so any prefix is a tree).

    Args:
      drafts, parents: i32[B, C] tree proposals (`Proposal.parents`); n_nodes: i32[B].
      budget: K, the nodes a round verifies (<= C).

    Returns:
      (drafts, parents, n_nodes, mask i32[B, N + 1, W], states int8[B, N + 1], enabled
      bool[B]) with N = min(C, budget); a lane whose walk raised fails alone (disabled, its
      tree unpruned).
    """
    from infernix_jax.constrain import tree as ctree
    from infernix_jax.runtime import _tree
    t0 = time.perf_counter()
    drafts = np.ascontiguousarray(drafts, np.int32)
    parents = np.ascontiguousarray(parents, np.int32)
    p = drafts.shape[1] + 1
    n_nodes = np.minimum(np.asarray(n_nodes, np.int32), p - 1)
    buf = self._mask_buffer(p)
    states = np.full((self.b, p), mask_layout.READY, np.int8)
    enabled = np.zeros(self.b, bool)
    for i, lane in enumerate(self.lanes):
      if not self.host_masked(lane):
        continue
      try:
        states[i] = ctree.tree_lookahead(lane.session, drafts[i], parents[i], int(n_nodes[i]),
                                         buf[i])
        enabled[i] = True
      except Exception as e:  # noqa: BLE001 (this lane fails; the others go on)
        self._fail(i, lane, "lookahead", e)
    if prune and enabled.any():
      drafts, parents, n_nodes, mask, states, pruned = _tree.prune(drafts, parents, n_nodes, buf,
                                                                   states, enabled)
      buf[...] = mask
      for i in np.flatnonzero(pruned):
        self.lanes[i].report.pruned_nodes += int(pruned[i])
      self.stats["pruned_nodes"] += int(pruned.sum())
    if budget < p - 1:  # the best `budget` (legal, under masked q) nodes are verified
      drafts, parents = drafts[:, :budget], parents[:, :budget]
      n_nodes = np.minimum(n_nodes, budget)
      buf, states = np.ascontiguousarray(buf[:, :budget + 1]), states[:, :budget + 1]
    self._record_masks(buf, states, enabled, time.perf_counter() - t0)
    return drafts, parents, n_nodes, buf, states, enabled

  # --- step 2b: sampling-law bias ------------------------------------------------------------
  def any_law(self) -> bool:
    """Whether an active lane samples a law other than the local one (a bias is uploaded)."""
    return any(x is not None and x.law is not None and x.finish is None for x in self.lanes)

  def bias(self, drafts: np.ndarray, n_drafts: np.ndarray) -> np.ndarray:
    """Additive logit bias f32[B, P', Vm] that turns p into the lanes' law (`faithful`).

    Position i of lane b gets the bias of its law after the committed output and drafts[b, :i]
    (the law's `bias_row`, scaled by the lane's temperature); other lanes and positions get 0,
    so their logits are unchanged.
    """
    t0 = time.perf_counter()
    drafts = np.asarray(drafts, np.int32)
    p = drafts.shape[1] + 1
    buf = self.bias_bufs.get(p)
    if buf is None:
      buf = self.bias_bufs[p] = np.zeros((self.b, p, self.vm), np.float32)
    buf.fill(0.0)
    n_drafts = np.minimum(np.asarray(n_drafts), p - 1)
    for b, lane in enumerate(self.lanes):
      if lane is None or lane.law is None or lane.finish is not None:
        continue
      temperature = float(lane.request.sampling.temperature)
      n = int(n_drafts[b])
      lane.law.bias_row(lane.law_node, drafts[b, :n], buf[b, :n + 1], temperature)
    self.stats["bias_seconds"] += time.perf_counter() - t0
    self.stats["bias_bytes_uploaded"] += buf.nbytes
    return buf

  # --- step 2c: trace (only while a lane is traced) -----------------------------------------
  def any_traced(self) -> bool:
    """Whether an active lane records a trace (the round then runs its trace step)."""
    return any(x is not None and x.trace is not None and x.finish is None for x in self.lanes)

  def trace_round(self, proposed: np.ndarray, n_proposed: np.ndarray, arrays) -> None:
    """Hands each traced lane its row of the round's device trace (`runtime.trace`).

    Args:
      proposed: i32[B, K'] the drafts as proposed (before a masked-q redraw); n_proposed:
        i32[B]; arrays: the round's `trace.TraceArrays` (numpy).
    """
    for b, lane in enumerate(self.lanes):
      if lane is not None and lane.trace is not None and lane.finish is None:
        lane.trace.device(proposed[b], int(n_proposed[b]), arrays, b)

  # --- step 2d: logprobs (only while a lane asks for them) ---------------------------------
  def logprobs_top(self) -> int | None:
    """The alternatives the round's logprobs step keeps (the most any active lane asks for,
    bucketed: 0, 1, 2, 4, 8, 16, 20), or None when no active lane asks for logprobs."""
    asked = [x.request.logprobs for x in self.lanes
             if x is not None and x.finish is None and x.request.logprobs is not None]
    if not asked:
      return None
    most = max(asked)
    return 0 if most == 0 else min(20, 1 << (most - 1).bit_length())

  def _record_logprobs(self, b: int, lane: Lane, out: list[int], published: set) -> None:
    """Appends lane b's TokenLogprob of each published token of `out` from the round's
    logprobs (position i of the round decided out[i])."""
    from infernix_jax.runtime.types import TokenLogprob
    arrays, n = self.round_logprobs, lane.request.logprobs
    for i, t in enumerate(out):
      if t not in published:
        continue
      if arrays is None:  # a round without the step (cannot happen on the stages bridge)
        raise StateIntegrityError(f"no logprobs were computed for request "
                                  f"{lane.request.request_id}", lane.request.request_id)
      alts = tuple((int(a), float(x)) for a, x in zip(arrays.top_ids[b, i][:n],
                                                      arrays.top_logprobs[b, i][:n])
                   if np.isfinite(x))
      lane.logprobs.append(TokenLogprob(int(t), float(arrays.logprob[b, i]), alts))

  # --- step 3: commit ------------------------------------------------------------------------
  def commit(self, accepted, tokens, flags, n_drafts) -> tuple[Committed, np.ndarray]:
    """Preview -> model-state commit (counts) -> session commit -> publish, per row.

    A row whose verification reached a DeadEnd, whose logits were non-finite, whose session
    or stream callback raised, or that was cancelled commits nothing and fails alone. An
    unconstrained row whose extra stop string ends in the round commits its tokens through
    the one that completes it and finishes (`Lane.find_stop`).

    Args:
      accepted: i32[B] drafts accepted; tokens: i32[B, P] (-1 after the last);
      flags: i32[B] kernel flags; n_drafts: i32[B] the drafts Finish verified.

    Returns:
      (Committed(tokens i32[B, P], counts i32[B]) -- what each lane really committed, for
      the DecodeState and the drafter -- and poisoned bool[B]: lanes that failed with
      non-finite values, whose KV rows must be cleared).
    """
    t0 = time.perf_counter()
    accepted, tokens = np.asarray(accepted), np.asarray(tokens)
    flags, n_drafts = np.asarray(flags), np.asarray(n_drafts)
    out_tokens = np.zeros((self.b, self.p), np.int32)  # [B, P]
    counts = np.zeros((self.b,), np.int32)
    poisoned = np.zeros((self.b,), bool)
    plans = []
    previews = self._previews(accepted, tokens, flags)
    for b, lane in enumerate(self.lanes):
      if lane is None or lane.finish is not None:
        continue
      error = lane.error or self._row_error(lane, int(flags[b]))
      if error is not None:
        plans.append((b, lane, None, None, error))
        continue
      n = int(accepted[b])
      out, finish = self._produced(lane, tokens[b, :n + 1])
      if not out or any(t >= self.vocab.size for t in out):
        plans.append((b, lane, None, None, StateIntegrityError(
            f"the kernel produced an invalid token id in {out}", lane.request.request_id)))
        continue
      if lane.session is not None:
        r = previews[b]
        if isinstance(r, Exception):
          self._fail(b, lane, "preview", r)
          plans.append((b, lane, None, None, lane.error))
          continue
        if r.dead_end or int(r.accepted) != len(out):
          lane.session.discard()
          plans.append((b, lane, None, None, StateIntegrityError(
              f"the constraint session accepted {int(r.accepted)} of {len(out)} tokens the "
              f"kernel produced under its own mask", lane.request.request_id)))
          continue
      if lane.session is None:  # an extra stop string ends the output at its token
        eos = frozenset() if lane.request.ignore_eos else self.eos
        cut = lane.find_stop([t for t in out if t not in eos])
        if cut is not None:
          out, finish = out[:cut], FinishReason.STOP_STRING
      lane.rounds.append(RoundStat(drafted=int(n_drafts[b]), accepted=min(n, len(out))))
      plans.append((b, lane, out, finish, None))
    # Model-state commit (counts; the device applies them): out[-1] is the next anchor.
    for b, lane, out, finish, error in plans:
      if error is None:
        lane.committed += len(out)
        out_tokens[b, :len(out)] = out
        counts[b] = len(out)
    # Session commit, then publish.
    for b, lane, out, finish, error in plans:
      if error is not None:
        poisoned[b] = isinstance(error, NonFiniteLogits)
        lane.fail(error)
        continue
      try:
        if lane.session is not None:
          r0 = time.perf_counter()
          lane.session.commit()
          lane.report.accept_seconds += time.perf_counter() - r0
          if finish is None and lane.session.terminated:
            finish = FinishReason.STOP
        if lane.tracker is not None:
          lane.tracker.observe(out)
        eos = frozenset() if lane.request.ignore_eos else self.eos
        if lane.law is not None:
          lane.law_node = lane.law.advance(lane.law_node, [t for t in out if t not in eos])
        if lane.logprobs is not None:
          self._record_logprobs(b, lane, out, {t for t in out if t not in eos})
        lane.publish([t for t in out if t not in eos], final=finish is not None)
        if lane.trace is not None:
          lane.trace.commit(out, accepted=min(int(accepted[b]), len(out)),
                            n_drafts=int(n_drafts[b]))
      except Exception as e:  # noqa: BLE001 (a session or stream callback fails its row)
        lane.fail(SessionFailure(f"request {lane.request.request_id}: commit or streaming "
                                 f"raised {type(e).__name__}: {e}", lane.request.request_id))
        continue
      if finish == FinishReason.STOP and len(lane.output) < lane.request.min_tokens:
        lane.min_tokens_unmet = True  # the grammar allowed EOS alone: it forced the end
      if finish is not None:
        lane.finish = finish
    committed = Committed(tokens=out_tokens, counts=counts)
    self.round_logprobs = None
    self.stats["commit_seconds"] += time.perf_counter() - t0
    return committed, poisoned

  def _produced(self, lane: Lane, tokens) -> tuple[list[int], FinishReason | None]:
    """The round's tokens a lane keeps (through EOS, at most its remaining) and the finish
    that implies (None: it goes on)."""
    out = []
    for t in tokens:
      if t < 0:  # no token after an accepted EOS or a redrawn draft (Unreachable next)
        break
      out.append(int(t))
    finish = None
    eos = frozenset() if lane.request.ignore_eos else self.eos  # ignore_eos: EOS is a token
    for i, t in enumerate(out):
      if t in eos:
        out, finish = out[:i + 1], FinishReason.STOP
        break
    if len(out) >= lane.remaining:
      if len(out) > lane.remaining or finish is None:
        finish = FinishReason.LENGTH
      out = out[:lane.remaining]
    return out, finish

  def _previews(self, accepted, tokens, flags) -> dict:
    """lane -> its session's `preview` of the round's kept tokens (or the exception it
    raised), for the lanes the commit will preview. xgrammar previews (each fills the next
    committed mask, at times tens of ms) run in the lane pool when two or more lanes have
    one; the others run here."""
    from infernix_jax.constrain import lane_pool
    todo = []
    for b, lane in enumerate(self.lanes):
      if (lane is None or lane.finish is not None or lane.session is None
          or lane.error is not None or self._row_error(lane, int(flags[b])) is not None):
        continue
      out, _ = self._produced(lane, tokens[b, :int(accepted[b]) + 1])
      if out and not any(t >= self.vocab.size for t in out):
        todo.append((b, lane, out))

    def preview(item):
      _, lane, out = item
      r0 = time.perf_counter()
      r = lane.session.preview(out)
      lane.report.accept_seconds += time.perf_counter() - r0
      return r

    slow = sum(getattr(lane.session, "backend", None) == "xgrammar" for _, lane, _ in todo)
    threads = self.lane_threads if slow > 1 else 1
    return {b: r for (b, _, _), r in zip(todo, lane_pool.run_each(preview, todo, threads))}

  def _row_error(self, lane: Lane, flags: int) -> GenerationError | None:
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

  # --- forced thinking closes ----------------------------------------------------------------
  def closes_due(self) -> list[int]:
    """Active lanes whose reasoning reached the thinking budget (a forced close is due)."""
    due = []
    for b, lane in enumerate(self.lanes):
      if lane is None or lane.finish is not None:
        continue
      left = lane.reasoning_left()
      if left is not None and left <= 0 and lane.remaining > 0:
        due.append(b)
    return due

  def preview_closes(self) -> dict[int, list[int]]:
    """Step 1 of a forced close: each due lane's session previews the whole close.

    Returns:
      lane -> close tokens (cut at max_tokens) for the lanes whose preview succeeded; the
      others fail alone.
    """
    rows: dict[int, list[int]] = {}
    for b in self.closes_due():
      lane = self.lanes[b]
      full = lane.close_tokens()
      close = full[:lane.remaining]
      if lane.session is not None:
        try:
          if len(close) == len(full):
            lane.session.preview_forced_close()
          else:
            r = lane.session.preview(close)
            if int(r.accepted) != len(close):
              lane.session.discard()
              raise RuntimeError(f"the grammar accepted {int(r.accepted)} of {len(close)}")
        except Exception as e:  # noqa: BLE001
          rid = lane.request.request_id
          lane.fail(StateIntegrityError(
              f"request {rid}: the forced thinking close was refused: {e}", rid))
          continue
      rows[b] = close
    return rows

  def commit_closes(self, rows: dict[int, list[int]]) -> None:
    """Steps 3-4 of a forced close, after the physical append: session commit, publish."""
    self.generation += 1  # the outputs (penalty histories) changed
    for b, close in rows.items():
      lane = self.lanes[b]
      lane.committed += len(close)
      try:
        if lane.session is not None:
          lane.session.commit()
        if lane.tracker is not None:
          lane.tracker.observe(close)
        lane.forced_close = True
        if lane.logprobs is not None:  # appended by the engine, not sampled
          from infernix_jax.runtime.types import TokenLogprob
          lane.logprobs.extend(TokenLogprob(int(t), 0.0) for t in close)
        final = lane.remaining - len(close) <= 0
        lane.publish(list(close), final=final)
        if lane.trace is not None:
          lane.trace.close(close)
      except Exception as e:  # noqa: BLE001
        self._fail(b, lane, "the forced close's commit", e)
        continue
      if final:
        lane.finish = FinishReason.LENGTH
