"""Thinking budget end to end: tiny random Qwen3 weights, the real Qwen3 vocabulary.

At the budget the engine appends the canonical close `\\n</think>\\n\\n` itself (forced-control
preview -> append through the target -> session commit -> publish); the first token after it
is sampled under the content rules. Oracles: the framed session fed the same tokens naturally,
the framing decoder, ordinary decoding without drafters, and solo runs of the other rows.
"""

from __future__ import annotations

import functools
import numpy as np
import pytest
from flax import nnx

from infernix_jax import constrain as ic
from infernix_jax import models as im
from infernix_jax.constrain import framing as fr
from infernix_jax.runtime import drafters
from infernix_jax.runtime.drafters import JumpForward, NGramDrafter, NoDrafter
from infernix_jax.runtime.engine import Engine
from infernix_jax.runtime.types import GenerationRequest
from tests.constrain.conftest import qwen3_vocab  # noqa: F401  (fixture)

THINK_OPEN, THINK_CLOSE, NL, SEP = 151667, 151668, 198, 271
# <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n : the model is reasoning.
THINKING = [151644, 872, 198, 6023, 151645, 198, 151644, 77091, 198, THINK_OPEN, 198]
# The same turn with a closed (empty) think block: the output is content from the start.
CONTENT = THINKING + [198, THINK_CLOSE, 271]
K = 3
MAX = 20
SCALE = 4.0
OBJECT = ic.OutputConstraint.json_object()


@functools.lru_cache(maxsize=None)
def tiny_qwen3(seed: int = 0):
  """A tiny random Qwen3-shaped model over the full Qwen3 logits width (Vm 151936)."""
  cfg = im.ModelConfig(vocab_size=151936, dim=32, num_layers=1, num_heads=2, num_kv_heads=1,
                       head_dim=16, ffn_dim=64, qk_norm=True, rope_theta=1e6,
                       tie_embeddings=False)  # tied: a tiny model echoes its last input
  model = im.Transformer(cfg, rngs=nnx.Rngs(seed))
  model.lm_head[...] = model.lm_head[...] * SCALE  # spread the logits
  return cfg, model


def _drafter(name: str):
  cfg, model = tiny_qwen3()
  return {"none": lambda: NoDrafter(),
          "ngram": lambda: NGramDrafter(k=K, n=2),
          "jump+ngram": lambda: JumpForward(k=K, inner=NGramDrafter(k=K, n=2)),
          # The target as its own draft model: every draft is accepted, so a window that
          # crosses the budget would overshoot it unless the extent is clipped.
          "draft-self": lambda: drafters.create("draft", {"k": K, "model": (cfg, model)},
                                                target=(cfg, model)),
          "mtp+jump": lambda: drafters.create("mtp", {"k": K, "weights": "random"},
                                              target=(cfg, model), jump_forward=True),
          }[name]()


@functools.lru_cache(maxsize=None)
def engine(vocab, name: str, bridge: str = "stages") -> Engine:
  cfg, model = tiny_qwen3()
  return Engine(model, vocab, _drafter(name), lanes=4, capacity=64, bridge=bridge, cfg=cfg)


def req(prompt, budget, constraint=None, max_tokens=MAX):
  return GenerationRequest(prompt, max_tokens=max_tokens, constraint=constraint,
                           thinking_budget=budget)


def generate(eng, requests):
  results = eng.generate(requests)
  assert all(r.error is None for r in results), [r.error for r in results]
  return results


@pytest.mark.parametrize("budget", [0, 5])
@pytest.mark.parametrize("constrained", [False, True])
def test_budget_closes_reasoning_exactly(qwen3_vocab, budget, constrained):  # noqa: F811
  """`budget` reasoning tokens, then exactly `\\n</think>\\n\\n`, then content (JSON rules when
  constrained); the framing decoder reads the same split."""
  spec = OBJECT if constrained else None
  (res,) = generate(engine(qwen3_vocab, "ngram"), [req(THINKING, budget, spec)])
  out = res.token_ids
  assert res.thinking_forced_close and len(out) == MAX
  assert THINK_CLOSE not in out[:budget]
  assert out[budget:budget + 3] == [NL, THINK_CLOSE, SEP]
  assert out.count(THINK_CLOSE) == 1
  if constrained:
    prepared = fr.prepare_for_request(qwen3_vocab, THINKING, constraint=spec)
    dec = fr.decode_output(prepared, out)
    assert dec.reasoning == qwen3_vocab.decode(out[:budget]).decode("utf-8", "replace")
    assert dec.content.lstrip().startswith("{")  # the first content token obeys the schema
    assert res.constraint.branch == "content"


