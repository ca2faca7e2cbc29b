"""Exactness of every drafter: T = 0 reproduces ordinary greedy decoding token for token, and
T > 0 reproduces ordinary decoding's sequence distribution (chi-square against FP64 exact
enumeration), with and without a constraint, masked q on and off, in mixed batches.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax.constrain import backends
from infernix_jax.runtime import drafters
from infernix_jax.runtime.engine import BRIDGES, Engine
from infernix_jax.runtime.types import GenerationRequest, SamplingOptions
from infernix_jax.testing import exact_oracle as h

K = 3
LANES = 32  # the token-for-token comparisons: more requests than lanes, admitted mid-flight
# The chi-square tests (1,200 samples per law). The samples do not depend on the width
# (randomness is counted per request seed and position), so it is chosen for the suite's time:
# 128 lanes made each check's rounds fewer, but the whole file slower in the suite (553 -> 708 s
# summed over the tests of a fresh-clone CI run), because the token-for-token comparisons at
# 32 lanes no longer found their programs compiled. One width for all of the file's engines.
SAMPLING_LANES = LANES
PROMPTS = ([1, 1, 2, 1, 1, 2, 1], [8, 12, 13, 9, 8, 12])
CHOICES = (b"abc", b"ab", b"ba1", b"cab", b"x{y}")
SPEC = ic.OutputConstraint.choice([c.decode() for c in CHOICES])


def drafter_options_for(name: str, **extra) -> dict:
  """Options of drafter `name` for the tiny model: K, plus the fields it declares (n-gram
  size 2, untrained networks, the second tiny model as draft model)."""
  fields = drafters.fields(name)
  wanted = dict(k=K, n=2, weights="random", model=h.tiny_model(seed=1), **extra)
  return {key: value for key, value in wanted.items() if key in fields}


def _variants():
  """Every registered drafter, alone and behind jump-forward, greedy and (where its options
  can make it sample) sampling, chains and (where it can grow one) trees: label -> (name,
  options, jump_forward). The matrix picks up a newly registered drafter by itself."""
  cfg, model = h.tiny_model()
  out = {}
  for name in drafters.names():
    for jump in (False, True):
      if jump and not drafters.entry(name).drafts:
        continue
      fields = drafters.fields(name)
      for extra, tag in (({}, ""), ({"sampling": True}, "/sampling"),
                         ({"tree": not fields.get("tree")}, "/chain" if fields.get("tree")
                          else "/tree")):
        if extra and next(iter(extra)) not in fields:
          continue
        if jump and tag in ("/tree", "/chain") and name not in ("ngram", "dflash"):
          continue  # trees behind jump-forward: once on the host (ngram), once on the device
        built = drafters.create(name, drafter_options_for(name, **extra), target=(cfg, model),
                                jump_forward=jump)
        label = built.name + tag
        out.setdefault(label, (name, drafter_options_for(name, **extra), jump, built))
  return out


CASES = _variants()
VARIANTS = {label: case[3] for label, case in CASES.items()}  # label -> Drafter


def _supports(backend: str, spec) -> bool:
  try:
    backends.get(backend).check(spec)
    return True
  except ic.ConstraintError:
    return False


BACKENDS = [b for b in backends.names() if _supports(b, SPEC)]


@functools.lru_cache(maxsize=None)
def engine(name: str, bridge: str = "stages", device_automaton: bool = False,
           lanes: int = LANES) -> Engine:
  cfg, model = h.tiny_model()
  return Engine(model, h.toy_vocab(), VARIANTS[name], lanes=lanes, capacity=32, bridge=bridge,
                device_automaton=device_automaton)


@functools.lru_cache(maxsize=None)
def exact(prompt_index: int, max_tokens: int, temperature: float, constrained: bool):
  cfg, model = h.tiny_model()
  return h.exact_distribution(cfg, model, PROMPTS[prompt_index], h.toy_vocab(), max_tokens,
                              temperature, choices=CHOICES if constrained else None)


def run(eng, requests, masked_q=True):
  eng.masked_q = masked_q
  results = eng.generate(requests)
  errors = [r.error for r in results if r.error]
  assert not errors, errors[:3]
  return results


@pytest.mark.parametrize("label", sorted(CASES))
def test_every_drafter_passes_check_drafter(label):
  """Each variant through `testing.check_drafter` (one engine per variant, so the cost grows
  linearly with drafters): T = 0 yields ordinary greedy's tokens (FP64 oracle) free and on
  every backend that expresses the choice; T = 1 reproduces ordinary decoding's distribution
  (chi-square over 1,200 samples, p > 1e-3) free, constrained, and with masked q off for a
  sampled q. Its power: `test_the_naive_drop_illegal_rule_is_caught` below (p < 1e-6 for
  the wrong rule) and tests/runtime/test_check_drafter.py (a biased q). The callback
  bridge is checked against the stages bridge token for token below."""
  from infernix_jax.testing import check_drafter
  name, options, jump, drafter = CASES[label]
  report = check_drafter(name, options, jump_forward=jump, lanes=SAMPLING_LANES)
  assert report.passed, report
  if drafter.k and not (drafter.uses_forced and name == "jump") and name != "ngram":
    assert report.drafted > 0, report  # drafts really are verified (not ordinary decoding)


def test_the_naive_drop_illegal_rule_is_caught():
  """The power check of the chi-square tests above: the wrong rule (an illegal draft dropped,
  a bonus drawn from p in its place) is rejected where a sampled q spreads onto illegal
  tokens, and agrees with the exact rule under masked q."""
  cfg, model = h.tiny_model()
  want = exact(0, 4, 1.0, True)
  requests = [GenerationRequest(PROMPTS[0], max_tokens=4, constraint=SPEC,
                                sampling=SamplingOptions(temperature=1.0, seed=s))
              for s in range(1200)]
  pvalues = {}
  eng = Engine(model, h.toy_vocab(), VARIANTS["dflash2"], lanes=SAMPLING_LANES, capacity=32,
               acceptance="drop-illegal")
  for masked_q in (False, True):  # a runtime setting of the engine (`run` sets it)
    pvalues[masked_q] = h.chi_square_pvalue(want, [tuple(r.token_ids)
                                                   for r in run(eng, requests, masked_q)])
  assert pvalues[False] < 1e-6 and pvalues[True] > 1e-3, pvalues
  from infernix_jax.runtime.build import EngineSpec
  with pytest.raises(ValueError, match="acceptance='nope' must be one of exact, drop-illegal"):
    EngineSpec(acceptance="nope").validate(files=False)


def test_top_k_over_legal_tokens():
  """top_k = 2 (chosen among legal tokens) through the engine matches the FP64 oracle."""
  cfg, model = h.tiny_model()
  want = h.exact_distribution(cfg, model, PROMPTS[1], h.toy_vocab(), 4, 1.0, choices=CHOICES,
                              top_k=2)
  requests = [GenerationRequest(PROMPTS[1], max_tokens=4, constraint=SPEC,
                                sampling=SamplingOptions(temperature=1.0, top_k=2, seed=s))
              for s in range(1200)]
  results = run(engine("jump+ngram", lanes=SAMPLING_LANES), requests)
  assert h.chi_square_pvalue(want, [tuple(r.token_ids) for r in results]) > 1e-3


@pytest.mark.parametrize("bridge", ["stages", "callback"])
def test_penalties_over_committed_and_drafted_history(bridge):
  """Presence/frequency penalties: the history is the committed output plus the round's
  hypothetical drafts; the distribution matches ordinary decoding with penalties."""
  cfg, model = h.tiny_model()
  want = h.exact_distribution(cfg, model, PROMPTS[0], h.toy_vocab(), 3, 1.0, presence=1.5,
                              frequency=0.7)
  requests = [GenerationRequest(PROMPTS[0], max_tokens=3, sampling=SamplingOptions(
      temperature=1.0, presence_penalty=1.5, frequency_penalty=0.7, seed=s)) for s in range(1200)]
  # callback: the engine of the token-for-token comparisons (their width), compiled once
  results = run(engine("jump+ngram", bridge,
                       lanes=SAMPLING_LANES if bridge == "stages" else LANES), requests)
  assert h.chi_square_pvalue(want, [tuple(r.token_ids) for r in results]) > 1e-3
  assert sum(r.accepted for r in results) > 0  # drafts were accepted under penalties


@pytest.mark.parametrize("name,constrained", [("jump+ngram", False), ("dflash2", True),
                                              ("ngram/tree", False)])
def test_repetition_penalty_over_prompt_and_drafted_history(name, constrained):
  """The repetition penalty (prompt + committed output + the round's hypothetical drafts,
  with presence after it) is part of the target p that verification accepts against: the
  samples of speculative decoding (greedy n-gram drafts free; a sampled, masked q under a
  choice) follow ordinary decoding's penalised, constrained law, and a wrong penalty fails."""
  cfg, model = h.tiny_model()
  law = lambda rp: h.exact_distribution(cfg, model, PROMPTS[0], h.toy_vocab(), 3, 1.0,
                                        choices=CHOICES if constrained else None,
                                        presence=0.5, repetition=rp)
  requests = [GenerationRequest(PROMPTS[0], max_tokens=3, constraint=SPEC if constrained
                                else None, sampling=SamplingOptions(
                                    temperature=1.0, presence_penalty=0.5,
                                    repetition_penalty=1.8, seed=s)) for s in range(1200)]
  results = run(engine(name, lanes=SAMPLING_LANES), requests)
  samples = [tuple(r.token_ids) for r in results]
  assert h.chi_square_pvalue(law(1.8), samples) > 1e-3
  assert h.chi_square_pvalue(law(1.0), samples) < 1e-6  # the penalty changes the law
  assert sum(r.accepted for r in results) > 0  # drafts were accepted under the penalty


