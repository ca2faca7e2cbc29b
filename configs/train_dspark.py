"""Training run of the DSpark drafter (block backbone + sequential head) for the embedded
model, on the same teacher-scored corpus as the block drafter. The head is teacher-forced:
position i reads the sequence's own token before it, as drafting reads draft i - 1.

Run:    python -m infernix_jax.train --config=configs/train_dspark.py
Smoke:  python -m infernix_jax.train --config=configs/train_dspark.py:smoke   (CI, < 1 minute)
"""

import ml_collections

from configs import train_block, train_mtp

VARIANTS = ("", "smoke")  # get_config's variants ("": the default)


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  # Greedy chains evaluate it (sampling and trees share the weights). The backbone is the
  # block drafter's, as deep and with its position weights: it predicts every position in one
  # pass; the head then sees the token before each.
  c = train_mtp.base(variant, "dspark")
  c.layers = train_block.LAYERS
  c.position_weights = train_block.POSITION_WEIGHTS
  return c