def test_forced_close_state_equals_natural_close(qwen3_vocab):  # noqa: F811
  """A session closed by `preview_forced_close` equals one fed the same ids as ordinary
  output: same mask, same decoded output, and both accept the engine's continuation."""
  budget = 6
  (res,) = generate(engine(qwen3_vocab, "ngram"), [req(THINKING, budget, OBJECT)])
  out = res.token_ids
  prepared = fr.prepare_for_request(qwen3_vocab, THINKING, constraint=OBJECT)
  forced, natural = prepared.new_session(), prepared.new_session()
  assert forced.accept(out[:budget]).accepted == budget
  assert forced.in_reasoning
  forced.preview_forced_close()
  forced.commit()
  assert natural.accept(out[:budget + 3]).accepted == budget + 3
  assert not forced.in_reasoning and not natural.in_reasoning
  w = qwen3_vocab.mask_words
  m1, m2 = np.zeros((w,), np.int32), np.zeros((w,), np.int32)
  forced.fill_mask(m1)
  natural.fill_mask(m2)
  assert np.array_equal(m1, m2) and m1.any()
  assert forced.result() == natural.result()
  rest = out[budget + 3:]
  assert forced.accept(rest).accepted == len(rest) == natural.accept(rest).accepted
  assert forced.result() == natural.result()


@pytest.mark.parametrize("name,bridge", [
    ("ngram", "stages"), ("jump+ngram", "callback"), ("draft-self", "stages"),
    ("draft-self", "callback"), ("mtp+jump", "stages")])
def test_greedy_with_budget_equals_ordinary(qwen3_vocab, name, bridge):  # noqa: F811
  """Greedy output with a budget is identical with and without drafters, constrained or
  free, with the budget falling inside a draft window (the extent is clipped)."""
  requests = lambda: [req(THINKING, 7), req(THINKING, 4, OBJECT), req(THINKING, 1),
                      req(THINKING, 9, OBJECT)]
  ref = generate(engine(qwen3_vocab, "none"), requests())
  got = generate(engine(qwen3_vocab, name, bridge), requests())
  for a, b in zip(ref, got):
    assert b.token_ids == a.token_ids and b.thinking_forced_close
  if name == "draft-self":  # every round but the clipped ones accepts all K drafts
    assert all(r.accepted > 0 for r in got)
    assert any(st.drafted < K for r in got for st in r.rounds)  # windows clipped at the budget


def test_rest_of_batch_unaffected(qwen3_vocab):  # noqa: F811
  """Rows without a budget, past their budget, or with a closed think block are unchanged
  by a budgeted row in the same batch: each equals its solo run without a budget."""
  eng = engine(qwen3_vocab, "ngram")
  mixed = generate(eng, [req(THINKING, 3, OBJECT), req(THINKING, None, OBJECT),
                         req(CONTENT, 2, OBJECT), req(THINKING, 500)])
  solo = [generate(eng, [r])[0] for r in (req(THINKING, None, OBJECT),
                                          req(CONTENT, None, OBJECT), req(THINKING, None))]
  assert mixed[0].thinking_forced_close and mixed[0].token_ids[3:6] == [NL, THINK_CLOSE, SEP]
  for got, want in zip(mixed[1:], solo):
    assert got.token_ids == want.token_ids and not got.thinking_forced_close


def test_invalid_budget_rejected(qwen3_vocab):  # noqa: F811
  with pytest.raises(ValueError, match="thinking_budget"):
    engine(qwen3_vocab, "none").submit(req(THINKING, -1))


def test_natural_close_before_budget_unaffected(qwen3_vocab):  # noqa: F811
  """A model that closes its reasoning itself (here at once: the `</think>` logit is raised)
  gives the same output with and without a budget, and no forced close."""
  cfg, model = tiny_qwen3()
  biased = im.Transformer(cfg, rngs=nnx.Rngs(0))
  biased.lm_head[...] = model.lm_head[...].at[:, THINK_CLOSE].add(50.0)
  eng = Engine(biased, qwen3_vocab, NGramDrafter(k=K, n=2), lanes=2, capacity=64, cfg=cfg)
  for spec in (None, OBJECT):
    with_budget = generate(eng, [req(THINKING, 6, spec)])[0]
    without = generate(eng, [req(THINKING, None, spec)])[0]
    assert with_budget.token_ids[0] == THINK_CLOSE  # closed naturally, before the budget
    assert with_budget.token_ids == without.token_ids
    assert not with_budget.thinking_forced_close


def test_sampled_rows_close_at_the_budget(qwen3_vocab):  # noqa: F811
  """At T = 1 with a drafter whose windows cross the budget, every row still has exactly
  `budget` reasoning tokens, then the close, then content."""
  from infernix_jax.runtime.types import SamplingOptions
  eng = engine(qwen3_vocab, "draft-self")
  requests = [GenerationRequest(THINKING, max_tokens=MAX, constraint=spec, thinking_budget=b,
                                sampling=SamplingOptions(temperature=1.0, seed=s))
              for s, (b, spec) in enumerate([(2, None), (5, OBJECT), (6, None), (3, OBJECT)])]
  for r, b in zip(generate(eng, requests), (2, 5, 6, 3)):
    assert r.thinking_forced_close and THINK_CLOSE not in r.token_ids[:b]
    assert r.token_ids[b:b + 3] == [NL, THINK_CLOSE, SEP]