@pytest.mark.parametrize("name,constrained", [("jump+ngram", False), ("dflash2", True),
                                              ("jump+ngram/tree", True)])
def test_min_tokens_bans_eos_in_drafts_and_targets(name, constrained):
  """min_tokens = 3: EOS is out of the legal set of the first three positions (target p and
  masked q alike), except where the choice allows EOS alone (the end it forces is kept and
  reported); the samples follow ordinary decoding's law under that rule, and the law
  without it fails."""
  cfg, model = h.tiny_model()
  law = lambda m: h.exact_distribution(cfg, model, PROMPTS[1], h.toy_vocab(), 4, 1.0,
                                       choices=CHOICES if constrained else None, min_tokens=m)
  requests = [GenerationRequest(PROMPTS[1], max_tokens=4, min_tokens=3,
                                constraint=SPEC if constrained else None,
                                sampling=SamplingOptions(temperature=1.0, seed=s))
              for s in range(1200)]
  results = run(engine(name, lanes=SAMPLING_LANES), requests)
  samples = [tuple(r.token_ids) for r in results]
  assert h.chi_square_pvalue(law(3), samples) > 1e-3
  assert h.chi_square_pvalue(law(0), samples) < 1e-6
  short = [r for r in results if len(r.token_ids) < 3]
  assert all(r.min_tokens_unmet and r.finish_reason.value == "stop" for r in short)
  assert bool(short) == constrained  # free: never short; the choice forces "abc" etc.
  assert not any(r.min_tokens_unmet for r in results if len(r.token_ids) >= 3)


