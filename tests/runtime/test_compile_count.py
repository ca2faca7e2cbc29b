"""XLA compilations are counted (`runtime.compile_count`), and after `Engine.warmup()` a
measured run compiles nothing: timings of generations exclude compilation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from infernix_jax import constrain as ic
from infernix_jax.runtime import _round, _warmup, compile_cache, compile_count, drafters
from infernix_jax.runtime.engine import Engine
from infernix_jax.runtime.types import GenerationRequest
from infernix_jax.testing import exact_oracle as h

CHOICE = ic.OutputConstraint.choice(["abc", "ab", "ba1", "cab", "x{y}"])
REGEX = ic.OutputConstraint.regex("[abc]{2,5}1?")
# prefill buckets 16 and 32, and a one-token prompt (nothing to prefill)
PROMPTS = ([1, 1, 2, 1, 1, 2, 1], [8, 12, 13, 9, 8, 12], [3] * 20, [4])
# (constraint, min_tokens): free, a choice, a regex under the min_tokens EOS ban, free banned
SETTINGS = ((None, 0), (CHOICE, 0), (REGEX, 2), (None, 3))


def _listeners() -> int:
  from jax._src import monitoring  # no public getter of the registered listeners
  return len(monitoring.get_event_duration_listeners()) + len(monitoring.get_event_listeners())


def test_counts_a_fresh_compile_not_a_cached_call():
  f = jax.jit(lambda x: jnp.sin(x) * 3.0)
  x = jnp.ones((5, 7), jnp.float32)
  before = _listeners()
  with compile_count.counting() as outer:
    with compile_count.counting() as first:
      f(x).block_until_ready()
    with compile_count.counting() as again:
      f(x).block_until_ready()
  assert first.compiles == 1 and first.seconds > 0 and "<lambda>" in first.names[0]
  assert again.compiles == 0 and again.record() == {"xla_compiles": 0, "xla_compile_s": 0.0}
  assert outer.compiles == 1 and outer.record("warmup_")["warmup_xla_compiles"] == 1
  assert _listeners() == before  # the listeners leave with the last block
  y = jnp.ones((3,), jnp.float32)
  with compile_count.counting() as other:  # a new shape is a new program
    f(y).block_until_ready()
  assert other.compiles == 1


def _requests() -> list[GenerationRequest]:
  return [GenerationRequest(list(p), max_tokens=6, constraint=c, min_tokens=m)
          for p in PROMPTS for c, m in SETTINGS]


# a host and a device drafter on the stages bridge; a host drafter inside the callback
# bridge's compiled loop (its callbacks hand the drafter numpy arrays, never JAX ones)
@pytest.mark.parametrize("name,k,bridge", [("ngram", 1, "stages"), ("dflash2", 2, "stages"),
                                           ("ngram", 1, "callback")])
def test_warmup_leaves_nothing_to_compile(name, k, bridge, monkeypatch):
  """After `warmup(min_tokens=True)` requests of every prompt bucket, constrained and free,
  under min_tokens, compile nothing (host drafter: verify widths 0 and K; device drafter: its
  propose, extend and Finish over its own q), over two attention spans; the tokens are those of an engine
  that skipped warm-up (ordinary greedy's: tests/runtime/test_exactness.py)."""
  monkeypatch.setattr(_round, "SPAN_STEP", 16)  # spans 16 and the whole capacity (32)
  cfg, model = h.tiny_model()
  options = {"k": k, "n": 2, "weights": "random"}
  drafter = drafters.create(name, {o: v for o, v in options.items() if o in drafters.fields(name)},
                            target=(cfg, model), jump_forward=True)
  eng = Engine(model, h.toy_vocab(), drafter, lanes=2, capacity=32, bridge=bridge)
  rounds = []
  warm_fn = "warm_rounds" if bridge == "stages" else "warm_callback"
  real = getattr(_warmup, warm_fn)
  monkeypatch.setattr(_warmup, warm_fn, lambda *a, **k: rounds.append(1) or real(*a, **k))
  lengths = [len(r.prompt_ids) for r in _requests()]
  with compile_count.counting() as warm:
    eng.warmup(prompt_lengths=lengths, min_tokens=True)
  assert warm.compiles > 0
  eng.warmup(prompt_lengths=lengths, min_tokens=True)  # done already: nothing is warmed again
  assert len(rounds) == 1
  monkeypatch.setattr(compile_cache, "_releases", compile_cache.releases() + 1)
  eng.warmup(prompt_lengths=lengths, min_tokens=True)  # the programs were dropped since: warmed again
  assert len(rounds) == 2
  with compile_count.counting() as timed:
    results = eng.generate(_requests())
  assert timed.compiles == 0, timed.names
  assert not [r.error for r in results if r.error]
  cold = Engine(model, h.toy_vocab(), drafter, lanes=2, capacity=32,
                bridge=bridge).generate(_requests())
  assert [r.token_ids for r in results] == [r.token_ids for r in cold]
  eng.submit(GenerationRequest(PROMPTS[0], max_tokens=2))
  with pytest.raises(RuntimeError, match="idle engine"):
    eng.warmup()
  eng.run()


def test_host_proposals_verify_the_anchors_alone_or_k_drafts(monkeypatch):
  """A host drafter's round verifies the anchors alone or K drafts: a proposal whose longest
  lane drafted 1 .. K - 1 tokens is padded to K, each lane keeping its own draft count. So
  warm-up compiles the forward phase once per verified width (2) and attention span (2), the
  requests compile nothing more, and their tokens are ordinary greedy's (the padding is never
  accepted)."""
  monkeypatch.setattr(_round, "SPAN_STEP", 16)  # spans 16 and the whole capacity (32)
  cfg, model = h.tiny_model()
  k = 4
  drafter = drafters.create("ngram", {"k": k, "n": 2}, jump_forward=True)
  assert _round.verified_widths(drafter) == (0, k)
  eng = Engine(model, h.toy_vocab(), drafter, lanes=2, capacity=32)
  jax.clear_caches()  # the anchors-only verify does not depend on K: other tests compiled it
  requests = [GenerationRequest(list(p), max_tokens=8, constraint=c)
              for p in ([1, 2, 1, 2, 1, 2, 1], [3] * 16, [8, 12, 13, 9, 8, 12], [4])
              for c in (None, CHOICE)]
  with compile_count.counting() as warm:
    eng.warmup(prompt_lengths=[len(r.prompt_ids) for r in requests])
  assert warm.names.count("jit(forward_step)") == 2 * 2, warm.names
  longest = []
  real = _round.verified_width
  monkeypatch.setattr(_round, "verified_width",
                      lambda d, w: longest.append(w) or real(d, w))
  with compile_count.counting() as timed:
    results = eng.generate(requests)
  assert timed.compiles == 0, timed.names
  assert any(0 < w < k for w in longest), longest  # some round was padded
  plain = Engine(model, h.toy_vocab(), None, lanes=2, capacity=32).generate(requests)
  assert [r.token_ids for r in results] == [r.token_ids for r in plain]
