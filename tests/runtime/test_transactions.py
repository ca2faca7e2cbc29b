"""Commit protocol: one failing row (DeadEnd, NaN logits, cancellation) never fails its batch."""

from __future__ import annotations

import functools

import jax.numpy as jnp
import pytest

from infernix_jax import constrain as ic
from infernix_jax.runtime import (Engine, FinishReason, GenerationRequest, JumpForward,
                                  NGramDrafter, SamplingOptions)
from infernix_jax.runtime.errors import CapacityError, FeatureConflictError
from infernix_jax.testing import exact_oracle as h

K, LANES = 3, 32  # the shapes of test_exactness: compiled stages are shared
POISON = 15  # a padded id (>= V): its embedding is NaN, so rows whose prompt holds it get NaN
SPEC = ic.OutputConstraint.choice(["abc", "ab", "ba1", "cab", "x{y}"])


@functools.lru_cache(maxsize=None)
def engine() -> Engine:
  cfg, model = h.tiny_model.__wrapped__()  # a fresh copy: the shared one stays clean
  model.embed[...] = model.embed[...].at[POISON].set(jnp.nan)
  return Engine(model, h.toy_vocab(), JumpForward(k=K, inner=NGramDrafter(k=K, n=2)),
                lanes=LANES, capacity=32)


def request(kind: str, seed: int, **kw) -> GenerationRequest:
  if kind == "dead_end":  # 'a' is legal first, then only an unspellable 'Z' (no token has it)
    return GenerationRequest([1, 2, 3], max_tokens=6, constraint=ic.OutputConstraint.choice(
        ["aZ"]), request_id=f"{kind}-{seed}", **kw)
  if kind == "nan":
    return GenerationRequest([1, POISON, 2], max_tokens=6, request_id=f"{kind}-{seed}", **kw)
  constraint = SPEC if kind == "constrained" else None
  prompt = [1, 1, 2, 1, 1, 2, 1] if seed % 2 else [8, 12, 13, 9, 8, 12]
  return GenerationRequest(prompt, max_tokens=8, constraint=constraint,
                           sampling=SamplingOptions(temperature=1.0 if seed % 3 else 0.0,
                                                    seed=seed),
                           request_id=f"{kind}-{seed}", **kw)


def test_failing_rows_fail_alone():
  """DeadEnd, NaN and cancelled rows fail with their own error class; the others match
  their solo runs token for token (40 requests on 32 lanes: lanes are reused)."""
  eng = engine()
  cancel_id = "cancel-0"

  def cancel_after_first(event):
    eng.cancel(cancel_id)

  good = [request("constrained", s) for s in (1, 2, 3)] + [request("free", s) for s in (4, 5, 6)]
  bad = [request("dead_end", 0), request("nan", 0),
         GenerationRequest([1, 1, 2], max_tokens=8, request_id=cancel_id,
                           on_token=cancel_after_first)]
  fill = [request("free", s) for s in range(10, 41)]
  mixed = bad[:2] + good[:3] + bad[2:] + fill + good[3:]
  results = {r.request_id: r for r in eng.generate(mixed)}

  dead, nan, cancelled = (results[r.request_id] for r in bad)
  assert dead.finish_reason == FinishReason.ERROR and dead.error_kind == "dead_end"
  # Jump-forward drafts the forced 'a'; verification accepts it and reaches the DeadEnd
  # after it in the same round, so the round (and thus the request) commits nothing.
  assert dead.token_ids == []
  assert "no next token" in dead.error
  assert nan.finish_reason == FinishReason.ERROR and nan.error_kind == "non_finite"
  assert nan.token_ids == []
  assert cancelled.finish_reason == FinishReason.CANCELLED and cancelled.error_kind == "cancelled"
  assert len(cancelled.rounds) == 1  # the round after the cancel committed nothing
  for r in good:
    solo = eng.generate([GenerationRequest(r.prompt_ids, max_tokens=r.max_tokens,
                                           constraint=r.constraint, sampling=r.sampling)])[0]
    got = results[r.request_id]
    assert got.error is None and got.token_ids == solo.token_ids, r.request_id
    assert got.text == solo.text
    if r.constraint is not None:
      assert got.constraint.terminated and got.finish_reason == FinishReason.STOP


def test_lane_after_nan_is_clean():
  """After a NaN row fails, the next request in its (cleared) lane decodes like a solo run."""
  eng = engine()
  # A short prompt: the NaN row's scratch (verify positions 2..5) stays beyond its prefill.
  short = lambda: GenerationRequest([1, 2], max_tokens=8, sampling=SamplingOptions(0.0))
  want = eng.generate([short()])[0].token_ids
  fill = [GenerationRequest([1, 1, 2], max_tokens=8) for _ in range(LANES - 1)]
  out = eng.generate([request("nan", 1)] + fill + [short()])
  # The NaN row fails in the first round; lane 0 is the first free lane for the last request.
  assert out[0].error_kind == "non_finite" and out[-1].token_ids == want


def test_cancel_before_start_and_streaming():
  eng = engine()
  events = []
  reqs = [request("constrained", 1, on_token=events.append), request("free", 2)]
  eng.submit(reqs[1])
  assert eng.cancel(reqs[1].request_id)
  results = eng.generate(reqs[:1])
  assert results[0].finish_reason == FinishReason.STOP
  assert "".join(e.text for e in events) == results[0].text
  assert [t for e in events for t in e.token_ids] == results[0].token_ids
  assert events[-1].finished and not any(e.finished for e in events[:-1])
  eng.run()  # the cancelled one is finished without running
  assert eng.result(reqs[1].request_id).finish_reason == FinishReason.CANCELLED


def test_request_errors_before_queueing():
  eng = engine()
  with pytest.raises(FeatureConflictError, match="stop strings"):
    eng.submit(GenerationRequest([1, 2], max_tokens=4, constraint=SPEC, stop=("}",)))
  with pytest.raises(CapacityError, match="capacity"):
    eng.submit(GenerationRequest([1, 2], max_tokens=100))
  with pytest.raises(ValueError, match="top_p"):
    eng.submit(GenerationRequest([1, 2], max_tokens=4, sampling=SamplingOptions(top_p=0.0)))
  with pytest.raises(ValueError, match="presence_penalty"):
    eng.submit(GenerationRequest([1, 2], max_tokens=4,
                                 sampling=SamplingOptions(presence_penalty=float("nan"))))
  with pytest.raises(ic.ConstraintError):
    eng.submit(GenerationRequest([1, 2], max_tokens=4,
                                 constraint=ic.OutputConstraint.regex("(")))
  assert not eng.host.waiting


def test_eos_length_and_stop_strings():
  eng = engine()
  free = eng.generate([request("free", 3)])[0]
  assert free.finish_reason in (FinishReason.LENGTH, FinishReason.STOP)
  if free.finish_reason == FinishReason.LENGTH:
    assert len(free.token_ids) == 8
  stop = free.text[2:4]
  cut = eng.generate([request("free", 3, stop=(stop,))])[0]
  assert cut.finish_reason == FinishReason.STOP_STRING
  assert cut.text == free.text[:free.text.find(stop)]
  short = eng.generate([GenerationRequest([1, 1, 2], max_tokens=2, constraint=SPEC)])[0]
  assert short.finish_reason == FinishReason.LENGTH and len(short.token_ids) == 2
  assert not short.constraint.terminated