def test_ignore_eos_keeps_decoding_to_max_tokens():
  """ignore_eos: EOS is an ordinary output token (drafted, verified and fed back); every
  output runs to max_tokens and the samples follow ordinary decoding's law of that rule."""
  cfg, model = h.tiny_model()
  want = h.exact_distribution(cfg, model, PROMPTS[1], h.toy_vocab(), 3, 1.0, ignore_eos=True)
  requests = [GenerationRequest(PROMPTS[1], max_tokens=3, ignore_eos=True,
                                sampling=SamplingOptions(temperature=1.0, seed=s))
              for s in range(1200)]
  results = run(engine("jump+ngram", lanes=SAMPLING_LANES), requests)
  assert all(len(r.token_ids) == 3 and r.finish_reason.value == "length" for r in results)
  assert any(0 in r.token_ids for r in results)  # EOS (id 0) was produced and kept
  assert h.chi_square_pvalue(want, [tuple(r.token_ids) for r in results]) > 1e-3


def test_wrong_target_fails_the_same_check():
  """Negative control: samples of ordinary decoding at T = 1.4 fail the T = 1 test."""
  requests = [GenerationRequest(PROMPTS[0], max_tokens=3,
                                sampling=SamplingOptions(temperature=1.4, seed=s))
              for s in range(1200)]
  results = run(engine("ngram", lanes=SAMPLING_LANES), requests)
  assert h.chi_square_pvalue(exact(0, 3, 1.0, False),
                             [tuple(r.token_ids) for r in results]) < 1e-3


@pytest.mark.parametrize("name", ["jump+ngram", "dflash2", "jump+ngram/tree", "mtp/tree",
                                  "jump+eagle3/sampling", "eagle3/tree"])
def test_callback_bridge_equals_stages_bridge(name):
  """The io_callback loop produces exactly the stages bridge's tokens (same randomness),
  min_tokens and ignore_eos included."""
  requests = lambda: [GenerationRequest(PROMPTS[s % 2], max_tokens=4,
                                        constraint=SPEC if s % 3 else None,
                                        min_tokens=2 if s % 4 == 0 else 0,
                                        ignore_eos=s % 6 == 0,
                                        sampling=SamplingOptions(temperature=1.0, seed=s))
                      for s in range(48)]
  a = run(engine(name), requests())
  b = run(engine(name, "callback"), requests())
  assert [r.token_ids for r in a] == [r.token_ids for r in b]
  assert [len(r.rounds) for r in a] == [len(r.rounds) for r in b]


def test_masked_q_raises_greedy_acceptance():
  """Masked q redraws illegal sampled drafts from the legal part of q: more accepted."""
  requests = [GenerationRequest(PROMPTS[0], max_tokens=4, constraint=SPEC,
                                sampling=SamplingOptions(temperature=0.0, seed=s))
              for s in range(64)]
  on = run(engine("draft/sampling"), requests, True)
  off = run(engine("draft/sampling"), [GenerationRequest(
      r.prompt_ids, max_tokens=4, constraint=SPEC, sampling=r.sampling) for r in requests], False)
  rate = lambda rs: np.mean([r.accepted_length for r in rs])
  assert rate(on) > rate(off)


