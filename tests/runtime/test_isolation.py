"""Row isolation and drafter-state regressions: a failing row (NaN, a raising session or
stream callback) ends alone on both bridges, device drafters hold exactly what was committed,
and only draft ids, masks and committed tokens cross between host and device."""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax.runtime import _bridges, drafters
from infernix_jax.runtime.engine import BRIDGES, Engine
from infernix_jax.runtime.types import FinishReason, GenerationRequest, SamplingOptions
from tests.constrain.conftest import qwen3_vocab  # noqa: F401  (fixture)
from infernix_jax.testing import exact_oracle as h

K, LANES = 3, 4
POISON = 15  # a padded id (>= V) whose embedding is NaN
SPEC = ic.OutputConstraint.choice(["abc", "ab", "ba1", "cab", "x{y}"])
PROMPT = [1, 1, 2, 1, 1, 2, 1]


@functools.lru_cache(maxsize=None)
def poisoned_model():
  cfg, model = h.tiny_model.__wrapped__()  # a fresh copy: the shared one stays clean
  model.embed[...] = model.embed[...].at[POISON].set(jnp.nan)
  return cfg, model


@functools.lru_cache(maxsize=None)
def engine(bridge: str, name: str = "ngram") -> Engine:
  cfg, model = poisoned_model()
  opts = {f: v for f, v in dict(k=K, n=2, weights="random").items()
          if f in drafters.fields(name)}
  d = drafters.create(name, opts, target=h.tiny_model(), jump_forward=True)
  return Engine(model, h.toy_vocab(), d, lanes=LANES, capacity=32, bridge=bridge)


def solo(eng, r: GenerationRequest):
  return eng.generate([GenerationRequest(r.prompt_ids, max_tokens=r.max_tokens,
                                         constraint=r.constraint, sampling=r.sampling)])[0]


@pytest.mark.parametrize("bridge", BRIDGES)
def test_nan_row_fails_alone(bridge):
  """A NaN request next to normal ones: it fails as non_finite, the others are intact (the
  callback bridge used to clear a donated cache from inside its loop and lose every row)."""
  eng = engine(bridge)
  good = [GenerationRequest(PROMPT, max_tokens=6, constraint=SPEC if i else None,
                            sampling=SamplingOptions(temperature=float(i % 2), seed=i))
          for i in range(3)]
  nan = GenerationRequest([1, POISON, 2], max_tokens=6)
  results = eng.generate([nan] + good)
  assert results[0].error_kind == "non_finite" and results[0].token_ids == []
  for r, got in zip(good, results[1:]):
    assert got.error is None and got.token_ids == solo(eng, r).token_ids
  # The lane the NaN row used is clean for the next request.
  after = eng.generate([GenerationRequest([1, 2], max_tokens=6) for _ in range(LANES)])
  assert all(x.error is None for x in after)
  assert len({tuple(x.token_ids) for x in after}) == 1


class Raising:
  """A session proxy that raises in one method after `after` calls of it."""

  def __init__(self, inner, method: str, after: int = 0):
    self.inner, self.method, self.after = inner, method, after

  def __getattr__(self, name):
    attr = getattr(self.inner, name)
    if name != self.method:
      return attr

    def call(*a, **kw):
      if self.after <= 0:
        raise RuntimeError(f"injected failure in {name}")
      self.after -= 1
      return attr(*a, **kw)

    return call


@pytest.mark.parametrize("bridge", BRIDGES)
@pytest.mark.parametrize("method", ["forced_tokens", "lookahead", "preview", "commit",
                                    "on_token"])
def test_raising_session_fails_alone(bridge, method):
  """A session (or stream callback) that raises ends its own request with a SessionFailure;
  the other rows commit exactly their solo tokens."""
  eng = engine(bridge)
  others = [GenerationRequest(PROMPT, max_tokens=6, constraint=SPEC,
                              sampling=SamplingOptions(temperature=1.0, seed=s))
            for s in range(3)]
  if method == "on_token":
    def boom(event):
      raise RuntimeError("injected failure in the stream callback")
    bad = GenerationRequest(PROMPT, max_tokens=6, constraint=SPEC, on_token=boom)
  else:
    bad = GenerationRequest(PROMPT, max_tokens=6, constraint=SPEC)
  ids = [eng.submit(r) for r in [bad] + others]
  if method != "on_token":
    lane = eng.host.waiting[0]
    lane.session = Raising(lane.session, method, after=1)
  eng.run()
  results = [eng.result(i) for i in ids]
  assert results[0].error_kind == "session", results[0]
  assert results[0].finish_reason == FinishReason.ERROR
  assert "injected failure" in results[0].error
  for r, got in zip(others, results[1:]):
    assert got.error is None and got.token_ids == solo(eng, r).token_ids


