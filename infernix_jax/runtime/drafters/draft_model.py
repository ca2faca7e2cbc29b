"""Draft-model drafting: a smaller model of the same vocabulary proposes K tokens."""

from __future__ import annotations

import dataclasses

from infernix_jax.runtime.drafters._net import NetDrafter


@dataclasses.dataclass(frozen=True, eq=False)
class DraftModel(NetDrafter):
  """`models.drafters.DraftModelDrafter` on the device: greedy (one-hot q) or sampling at
  its temperature (dense q, the distribution it drew from). It drafts over its whole logits
  width: a padding id (>= V) is rejected by the target's verification, so output stays exact.
  """

  name = "draft"

  @property
  def q_kind(self):  # type: ignore[override]
    return "dense" if self.net.temperature > 0 else "onehot"

  @property
  def sampling(self):  # type: ignore[override]
    return self.net.temperature > 0


def build(opts) -> DraftModel:
  """From `opts.draft_model` = (cfg, model) sharing the target's vocabulary."""
  from infernix_jax.models import drafters as md
  if opts.draft_model is None:
    raise ValueError("the 'draft' drafter needs a draft model (--draft-model PATH: an HF "
                     "directory or GGUF file sharing the target's vocabulary)")
  cfg, model = opts.draft_model
  width = cfg.vocab_size
  if opts.target is not None:
    width = opts.target[0].vocab_size
    if width != cfg.vocab_size:
      raise ValueError(f"the draft model's vocabulary ({cfg.vocab_size} logits) differs from "
                       f"the target's ({width}); a draft model must share it")
  temperature = opts.temperature if opts.draft_sampling else 0.0
  net = md.DraftModelDrafter.from_model(model, k=opts.k, temperature=temperature,
                                        target_width=width)
  return DraftModel(k=opts.k, net=net)
