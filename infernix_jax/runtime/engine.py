"""The engine: fixed lanes, continuous batching, one decode round over either host bridge.

Axis letters (docs/CONTRACTS.md): B lanes, K drafts, P = K + 1, W mask words, S cache
capacity, T prompt bucket.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any, Iterable

import jax
import numpy as np

from infernix_jax import mask_layout
from infernix_jax.runtime import (_bridges, _deps, _device_loop, _round, _state, _thinking,
                                  _warmup, compile_cache, prefill)
from infernix_jax.runtime._host import HostState
from infernix_jax.runtime._lane import Lane
from infernix_jax.runtime._placement import Placement
from infernix_jax.runtime._session import build_session
from infernix_jax.runtime.drafters import Drafter, DrafterSpec, NoDrafter
from infernix_jax.errors import ParameterError
from infernix_jax.runtime.errors import CapacityError
from infernix_jax.runtime.types import (BRIDGES, GenerationRequest, GenerationResult,
                                        check_bridge)

__all__ = ["BRIDGES", "Engine"]


class Engine:
  """Constrained speculative decoding over B fixed lanes with K drafts per round.

  Each round (`_round.run_round`, written once): drafts (host or device drafter, grammar
  jump-forward) -> target verify over [anchor, drafts] -> host masks from the sessions'
  lookahead (one batch fill per backend) -> masked sampling + acceptance with the real q
  -> commit protocol. Requests join free lanes as others finish. Unconstrained lanes carry
  a disabled mask descriptor; a batch without constrained lanes uploads no mask.

  Build engines with `runtime.build.build_engine(EngineSpec(...))`, which validates every
  argument once (`EngineSpec.validate`); constructing `Engine` directly is for engine unit
  tests over models already in memory.

  Args:
    model: the target, an `nnx.Module` (e.g. `models.Transformer`) or `(graphdef, state)`
      with `cfg` given.
    vocab: the tokenizer's `constrain.Vocabulary` (V; EOS ids).
    drafter: a `runtime.drafters.Drafter` (default: ordinary decoding, K = 0); build one by
      name with `runtime.drafters.create`.
    lanes: B, requests decoded together.
    capacity: S, KV positions per lane (prompt + max_tokens + K + 1 must fit).
    bridge: "stages" (Python between jitted steps) or "callback" (`io_callback` inside one
      compiled multi-round loop).
    masked_q: sampling drafters' q is masked by the grammar (exact; an ablation knob).
    compiler: a `constrain.ConstraintCompiler` for `vocab` (created lazily when None).
    callback_rounds: rounds per compiled loop call of the callback bridge.
    cfg: the model config when `model` is `(graphdef, state)`.
    device_automaton: lanes under a trie-compiled choice take their masks from a device-
      resident automaton inside the round (no host lookahead for them); other lanes keep
      the host path. Same tokens either way.
    acceptance: "exact" (the rule of DESIGN.md section 5), or "drop-illegal": the wrong rule
      that drops an illegal draft and draws a bonus from p in its place (biased whenever a
      sampled q puts mass on illegal tokens; kept only so the exactness study can show it).
    mesh: a `jax.sharding.Mesh` with axes ("data", "model") (`models.sharding.parse_mesh`),
      or None for one device. The target (stacked layout) is tensor parallel over "model",
      its KV cache and the per-lane inputs are split over "data" where it divides B, a
      device drafter's parameters are replicated (`_placement`). Same tokens as one device.
    device_rounds: N > 1 runs up to N rounds per dispatch on the `stages` bridge while no
      active lane needs a host step (`_device_loop`: unconstrained lanes, ordinary decoding
      or a device drafter); 1 runs every round through the host. Same tokens either way.
  """

  def __init__(self, model: Any, vocab: Any, drafter: Drafter | None = None, *,
               lanes: int = 4, capacity: int = 1024, bridge: str = "stages",
               masked_q: bool = True, compiler: Any = None, callback_rounds: int = 64,
               cfg: Any = None, device_automaton: bool = False, mesh: Any = None,
               acceptance: str = "exact", device_rounds: int = 1):
    self.acceptance = acceptance
    self.device_rounds = device_rounds
    if isinstance(model, tuple):
      self.graphdef, self.state = model
      self.cfg = cfg
    else:
      from flax import nnx
      self.graphdef, self.state = nnx.split(model)
      self.cfg = cfg or model.cfg
    self.mesh = mesh
    self._place = Placement(mesh, lanes)
    self.state = self._place.target(self.state, self.cfg)
    self.vocab = vocab
    self.drafter = drafter or NoDrafter()
    self.k = self.drafter.k
    self.b, self.capacity, self.bridge = lanes, capacity, bridge
    self.masked_q = masked_q
    self.callback_rounds = callback_rounds
    self._compiler = compiler
    taps = self.drafter.feature_taps  # the target features the drafter reads (None: last)
    spec = DrafterSpec(lanes=lanes, capacity=capacity,
                       dim=self.cfg.dim * (len(taps) if taps else 1),
                       dtype=self.cfg.jnp_dtype)
    self.device_automaton = device_automaton
    self.host = HostState(lanes, self.drafter, vocab, device_automaton=device_automaton)
    self.host.vm = self.cfg.vocab_size
    # faithful.LawCache of exact-finite laws (None: created by the first non-local request);
    # engines may share one (laws depend on the target, constraint, prompt and T only)
    self.law_cache = None
    self._dparams, draft = _round.init_drafter(self.drafter, spec, self._place)
    self._round_state = _state.DecodeState.empty(
        self._place.cache(_deps.kv_cache_init(self.cfg, lanes, capacity)), draft)
    self._params = None  # (generation, SamplingParams, seeds): rebuilt when lanes change
    self.stats = collections.Counter()  # rounds, seconds (benchmarks)
    # Set to a `_bridges.Timeline` to record the spans of `stages` rounds (overlap studies).
    self.timeline: _bridges.Timeline | None = None
    # Ordinary decoding: the next round's forward phase runs while the host commits (`Prefetch`).
    self._prefetch = _bridges.Prefetch()
    # What `warmup` has done on this engine (prompt buckets, round variants): a later call
    # (a study warms up before every cell) repeats none of it.
    self._warm_buckets: set[int] = set()
    self._warm_rounds: set[tuple] = set()
    self._warm_generation = compile_cache.releases()

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
    request.validate()
    self.check_fits(request)
    session, report = build_session(request, self.compiler) if (
        request.constraint is not None or request.tools is not None) else (None, None)
    if self.drafter.tree and (request.trace or request.sampling_law != "local"):
      from infernix_jax.constrain.errors import FeatureConflictError
      what = "trace=True" if request.trace else f"sampling_law={request.sampling_law!r}"
      raise FeatureConflictError(
          f"{what} needs a chain drafter: drafter {self.drafter.name!r} proposes token trees, "
          f"whose rounds run no trace step and upload no sampling-law bias; use its chain "
          f"(drafter option tree=false) or drop {what.split('=')[0]}")
    check_bridge(self.bridge, logprobs=request.logprobs, trace=request.trace,
                 sampling_law=request.sampling_law)
    law = self._law(request, session, report) if request.sampling_law != "local" else None
    trace = self._trace(request, session) if request.trace else None
    lane = Lane(request=request, session=session, report=report, vocab=self.vocab,
                tracker=_thinking.tracker_for(request, session, self.vocab), law=law,
                trace=trace)
    self.host.waiting.append(lane)
    return request.request_id

  def check_fits(self, request: GenerationRequest) -> None:
    """Whether a request fits this engine: its prompt ids in the model's vocabulary, and
    prompt + max_tokens + K + 1 within a lane's KV capacity.

    Raises:
      CapacityError ("max_tokens"): it does not fit.
      ParameterError ("prompt"): a token id outside the vocabulary.
    """
    bad = [t for t in request.prompt_ids if not 0 <= t < self.cfg.vocab_size]
    if bad:
      raise ParameterError("prompt", f"token ids {bad[:5]} are outside the model vocabulary "
                           f"(0..{self.cfg.vocab_size - 1})")
    need = len(request.prompt_ids) + request.max_tokens + self.k + 1
    if need > self.capacity:
      raise CapacityError(
          "max_tokens", f"request {request.request_id}: prompt ({len(request.prompt_ids)} "
          f"tokens) + max_tokens ({request.max_tokens}) + K+1 ({self.k + 1}) = {need} exceeds "
          f"the KV capacity of {self.capacity} positions per lane; lower max_tokens or raise "
          f"the engine's capacity")

  def _law(self, request: GenerationRequest, session, report):
    """The sampling law of a request: exact-finite (target forwards over its token trie,
    cached) or onestep (forwards while decoding, added to the report as they run).

    Raises:
      FeatureConflictError: a framed (thinking) output.
      LanguageTooLargeError: the language exceeds the trie's budgets.
    """
    from infernix_jax import faithful
    from infernix_jax.constrain.errors import FeatureConflictError
    from infernix_jax.faithful.onestep import OneStepLaw
    if hasattr(session, "in_reasoning"):
      raise FeatureConflictError(
          f"sampling_law={request.sampling_law!r} needs a plain content constraint: this "
          f"prompt opens a thinking block, so the output is framed")
    if self.law_cache is None:
      self.law_cache = faithful.LawCache()
    law, seconds = self.law_cache.get(request, self.compiler, self.graphdef, self.state, self.cfg)
    if isinstance(law, OneStepLaw):
      law.report = report  # its law_forwards / law_tokens / law_seconds grow every round
      report.law_seconds = seconds
      return law
    report.law_trie_nodes = law.trie.size
    report.law_tv_bound, report.law_stop = law.tv_bound, law.stop
    if seconds:
      report.law_forwards, report.law_tokens = law.cost.forwards, law.cost.tokens
      report.law_seconds = seconds
    return law

  def _trace(self, request: GenerationRequest, session):
    """The RequestTrace of a traced request."""
    from infernix_jax.runtime import trace
    return trace.RequestTrace(request, self.vocab, trace.meta_of(
        request, session, self.drafter, masked_q=self.masked_q, bridge=self.bridge))

  def cancel(self, request_id: str) -> bool:
    """Cancels a queued or running request (it commits nothing afterwards)."""
    return self.host.cancel(request_id)

  def generate(self, requests: Iterable[GenerationRequest]) -> list[GenerationResult]:
    """Runs requests to completion (continuous batching); results in request order."""
    ids = [self.submit(r) for r in requests]
    self.run()
    return [self.host.results.pop(i) for i in ids]

  def result(self, request_id: str) -> GenerationResult | None:
    """The result of a finished request (removed from the engine), or None."""
    return self.host.results.pop(request_id, None)

  @property
  def busy(self) -> bool:
    """Whether a request is waiting or running (`step` has work to do)."""
    return bool(self.host.waiting) or self.host.any_active()

  def warmup(self, *, prompt_lengths: Iterable[int] = (), trace: bool = False,
             laws: bool = False, min_tokens: bool = False) -> None:
    """Compiles every device step a request within the engine's capacity can reach, on idle
    lanes (nothing is committed; later outputs are unchanged). Call it before timing.

    Covered: the admission prefills of the prompts of `prompt_lengths` (their buckets, over
    1, 2, 4 .. and all B admitted lanes; compiled without running) and a device drafter's
    extend over each of those buckets (run); on the stages bridge, the round
    (`_warmup.warm_rounds`) for every verified width (`_round.verified_widths`: a host
    drafter's anchors alone or K drafts) and attention span, with and without masks:
    propose, verify, Finish over the drafter's own q, advance; on the callback bridge, its
    compiled loop. Left to first use (their shapes depend on the request): the logprobs step
    (per top-N), the device automaton, presence/frequency/repetition penalties (per history
    bucket), clearing a lane that went non-finite, a sampling law's own forwards, and unless
    asked for, the min_tokens EOS ban, the trace step and Finish under a sampling-law bias.

    Args:
      prompt_lengths: prompt token counts the timed requests will have; each bucket costs a
        prefill compile per admitted-row count (seconds each on a real model), so callers
        name the prompts they will time. Empty: the first admission of each prompt bucket
        compiles its prefill.
      trace: also compile the trace step (for timed runs of traced requests).
      laws: also compile Finish under a sampling-law bias (requests with a sampling_law
        other than "local").
      min_tokens: also compile the min_tokens EOS ban (requests with min_tokens > 0; two
        small programs per verified width).

    A later call repeats only what it adds (new prompt buckets, another trace/laws variant),
    unless the process dropped its compiled programs since (`compile_cache.releases`).

    Raises:
      RuntimeError: requests are waiting or running.
    """
    if self.busy:
      raise RuntimeError("warmup() needs an idle engine (no waiting or running request)")
    if self._warm_generation != compile_cache.releases():  # the programs were dropped
      self._warm_buckets.clear()
      self._warm_rounds.clear()
      self._warm_generation = compile_cache.releases()
    self._warm_admissions(prompt_lengths)
    rounds = ("rounds", trace, laws, min_tokens) if self.bridge == "stages" else ("rounds",)
    if rounds in self._warm_rounds:
      return
    self._warm_rounds.add(rounds)
    args, st, rs = self._round_args(), self._statics(), self._round_state
    if self.bridge != "stages":
      self._round_state = _warmup.warm_callback(self.host, rs, args, st, self.callback_rounds)
      return
    spans = sorted({_round.attention_span([s], 1, self.capacity)
                    for s in range(0, self.capacity, _round.SPAN_STEP)},
                   key=lambda s: s or self.capacity)
    self._round_state = _warmup.warm_rounds(self.host, rs, args, st, spans, trace=trace,
                                            laws=laws, min_tokens=min_tokens)

  def _warm_admissions(self, prompt_lengths: Iterable[int]) -> None:
    """`warmup` of admissions: the prefill of each named prompt's bucket T and admitted-row
    count compiled (not run); a device drafter's extend run once per bucket on every lane."""
    longest = self.capacity - self.k - 2  # a prompt that fits (max_tokens >= 1), a close
    buckets = sorted({prefill.bucket(min(max(int(n) - 1, 1), longest))
                      for n in prompt_lengths if int(n) > 1} - self._warm_buckets)
    rows = [self.b]  # all lanes: `append_tokens`; 1, 2, 4 .. < B rows: `append_rows`
    while self._place.mesh is None and 2 ** (len(rows) - 1) < self.b:
      rows.insert(-1, 2 ** (len(rows) - 1))
    for t in buckets:
      self._warm_buckets.add(t)
      for r in rows:
        fn, args, static = self._prefill_call({b: [0] * (t + 1) for b in range(r)})
        out = fn.lower(*args, **static).compile()
      if self.drafter.on_device:
        hidden = jax.numpy.zeros(out.out_info[0].shape, out.out_info[0].dtype)  # [B, T, D]
        self._round_state = _round.extend_drafter(
            self.drafter, self._dparams, self._round_state,
            {b: [0] * (t + 1) for b in range(self.b)}, hidden, reset=True)

  def run(self) -> None:
    """Decodes until no request is waiting or running."""
    while self.busy:
      self.step()

  def step(self) -> None:
    """Admits waiting requests, applies due thinking closes, then runs one round (`stages`)
    or one compiled loop of up to `callback_rounds` rounds (`callback`); finished requests'
    results become available through `result`."""
    host = self.host
    self._admit()
    self._forced_closes()
    self._retire()
    if not host.any_active():
      return
    t0 = time.perf_counter()
    args = self._round_args()
    if self.bridge == "stages" and self._host_free():
      self._settle()
      self._round_state, n = _device_loop.run(host, self._round_state, args, self._statics(),
                                              self.capacity, self.device_rounds,
                                              stop_on_finish=bool(host.waiting))
      self.stats["rounds"] += n
      self.stats["device_loops"] += 1
    elif self.bridge == "stages":
      self._round_state = _bridges.run_stages(host, self._round_state, args, self._statics(),
                                              self.timeline, self._prefetch)
      self.stats["rounds"] += 1
      if self._prefetch is not None:
        self.stats["prefetch_hits"] = self._prefetch.hits
        self.stats["prefetch_misses"] = self._prefetch.misses
    else:
      rounds, freed_in_loop = collections.Counter(), []

      def stop_when():
        rounds["n"] += 1
        freed = host.retire()
        freed_in_loop.extend(freed)
        return ((bool(freed) and bool(host.waiting)) or not host.any_active()
                or self._penalties_active() or bool(host.closes_due()))

      self._round_state = _bridges.run_callback(host, self._round_state, args, self._statics(),
                                              self.callback_rounds, stop_when)
      self.stats["rounds"] += rounds["n"]
      self._clear_lanes(freed_in_loop)
    self.stats["round_seconds"] += time.perf_counter() - t0
    self._retire()

  # --- lanes ---------------------------------------------------------------------------------
  def _statics(self) -> _round.RoundStatics:
    return _round.RoundStatics(graphdef=self.graphdef, drafter=self.drafter,
                               vocab_size=self.vocab.size, masked_q=self.masked_q,
                               lanes=self.b, words=mask_layout.mask_words(self.vocab.size),
                               device_automaton=self.device_automaton,
                               drop_illegal=self.acceptance == "drop-illegal",
                               placement=self._place if self.mesh is not None else None,
                               eos_ids=tuple(sorted(self.host.eos)))

  def _rows(self, lanes) -> np.ndarray:
    """bool[B] the given lanes."""
    rows = np.zeros((self.b,), bool)
    rows[list(lanes)] = True
    return rows

  def _settle(self) -> None:
    """Applies a commit the last stages round left waiting for the next forward phase
    (`_state.settle`): before anything else reads or sets lanes."""
    self._round_state = _state.settle(self._round_state)

  def _reset(self, rows, lengths, anchor, cache=None) -> None:
    """Sets lanes `rows` of the DecodeState (`_state.reset`: the one path that does)."""
    self._settle()
    self._round_state = _state.reset(self._round_state,
                                     *self._place.rows((rows, lengths, anchor)), cache=cache)

  def _clear_lanes(self, freed) -> None:
    """Freed lanes start over at length 0 in the DecodeState."""
    if freed:
      zeros = np.zeros((self.b,), np.int32)
      self._reset(self._rows(freed), zeros, zeros)

  def _retire(self) -> None:
    """The host frees the lanes whose request ended; the device state clears them."""
    self._clear_lanes(self.host.retire())

  def _admit(self) -> None:
    """Prefills prompt[:-1] of every admitted lane in one batched call (other rows untouched),
    then sets their lengths and anchors in the DecodeState."""
    admitted = self.host.admit()
    if not admitted:
      return
    self._settle()
    hidden, cache = None, None
    if max(len(p) for p in admitted.values()) > 1:
      fn, args, static = self._prefill_call(admitted)
      hidden, cache = fn(*args, **static)
    lengths = np.zeros((self.b,), np.int32)
    anchor = np.zeros((self.b,), np.int32)
    for b, p in admitted.items():
      lengths[b], anchor[b] = len(p) - 1, p[-1]
    self._reset(self._rows(admitted), lengths, anchor, cache)
    draft = self.drafter.admit(self._round_state.draft, {
        b: self.host.lanes[b].request.history_key() for b in admitted})
    self._round_state = _round.extend_drafter(
        self.drafter, self._dparams, dataclasses.replace(self._round_state, draft=draft),
        admitted, hidden, reset=True)

  def _prefill_call(self, admitted: dict[int, list[int]]):
    """The jitted prefill of an admission (lane -> prompt, some longer than one token) and
    its arguments -> (fn, args, static kwargs); `warmup` compiles the same calls."""
    self._settle()
    longest = max(len(p) - 1 for p in admitted.values())
    cache = self._round_state.cache
    rows = sorted(admitted)
    width = prefill.bucket(len(rows), minimum=1)  # R: admitted lanes, padded to a power of two
    if width < self.b and self._place.mesh is None:
      # Compute only the admitted rows (a prompt joining a busy batch is not run B times).
      rows += [rows[-1]] * (width - len(rows))  # padding repeats a row with its own tokens
      tokens = np.zeros((width, prefill.bucket(longest)), np.int32)  # [R, T]
      counts = np.zeros((width,), np.int32)
      for i, b in enumerate(rows):
        p = admitted[b]
        tokens[i, :len(p) - 1] = p[:-1]
        counts[i] = len(p) - 1
      return prefill.append_rows, (self.graphdef, self.state, cache, np.asarray(rows, np.int32),
                                   tokens, counts), {"lanes": self.b,
                                                     "taps": self.drafter.feature_taps}
    tokens = np.zeros((self.b, prefill.bucket(longest)), np.int32)  # [B, T]
    counts = np.zeros((self.b,), np.int32)
    for b, p in admitted.items():
      tokens[b, :len(p) - 1] = p[:-1]
      counts[b] = len(p) - 1
    zeros = np.zeros((self.b,), np.int32)  # the admitted lanes' prompts go in at length 0
    start = _state.reset(self._round_state, *self._place.rows(
        (self._rows(admitted), zeros, zeros))).cache
    tokens, counts = self._place.rows((tokens, counts))
    return prefill.append_tokens, (self.graphdef, self.state, start, tokens, counts), {
        "taps": self.drafter.feature_taps}

  def _forced_closes(self) -> None:
    """Appends the forced close to every lane whose reasoning reached its budget, as one step.

    Per lane: forced-control preview (the session checks the whole close) -> the physical
    append (the close is model input, run through the target batched like a prefill, so the
    cache holds [anchor, c1..c_{m-1}] and c_m becomes the anchor; the drafter appends it
    too) -> session commit -> publish. The next round samples the first token after the
    close under the content / tool rules. A close longer than max_tokens is cut there.
    """
    host = self.host
    rows = host.preview_closes()
    if not rows:
      return
    self._settle()
    longest = max(len(c) for c in rows.values())
    width = prefill.bucket(longest)
    tokens = np.zeros((self.b, width), np.int32)  # [B, T]: [anchor, close[:-1]] per lane
    close = np.zeros((self.b, width), np.int32)  # [B, T]: the close, committed
    counts = np.zeros((self.b,), np.int32)
    for b, c in rows.items():
      tokens[b, 1:len(c)] = c[:-1]
      close[b, :len(c)] = c
      counts[b] = len(c)
    ds = self._round_state
    tokens, close, counts, closing = self._place.rows((tokens, close, counts,
                                                       self._rows(rows)))
    committed = _state.commit(ds, close, counts)  # lengths, anchors, positions after it
    hidden, cache = prefill.append_tokens(self.graphdef, self.state, ds.cache,
                                         _state.with_anchors(tokens, ds.anchor, closing),
                                         counts, taps=self.drafter.feature_taps)
    self._round_state = _round.extend_drafter(
        self.drafter, self._dparams,
        dataclasses.replace(committed, cache=cache.with_lengths(committed.cache.lengths)), rows,
        hidden, reset=False)
    host.commit_closes(rows)

  def _host_free(self) -> bool:
    """Whether the next rounds run in the device loop (`device_rounds` > 1): no active lane
    and not the drafter needs a host step (`_device_loop`), one device, no timeline."""
    return (self.device_rounds > 1 and self.mesh is None and self.timeline is None
            and _device_loop.drafter_qualifies(self.drafter)
            and all(_device_loop.lane_qualifies(x) for x in self.host.lanes)
            and not self.host.closes_due())

  def _penalties_active(self) -> bool:
    """Whether a lane's target depends on its output so far (presence, frequency or
    repetition penalty): its history is then rebuilt every round."""
    return any(x is not None and (x.request.sampling.presence_penalty or
                                  x.request.sampling.frequency_penalty or
                                  x.request.sampling.repetition_penalty != 1.0)
               for x in self.host.lanes)

  def _prompt_words(self, lane) -> np.ndarray:
    """i32[ceil(Vm / 32)]: the lane's prompt ids packed (zeros for a free lane), cached."""
    width = self.cfg.vocab_size
    if lane is None:
      return np.zeros((-(-width // 32),), np.int32)
    if lane.prompt_words is None:
      lane.prompt_words = _deps.pack_ids([lane.request.prompt_ids], 1, width)[0]
    return lane.prompt_words

  def _round_args(self) -> _round.RoundArgs:
    """Target params, drafter params, per-lane SamplingParams and seeds for the next round.

    Sampling params are cached until lanes change. With presence/frequency/repetition
    penalties active, the per-lane history (the committed output) is rebuilt every round: M
    is a power-of-two bucket, -1 padded; the kernels add the round's hypothetical draft
    prefix to it. With a repetition penalty, every lane's prompt also goes up packed
    ([B, ceil(Vm / 32)] words; built once per lane).
    """
    penalties = self._penalties_active()
    if self._params is None or penalties or self._params[0] != self.host.generation:
      b = self.b
      cols = {k: np.zeros((b,), np.float32) for k in ("t", "p", "m", "pp", "fp", "rp")}
      cols["p"][:] = cols["rp"][:] = 1.0
      top_k = np.zeros((b,), np.int32)
      seed = np.zeros((b,), np.uint32)
      longest = 0
      for i, lane in enumerate(self.host.lanes):
        if lane is None:
          continue
        s = lane.request.sampling
        cols["t"][i], cols["p"][i], cols["m"][i] = s.temperature, s.top_p, s.min_p
        cols["pp"][i], cols["fp"][i] = s.presence_penalty, s.frequency_penalty
        cols["rp"][i] = s.repetition_penalty
        top_k[i], seed[i] = s.top_k, s.seed
        longest = max(longest, len(lane.output))
      h = prefill.bucket(longest) if penalties else 0
      hist = -np.ones((b, h), np.int32)
      if penalties:
        for i, lane in enumerate(self.host.lanes):
          if lane is not None and lane.output:
            hist[i, :len(lane.output)] = lane.output
      prompts = np.zeros((b, 0), np.int32)
      if np.any(cols["rp"] != 1.0):
        prompts = np.stack([self._prompt_words(lane) for lane in self.host.lanes])
      params = _deps.sampling_params(*self._place.rows(
          (cols["t"], top_k, cols["p"], cols["m"], cols["pp"], cols["fp"], hist,
           (hist >= 0).astype(np.int32), cols["rp"], prompts)))
      self._params = (self.host.generation, params, self._place.rows(seed))
    _, params, seed = self._params
    return _round.RoundArgs(state=self.state, dparams=self._dparams, params=params, seed=seed,
                            automaton=self.host.device_automaton())