def test_device_drafter_holds_what_was_committed():
  """After every round the draft model's pending context is exactly the tokens the lane
  committed, including rounds where masked q redrew a draft (no phantom bonus token)."""
  cfg, model = h.tiny_model()
  d = drafters.create("draft", {"k": K, "model": h.tiny_model(seed=1), "sampling": True},
                      target=(cfg, model))
  eng = Engine(model, h.toy_vocab(), d, lanes=1, capacity=32)
  redraws = 0
  for seed in range(12):
    rid = eng.submit(GenerationRequest(PROMPT, max_tokens=8, constraint=SPEC,
                                       sampling=SamplingOptions(temperature=1.0, seed=seed)))
    before = 0
    while eng.host.any_active() or eng.host.waiting:
      eng.step()
      lane = eng.host.lanes[0]
      if lane is None:
        break
      out = lane.output
      st = eng._round_state.draft
      n = int(st.counts[0])
      assert np.asarray(st.tokens[0, :n]).tolist() == out[before:], (seed, out, before)
      before = len(out)
      last = lane.rounds[-1]
      redraws += last.drafted < min(K, lane.request.max_tokens - (len(out) - n) - 1)
    eng.result(rid)
  assert redraws > 0  # masked-q redraws happened, and the state still matched


@pytest.mark.parametrize("bridge", BRIDGES)
def test_only_drafts_cross_to_the_host(bridge, monkeypatch):
  """The host's mask step receives draft ids i32[B, K] and extents i32[B] only (q stays on
  the device, also for a sparse-q drafter under masked q), and an unconstrained batch never
  calls it; mask bytes counted are the bytes uploaded."""
  seen = []
  real = _bridges.HostCallbacks.masks

  def spy(self, drafts, n):
    seen.append((np.shape(drafts), np.shape(n)))
    return real(self, drafts, n)

  monkeypatch.setattr(_bridges.HostCallbacks, "masks", spy)
  cfg, model = h.tiny_model()
  d = drafters.create("dflash2", {"k": K, "weights": "random"}, target=(cfg, model))
  eng = Engine(model, h.toy_vocab(), d, lanes=LANES, capacity=32, bridge=bridge)
  free = [GenerationRequest(PROMPT, max_tokens=4, sampling=SamplingOptions(1.0, seed=s))
          for s in range(LANES)]
  free = eng.generate(free)
  assert all(r.error is None for r in free), [r.error for r in free]
  assert seen == [] and eng.host.stats["mask_bytes_uploaded"] == 0
  results = eng.generate([GenerationRequest(PROMPT, max_tokens=4, constraint=SPEC,
                                            sampling=SamplingOptions(1.0, seed=s))
                          for s in range(LANES)])
  assert all(r.error is None for r in results)
  assert seen and set(seen) == {((LANES, K), (LANES,))}
  [buf] = eng.host.mask_bufs.values()  # a device drafter always verifies K + 1 positions
  assert buf.shape == (LANES, K + 1, eng.host.w)
  assert eng.host.stats["mask_bytes_uploaded"] == len(seen) * buf.nbytes
  per_request = sum(r.constraint.mask_bytes_uploaded for r in results)
  assert per_request <= eng.host.stats["mask_bytes_uploaded"]


def test_required_tool_calls_at_t1_never_escape(qwen3_vocab):  # noqa: F811
  """Tool calls under tool_choice=required on a random-weight Qwen3 at T = 1 (where a random
  walk once crashed the CLI from the framing decoder): every request ends with a result, the
  completed ones parse, and no exception leaves the engine."""
  from infernix_jax.constrain import framing as fr
  from tests.runtime.test_thinking_budget import CONTENT, tiny_qwen3
  cfg, model = tiny_qwen3()
  tools = fr.parse_tools([{"type": "function", "function": {
      "name": "note", "parameters": {"type": "object", "required": ["text"],
                                     "properties": {"text": {"type": "string"}}}}}])
  eng = Engine(model, qwen3_vocab, drafters.create("ngram", k=K, jump_forward=True), lanes=4,
               capacity=96, cfg=cfg)
  results = eng.generate([GenerationRequest(CONTENT, max_tokens=48, tools=tools,
                                            tool_choice="required",
                                            sampling=SamplingOptions(temperature=1.0, seed=s))
                          for s in range(8)])
  assert len(results) == 8
  for r in results:
    assert r.error is None or r.error_kind in ("session", "dead_end"), r.error
    if r.finish_reason == FinishReason.STOP:
      r.text.encode("utf-8")  # strict text (no lone surrogates)
