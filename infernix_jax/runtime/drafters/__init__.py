"""Drafters behind one interface (`base.Drafter`), registered by name.

  from infernix_jax.runtime import drafters
  drafters.names()                                   # ("none", "ngram", "jump", "draft", ...)
  d = drafters.create("mtp", k=4, target=(cfg, model), jump_forward=True)

Adding a drafter: one module with a `Drafter` subclass and a `build(opts)` function, plus
one `register(...)` line below. The CLI, benchmarks and the exactness tests take their names
from this registry.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from infernix_jax.runtime.drafters import dflash, dflash2, draft_model, jump, mtp, ngram, none
from infernix_jax.runtime.drafters.base import (Committed, DraftInput, Drafter, DrafterSpec,
                                                Proposal)
from infernix_jax.runtime.drafters.jump import JumpForward
from infernix_jax.runtime.drafters.ngram import NGramDrafter, NGramIndex
from infernix_jax.runtime.drafters.none import NoDrafter


@dataclasses.dataclass(frozen=True)
class BuildOptions:
  """Everything a drafter's `build` may use; each takes what it needs."""

  k: int = 4  # drafts per round (ignored by "none")
  target: Any = None  # (cfg, model) of the target: drafters sharing its head (MTP, block)
  draft_model: Any = None  # (cfg, model) of a draft model sharing the vocabulary ("draft")
  ngram_n: int = 3  # the longest n-gram of prompt lookup
  draft_sampling: bool = False  # the draft model samples (dense q) instead of greedy
  temperature: float = 1.0  # sampling drafters' temperature (draft model, sparse block)
  seed: int = 0  # initialisation seed of random drafter networks
  # Trained drafters (mtp, dflash, dflash2): None = the weights shipped for the embedded
  # model, "random" = untrained (mechanism tests), a path = a `models.drafters.weights`
  # file, or an already built network module (training-time evaluation).
  weights: Any = None


@dataclasses.dataclass(frozen=True)
class Entry:
  """A registered drafter: its builder, whether it drafts (K > 0), a one-line description."""

  build: Callable[[BuildOptions], Drafter]
  drafts: bool
  help: str


_REGISTRY: dict[str, Entry] = {}


def register(name: str, build: Callable[[BuildOptions], Drafter], *, help: str,
             drafts: bool = True) -> None:
  """Adds a drafter under `name` (a second registration of a name is an error)."""
  if name in _REGISTRY:
    raise ValueError(f"a drafter named {name!r} is already registered")
  _REGISTRY[name] = Entry(build, drafts, help)


def names() -> tuple[str, ...]:
  """Registered drafter names, in registration order."""
  return tuple(_REGISTRY)


def entry(name: str) -> Entry:
  """The registry entry of `name`; ValueError listing the known names otherwise."""
  try:
    return _REGISTRY[name]
  except KeyError:
    raise ValueError(f"unknown drafter {name!r}; known drafters: {', '.join(names())}") from None


def create(name: str, *, jump_forward: bool = False, **options) -> Drafter:
  """Builds drafter `name` with `BuildOptions(**options)`, wrapped in jump-forward if asked.

  Raises:
    ValueError: unknown name, k < 1 for a drafting drafter, or a missing model.
  """
  e = entry(name)
  opts = BuildOptions(**options)
  if (e.drafts or jump_forward) and opts.k < 1:
    raise ValueError(f"k={opts.k} must be >= 1 for drafter {name!r} (use 'none' for k = 0)")
  drafter = e.build(opts)
  if jump_forward and not isinstance(drafter, JumpForward):
    drafter = JumpForward(k=opts.k, inner=drafter if e.drafts else None)
  return drafter

register("none", none.build, drafts=False, help="ordinary decoding, one token per round")
register("ngram", ngram.build, help="prompt lookup: copies the continuation of the latest match")
register("jump", jump.build, help="grammar jump-forward alone: drafts only forced tokens")
register("draft", draft_model.build, help="a draft model sharing the vocabulary (--draft-model)")
register("mtp", mtp.build, help="multi-token-prediction head on the target's hidden state")
register("dflash", dflash.build, help="block drafter: K tokens per call, greedy (one-hot q)")
register("dflash2", dflash2.build, help="sparse block drafter: top-16 sampled drafts (sparse q)")

__all__ = ["BuildOptions", "Committed", "DraftInput", "Drafter", "DrafterSpec", "Entry",
           "JumpForward", "NGramDrafter", "NGramIndex", "NoDrafter", "Proposal", "create",
           "entry", "names", "register"]
