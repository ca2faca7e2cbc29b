"""Drafter training by self-distillation from the frozen target.

  prompts      the documented prompt mix and its train/validation split
  corpus       the target's own continuations (cached) and its hidden states over them
  objectives   KL(target || drafter) (+ CE) for the MTP head and the block drafter
  loop         a training run from a config: progress, evaluation, orbax checkpoints, export
  evaluate     accepted length and per-position acceptance through the engine
"""