@pytest.mark.parametrize("bridge", BRIDGES)
@pytest.mark.parametrize("name", ["none", "jump+ngram", "dflash2", "jump+ngram/tree"])
def test_device_automaton_equals_batch_fill(name, bridge):
  """Trie lanes masked by the device-resident automaton inside the round commit exactly the
  tokens of the host batch-fill path (greedy and sampled, mixed with xgrammar and free lanes,
  two different choice sets in one batch)."""
  other = ic.OutputConstraint.choice(["ab", "ba", "abc1", "x"])
  specs = [SPEC.with_backend("trie"), other.with_backend("trie"), SPEC.with_backend("xgrammar"),
           None]
  requests = lambda: [GenerationRequest(PROMPTS[s % 2], max_tokens=5, constraint=specs[s % 4],
                                        sampling=SamplingOptions(temperature=float(s % 3 > 0),
                                                                 seed=s))
                      for s in range(40)]
  host = run(engine(name, bridge), requests())
  device = run(engine(name, bridge, device_automaton=True), requests())
  assert [r.token_ids for r in host] == [r.token_ids for r in device]
  assert [r.finish_reason for r in host] == [r.finish_reason for r in device]
  trie_rows = [r for s, r in enumerate(device) if s % 4 < 2]
  assert all(r.constraint.mask_bytes_uploaded == 0 for r in trie_rows)  # no host masks


@pytest.mark.parametrize("name", ["none", "jump+ngram", "dflash2"])
def test_unrolled_layout_spans_and_timelines_keep_greedy_tokens(name, monkeypatch):
  """The unrolled weight layout, attention over bucketed spans of the cache (steps of 8
  here, so rounds cross span boundaries), and recording a round timeline (overlapped or
  serial) leave ordinary greedy's tokens unchanged."""
  from flax import nnx
  from infernix_jax.models import unrolled
  from infernix_jax.runtime import Timeline, _round
  monkeypatch.setattr(_round, "SPAN_STEP", 8)
  assert _round.attention_span([3, 9], 4, 32) == 16
  assert _round.attention_span([3, 29], 4, 32) is None
  cfg, model = h.tiny_model()
  fast = unrolled.unroll(nnx.merge(*nnx.split(model)))
  eng = Engine(fast, h.toy_vocab(), VARIANTS[name], lanes=4, capacity=32)
  cases = [(p, c) for p in range(len(PROMPTS)) for c in (None, BACKENDS[0])]
  for serial in (None, False, True):
    eng.timeline = None if serial is None else Timeline(serial=serial)
    requests = [GenerationRequest(PROMPTS[p], max_tokens=6,
                                  constraint=SPEC.with_backend(c) if c else None)
                for p, c in cases]
    for (p, c), r in zip(cases, run(eng, requests)):
      [want] = exact(p, 6, 0.0, c is not None)
      assert tuple(r.token_ids) == want, (name, p, c, serial)
    if name == "jump+ngram":  # rounds without drafts verified the anchors alone
      assert eng.host.stats["anchor_only_rounds"] > 0
    if serial is not None:
      names = {span[1] for span in eng.timeline.spans}
      assert {"begin", "dispatch:forward", "lookahead", "dispatch:finish", "commit"} <= names
      assert eng.timeline.round >= 1


@pytest.mark.parametrize("name", ["none", "jump+ngram", "dflash2"])
def test_lanes_admitted_one_by_one_keep_greedy_tokens(name, monkeypatch):
  """More requests than lanes, finishing at different times: each admission prefills only the
  lanes it fills (the drafter's features for them too) and every request still yields
  ordinary greedy's tokens."""
  from infernix_jax.runtime import prefill
  calls = []
  real = prefill.append_rows

  def spy(*args, **kwargs):
    calls.append(len(args[3]))
    return real(*args, **kwargs)

  monkeypatch.setattr(prefill, "append_rows", spy)
  cfg, model = h.tiny_model()
  eng = Engine(model, h.toy_vocab(), VARIANTS[name], lanes=4, capacity=32)
  cases = [(i % len(PROMPTS), (None, BACKENDS[0])[i % 2], 2 + i % 5) for i in range(10)]
  requests = [GenerationRequest(PROMPTS[p], max_tokens=m,
                                constraint=SPEC.with_backend(c) if c else None)
              for p, c, m in cases]
  for (p, c, m), r in zip(cases, run(eng, requests)):
    [want] = exact(p, m, 0.0, c is not None)
    assert tuple(r.token_ids) == want, (name, p, c, m)
  assert calls and max(calls) < 4  # some admissions computed 1 or 2 rows, not all 4 lanes
