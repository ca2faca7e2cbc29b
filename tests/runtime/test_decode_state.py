"""The device owns each lane's committed length, anchor and output position (`DecodeState`);
the host's commit only returns counts, which `_state.commit_lanes` applies.

Oracles: each running lane's prompt and published output (the host's results, which the
device never writes): its committed KV length is len(prompt) - 1 + len(output), its anchor the
last of prompt + output, its output position len(output). Checked between rounds on both
bridges and in the device loop, with drafts rejected (random drafter weights, so lengths
must not include guesses) and with jump-forward; and the commit rule itself against a
per-lane loop.
"""

from __future__ import annotations

import numpy as np
import pytest

from infernix_jax import constrain as ic
from infernix_jax.runtime import Engine, GenerationRequest, SamplingOptions, _state, drafters
from infernix_jax.testing import exact_oracle as h

PROMPTS = ([1, 1, 2, 1, 1, 2, 1], [8, 12, 13, 9, 8, 12], [5, 10, 3, 3, 7])


def test_commit_lanes_sets_lengths_anchors_and_positions_from_counts():
  rng = np.random.default_rng(0)
  b, p = 6, 4
  lengths = rng.integers(0, 30, b).astype(np.int32)
  anchor = rng.integers(0, 14, b).astype(np.int32)
  position = rng.integers(0, 9, b).astype(np.int32)
  tokens = rng.integers(0, 14, (b, p)).astype(np.int32)
  counts = np.array([0, 1, 2, 3, 4, 0], np.int32)
  got = [np.asarray(x) for x in _state.commit_lanes(lengths, anchor, position, tokens, counts)]
  for i in range(b):
    c = int(counts[i])
    assert got[0][i] == lengths[i] + c and got[2][i] == position[i] + c
    assert got[1][i] == (tokens[i, c - 1] if c else anchor[i])


def _requests():
  out = []
  for i, prompt in enumerate(PROMPTS):
    sampling = SamplingOptions(temperature=0.0 if i == 0 else 0.7, seed=5 + i)
    kw = {"constraint": ic.OutputConstraint.regex("(ab|c)+x")} if i == 1 else {}
    out.append(GenerationRequest(prompt, max_tokens=14, sampling=sampling, ignore_eos=i == 2,
                                 request_id=f"r{i}", **kw))
  return out


def _check_state(eng: Engine) -> int:
  """Asserts the device state of every running lane against its prompt and output ->
  the lanes checked."""
  ds = _state.settle(eng._round_state)  # a stages round leaves its commit waiting
  lengths, anchor, position = (np.asarray(x) for x in (ds.cache.lengths, ds.anchor,
                                                       ds.position))
  checked = 0
  for b, lane in enumerate(eng.host.lanes):
    if lane is None or lane.finish is not None:
      continue
    seq = list(lane.request.prompt_ids) + lane.output
    assert lengths[b] == len(seq) - 1, (b, lengths[b], len(seq))
    assert anchor[b] == seq[-1] and position[b] == len(lane.output)
    checked += 1
  return checked


@pytest.mark.parametrize("drafter,bridge,rounds", [
    ("mtp", "stages", 1), ("ngram+jump", "stages", 1), ("mtp", "callback", 1),
    ("none", "stages", 4)])
def test_the_device_state_follows_the_committed_output(drafter, bridge, rounds):
  cfg, model = h.tiny_model()
  if drafter == "mtp":
    d = drafters.create("mtp", {"k": 3, "weights": "random"}, target=(cfg, model))
  elif drafter == "ngram+jump":
    d = drafters.create("ngram", {"k": 3, "n": 2}, jump_forward=True)
  else:
    d = drafters.create("none")
  eng = Engine(model, h.toy_vocab(), d, lanes=3, capacity=48, cfg=cfg, bridge=bridge,
               device_rounds=rounds, callback_rounds=2)
  for r in _requests():
    eng.submit(r)
  checked = 0
  while eng.busy:
    eng.step()
    checked += _check_state(eng)
  assert checked >= 3
  drafted = sum(x.drafted - x.accepted for i in range(3)
                for x in eng.host.results[f"r{i}"].rounds)
  assert drafter == "none" or drafted > 0  # some drafts were rejected (rolled back)
