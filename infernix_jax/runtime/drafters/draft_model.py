"""Draft-model drafting: a smaller model of the same vocabulary proposes K tokens."""

from __future__ import annotations

import dataclasses
from typing import Any

from infernix_jax.runtime.drafters._net import NetDrafter, TreeOptions
from infernix_jax.runtime.drafters.base import DrafterOptions, OptionError


@dataclasses.dataclass(frozen=True, eq=False)
class DraftModel(NetDrafter):
  """`models.drafters.DraftModelDrafter` on the device: greedy (one-hot q) or sampling at
  its temperature (dense q, the distribution it drew from). It drafts over its whole logits
  width: a padding id (>= V) is rejected by the target's verification, so output stays exact.
  """

  name = "draft"

  sampled_q = "dense"


@dataclasses.dataclass(frozen=True)
class Options(TreeOptions, DrafterOptions):
  """The draft model's options (tree fields: `TreeOptions`, a dynamic tree grown by the
  draft model's own forwards over the tree)."""

  # The draft model: a path (HF directory, GGUF file or checkpoint, loaded like the target)
  # or an already loaded (ModelConfig, model) pair; it must share the target's vocabulary.
  model: Any = None
  sampling: bool = False  # sample drafts at `temperature` (dense q) instead of greedy
  temperature: float = 1.0  # the draft model's sampling temperature

  def validate(self) -> None:
    super().validate()
    if self.model is None:
      raise OptionError("model", "the 'draft' drafter needs a draft model: model=PATH (an HF "
                                 "directory or GGUF file sharing the target's vocabulary)")
    if isinstance(self.temperature, bool) or not (
        isinstance(self.temperature, (int, float)) and self.temperature > 0):
      raise OptionError("temperature", f"temperature={self.temperature!r} must be > 0")
    self.validate_tree(greedy=not self.sampling)


def build(options: Options, context) -> DraftModel:
  """A draft model sharing the target's vocabulary (`options.model`)."""
  from pathlib import Path

  from infernix_jax.models import drafters as md
  loaded = options.model
  if isinstance(loaded, (str, Path)):
    if not Path(loaded).exists():
      raise OptionError("model", f"model={str(loaded)!r}: no such file or directory")
    if context.load_model is None:
      raise OptionError("model", "a path needs an engine builder that loads models; pass a "
                                 "loaded (cfg, model) pair instead")
    loaded = context.load_model(loaded)
  cfg, model = loaded[:2]
  width = cfg.vocab_size
  if context.target is not None:
    width = context.target[0].vocab_size
    if width != cfg.vocab_size:
      raise OptionError("model", f"the draft model's vocabulary ({cfg.vocab_size} logits) "
                                 f"differs from the target's ({width}); a draft model must "
                                 f"share it")
  temperature = float(options.temperature) if options.sampling else 0.0
  net = md.DraftModelDrafter.from_model(model, k=options.k, temperature=temperature,
                                        target_width=width)
  return DraftModel(k=options.k, net=net, **options.tree_fields())
