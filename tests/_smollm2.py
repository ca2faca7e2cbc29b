"""Serving `infernix_jax.LLM(...)` of the embedded SmolLM2 from the suite's shared, already
compiled `smollm2_llm` (tests/conftest.py) inside a test, instead of loading and compiling
another."""

from __future__ import annotations


def shares(shared, model=None, *, drafter="ngram", k=4, jump_forward=None, lanes=1,
           capacity=2048, layout="unrolled", layouts=("stacked",), any_capacity=False,
           **rest) -> bool:
  """Whether `LLM(model, ...)` may be served by `shared`: the same weights and drafter
  (n-gram with jump-forward, the same K), a layout in `layouts` (the unrolled layout computes
  the stacked one's logits to 2e-5, tests/models/test_unrolled.py), any lane count (requests
  decode lane-independently) and at most its capacity unless `any_capacity` (short prompts)."""
  del lanes
  eng = shared.engine
  return (model is None and not rest and layout in layouts and drafter == "ngram"
          and k == eng.k and jump_forward in (None, True)
          and (any_capacity or capacity <= eng.capacity))


def serve_from_shared(monkeypatch, shared, **rule) -> None:
  """Patches `infernix_jax.LLM` and `infernix_jax.api.LLM` (what `generate` builds) so that
  the LLMs `shares(shared, ..., **rule)` admits are `shared`; others are built as usual. The
  caller restores `generate`'s cache and any setting of `shared` it changes."""
  import infernix_jax
  from infernix_jax import api

  real = api.LLM

  def llm(*args, **kwargs):
    return shared if shares(shared, *args, **rule, **kwargs) else real(*args, **kwargs)

  monkeypatch.setattr(infernix_jax, "LLM", llm, raising=False)
  monkeypatch.setattr(api, "LLM", llm)
