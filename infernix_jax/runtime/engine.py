"""The engine: fixed lanes, continuous batching, the round loop over both host bridges.

Axis letters: B lanes, K drafts, P = K + 1, W mask words, S cache capacity, T prompt bucket.
"""

from __future__ import annotations

import collections
import time
from typing import Any, Iterable

import jax
import jax.numpy as jnp
import numpy as np

from infernix_jax import mask_layout
from infernix_jax.runtime import _deps, _thinking, stages
from infernix_jax.runtime._lane import Lane
from infernix_jax.runtime._round import RoundHost
from infernix_jax.runtime._session import build_session, check_request
from infernix_jax.runtime.drafters import Drafter, NoDrafter, stage_drafter
from infernix_jax.runtime.errors import CapacityError, NonFiniteLogits
from infernix_jax.runtime.types import GenerationRequest, GenerationResult

BRIDGES = ("stages", "callback")


class Engine:
  """Constrained speculative decoding over B fixed lanes with K drafts per round.

  Each round: host proposals -> Forward stage (device drafter + target verify over
  [anchor, drafts]) -> host masks from the sessions' lookahead -> Finish stage (masked
  sampling + acceptance with the real q) -> commit protocol. Requests join free lanes as
  others finish. Unconstrained rows carry a disabled mask descriptor; a batch without
  constrained rows uploads no mask.

  Args:
    model: the target, an `nnx.Module` (e.g. `models.Transformer`) or `(graphdef, state)`
      with `cfg` given.
    vocab: the tokenizer's `constrain.Vocabulary` (V; EOS ids).
    drafter: a `runtime.drafters.Drafter` (default: ordinary decoding, K = 0).
    lanes: B, requests decoded together.
    capacity: S, KV positions per lane (prompt + max_tokens + K + 1 must fit).
    bridge: "stages" (Python between the two jitted stages) or "callback" (`io_callback`
      inside one compiled multi-round loop).
    masked_q: sampling drafters' q is masked by the grammar (exact; an ablation knob).
    compiler: a `constrain.ConstraintCompiler` for `vocab` (created lazily when None).
    callback_rounds: rounds per compiled loop call of the callback bridge.
    cfg: the model config when `model` is `(graphdef, state)`.
  """

  def __init__(self, model: Any, vocab: Any, drafter: Drafter | None = None, *,
               lanes: int = 4, capacity: int = 1024, bridge: str = "stages",
               masked_q: bool = True, compiler: Any = None, callback_rounds: int = 64,
               cfg: Any = None):
    if bridge not in BRIDGES:
      raise ValueError(f"bridge={bridge!r} must be one of {BRIDGES}")
    if lanes < 1:
      raise ValueError(f"lanes={lanes} must be >= 1")
    if isinstance(model, tuple):
      self.graphdef, self.state = model
      self.cfg = cfg
    else:
      from flax import nnx
      self.graphdef, self.state = nnx.split(model)
      self.cfg = cfg or model.cfg
    self.vocab = vocab
    self.drafter = drafter or NoDrafter()
    self.k = self.drafter.k
    self.b, self.capacity, self.bridge = lanes, capacity, bridge
    self.masked_q = masked_q
    self._compiler = compiler
    self.callback_rounds = callback_rounds
    self.lanes: list[Lane | None] = [None] * lanes
    self.host = RoundHost(self.lanes, self.k, vocab, self.drafter, masked_q)
    self.cache = _deps.kv_cache_init(self.cfg, lanes, capacity)
    self._row_cache = _deps.kv_cache_init(self.cfg, 1, capacity)
    self.dparams, self.dstate = (self.drafter.init_device(self) if self.drafter.device
                                 else (None, None))
    self._waiting: collections.deque[Lane] = collections.deque()
    self._results: dict[str, GenerationResult] = {}
    self._params = None  # device SamplingParams, rebuilt when lanes change
    p, w = self.k + 1, mask_layout.mask_words(vocab.size)
    self._zero_mask = jnp.zeros((lanes, p, w), jnp.int32)  # disabled rows: never read
    self._zero_states = jnp.full((lanes, p), mask_layout.UNREACHABLE, jnp.int8)
    self._no_mask = jnp.zeros((lanes,), bool)
    self.stats = collections.Counter()  # rounds, host/device seconds (benchmarks)

  # --- public API ----------------------------------------------------------------------------
  @property
  def compiler(self):
    if self._compiler is None:
      from infernix_jax import constrain as ic
      self._compiler = ic.ConstraintCompiler(self.vocab)
    return self._compiler

  def submit(self, request: GenerationRequest) -> str:
    """Validates, compiles the constraint and queues a request; returns its id.

    Raises:
      ConstraintError: invalid constraint or feature combination (nothing is queued).
      CapacityError / ValueError: the request does not fit or has an invalid field.
    """
    check_request(request)
    need = len(request.prompt_ids) + request.max_tokens + self.k + 1
    if need > self.capacity:
      raise CapacityError(
          f"request {request.request_id}: prompt ({len(request.prompt_ids)}) + max_tokens "
          f"({request.max_tokens}) + K+1 ({self.k + 1}) = {need} exceeds the KV capacity "
          f"{self.capacity}; lower max_tokens or raise the engine's capacity")
    bad = [t for t in request.prompt_ids if not 0 <= t < self.cfg.vocab_size]
    if bad:
      raise ValueError(f"prompt token ids {bad[:5]} are outside the model vocabulary")
    session, report = build_session(request, self.compiler) if (
        request.constraint is not None or request.tools is not None) else (None, None)
    lane = Lane(request=request, session=session, report=report,
                draft_state=self.drafter.row_state(request.prompt_ids), vocab=self.vocab,
                tracker=_thinking.tracker_for(request, session, self.vocab))
    self._waiting.append(lane)
    return request.request_id

  def cancel(self, request_id: str) -> bool:
    """Cancels a queued or running request (it commits nothing afterwards)."""
    for lane in list(self._waiting) + [x for x in self.lanes if x is not None]:
      if lane.request.request_id == request_id:
        lane.cancelled = True
        return True
    return False

  def generate(self, requests: Iterable[GenerationRequest]) -> list[GenerationResult]:
    """Runs requests to completion (continuous batching); results in request order."""
    ids = [self.submit(r) for r in requests]
    self.run()
    return [self._results.pop(i) for i in ids]

  def run(self) -> None:
    """Decodes until no request is waiting or running."""
    while self._waiting or self.host.any_active():
      self._admit()
      if _thinking.apply_forced_closes(self):  # rows at their thinking budget
        self._retire()
      if not self.host.any_active():
        continue
      if self.bridge == "stages":
        self._round_stages()
      else:
        self._rounds_callback()
      self._retire()

  # --- lanes ---------------------------------------------------------------------------------
  def _admit(self) -> None:
    admitted: list[int] = []
    for b in range(self.b):
      if self.lanes[b] is not None:
        continue
      while self._waiting and self._waiting[0].cancelled:
        self._finish_unstarted(self._waiting.popleft())
      if not self._waiting:
        break
      self.lanes[b] = self._waiting.popleft()
      admitted.append(b)
    if admitted:
      self._prefill(admitted)
      self._params = None

  def _finish_unstarted(self, lane: Lane) -> None:
    from infernix_jax.runtime.errors import RequestCancelled
    from infernix_jax.runtime.types import FinishReason
    rid = lane.request.request_id
    lane.error = RequestCancelled(f"request {rid} was cancelled before it started", rid)
    lane.finish = FinishReason.CANCELLED
    self._results[rid] = lane.result()

  def _prefill(self, admitted: list[int]) -> None:
    """Prefills prompt[:-1] of every admitted lane in one batched call (other rows untouched).

    prompt[-1] becomes the lane's first anchor, so the first round's verify produces the
    first output token through the same Forward/Finish path as every later one.
    """
    prompts = {b: np.asarray(self.lanes[b].request.prompt_ids, np.int32) for b in admitted}
    longest = max(len(p) - 1 for p in prompts.values())
    hidden = None
    if longest > 0:
      tokens = np.zeros((self.b, stages.bucket(longest)), np.int32)  # [B, T]
      counts = np.zeros((self.b,), np.int32)
      start = self.host.lengths.copy()
      for b, p in prompts.items():
        tokens[b, :len(p) - 1] = p[:-1]
        counts[b] = len(p) - 1
        start[b] = 0
      self.cache = self.cache.with_lengths(jnp.asarray(start))
      hidden, self.cache = stages.prefill_row(self.graphdef, self.state, self.cache,
                                              jnp.asarray(tokens), jnp.asarray(counts))
    for b, p in prompts.items():
      self.host.lengths[b] = len(p) - 1
      self.host.anchor[b] = p[-1]
    if self.drafter.device:
      self.dstate = self.drafter.prefill_rows(self, prompts, hidden)

  def _retire(self) -> None:
    poisoned = np.zeros((self.b,), bool)
    for b in self.host.finished:
      lane = self.lanes[b]
      poisoned[b] = lane is not None and isinstance(lane.error, NonFiniteLogits)
    if poisoned.any():
      rows = jnp.asarray(poisoned)
      self.cache = stages.clear_rows(self.cache, rows)
      if self.drafter.device:
        self.dstate = self.drafter.clear_rows(self.dstate, rows)
    for b in self.host.finished:
      lane = self.lanes[b]
      if lane is None:
        continue
      self._results[lane.request.request_id] = lane.result()
      self.lanes[b] = None
      self.host.lengths[b] = 0
      self.host.anchor[b] = 0
      self._params = None
    self.host.finished = []

  def _penalties_active(self) -> bool:
    return any(x is not None and (x.request.sampling.presence_penalty or
                                  x.request.sampling.frequency_penalty) for x in self.lanes)

  def _sampling(self):
    """Device SamplingParams + seeds for the lanes (cached until lanes or histories change).

    With presence/frequency penalties active, the per-row history (the committed output) is
    rebuilt every round: H is a power-of-two bucket, -1 padded; the kernels add the round's
    hypothetical draft prefix to it at each position.
    """
    penalties = self._penalties_active()
    if self._params is None or penalties:
      b = self.b
      cols = {k: np.zeros((b,), np.float32) for k in ("t", "p", "m", "pp", "fp")}
      cols["p"][:] = 1.0
      top_k = np.zeros((b,), np.int32)
      seed = np.zeros((b,), np.uint32)
      longest = 0
      for i, lane in enumerate(self.lanes):
        if lane is None:
          continue
        s = lane.request.sampling
        cols["t"][i], cols["p"][i], cols["m"][i] = s.temperature, s.top_p, s.min_p
        cols["pp"][i], cols["fp"][i] = s.presence_penalty, s.frequency_penalty
        top_k[i], seed[i] = s.top_k, s.seed
        longest = max(longest, len(lane.output))
      h = stages.bucket(longest) if penalties else 0
      hist = -np.ones((b, h), np.int32)
      if penalties:
        for i, lane in enumerate(self.lanes):
          if lane is not None and lane.output:
            hist[i, :len(lane.output)] = lane.output
      self._params = _deps.sampling_params(cols["t"], top_k, cols["p"], cols["m"], cols["pp"],
                                           cols["fp"], hist, (hist >= 0).astype(np.int32))
      self._seed = jnp.asarray(seed)
    return self._params, self._seed

  def _positions(self) -> np.ndarray:
    return np.array([len(x.output) if x is not None else 0 for x in self.lanes], np.int32)

  # --- the stages bridge ---------------------------------------------------------------------
  def _round_stages(self) -> None:
    """One round: Forward, host masks while the target forward runs, Finish, commit."""
    host = self.host
    t0 = time.perf_counter()
    host.propose()
    params, seed = self._sampling()
    position = jnp.asarray(self._positions())
    out = stages.forward_stage(
        self.graphdef, self.state, self.cache, jnp.asarray(host.lengths),
        jnp.asarray(host.anchor), jnp.asarray(host.host_drafts), jnp.asarray(host.host_n),
        jnp.asarray(host.use_host), seed, position, drafter=stage_drafter(self.drafter),
        dparams=self.dparams, dstate=self.dstate)
    drafts_d, n_d, q_d, logits, hidden, self.cache, self.dstate = out
    if host.any_constrained():
      q_host = None
      if self.drafter.device:
        # Only the small draft arrays come back (q too for masked q of sampling drafters);
        # this waits for the proposal only, the verify keeps running.
        w0 = time.perf_counter()
        drafts, n_drafts = jax.device_get((drafts_d, n_d))
        if self.masked_q and self.drafter.sampling:
          q_host = self.drafter.q_to_host(q_d)
        self.stats["draft_wait_seconds"] += time.perf_counter() - w0
      else:
        drafts, n_drafts = host.host_drafts, host.host_n
      h0 = time.perf_counter()
      clipped = host.clip(n_drafts)
      capped = bool((clipped != n_drafts).any())
      drafts, n_drafts, changed = host.fill_masks(drafts, clipped, q_host)
      changed = changed or capped
      mask = jax.device_put(host.mask_buf)
      states, enabled = jnp.asarray(host.states), jnp.asarray(host.enabled)
      if changed:
        drafts_d, n_d = jnp.asarray(drafts), jnp.asarray(n_drafts)
        if q_host is not None:
          q_d = self.drafter.q_from_host(q_host)
      self.stats["mask_seconds"] += time.perf_counter() - h0
    else:
      mask, states, enabled = self._zero_mask, self._zero_states, self._no_mask
      host.drop_bonus.fill(False)
      if self.drafter.device and host.any_capped():  # thinking budget: clip the extent
        n_d = jnp.minimum(n_d, jnp.asarray(host.cap))
    accepted, tokens, flags = stages.finish_stage(
        logits, mask, enabled, states, drafts_d, n_d, q_d, params, seed, position,
        vocab_size=self.vocab.size)
    accepted, tokens, flags, n_drafts = jax.device_get((accepted, tokens, flags, n_d))
    host.commit(accepted, tokens, flags, n_drafts)
    if self.drafter.device:
      self.dstate = stages.update_stage(self.dparams, self.dstate, hidden,
                                        jnp.asarray(accepted), jnp.asarray(tokens),
                                        drafter=self.drafter)
    self.stats["rounds"] += 1
    self.stats["round_seconds"] += time.perf_counter() - t0

  # --- the callback bridge -------------------------------------------------------------------
  def _rounds_callback(self) -> None:
    from infernix_jax.runtime import _callback
    _callback.run_rounds(self)
