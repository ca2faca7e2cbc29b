"""Training run of the block (DFlash-style) drafter shipped for the embedded model; the
dflash (greedy, one-hot q) and dflash2 (sparse top-16 q) drafters both use its weights.

Run:    python -m infernix_jax.train --config=configs/train_block.py
Smoke:  python -m infernix_jax.train --config=configs/train_block.py:smoke   (CI, < 1 minute)
"""

import ml_collections

from configs import train_mtp

VARIANTS = ("", "smoke")  # get_config's variants ("": the default)
LAYERS = 2
# Later positions weigh more: the block drafter predicts them all in one pass from the same
# features, and with equal weights it learned only its first position.
POSITION_WEIGHTS = (1.0, 1.5, 2.0, 2.5)


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  # greedy block drafting evaluates it (dflash2 shares the weights)
  c = train_mtp.base(variant, "block", eval_drafter="dflash")
  c.layers = LAYERS
  c.position_weights = POSITION_WEIGHTS
  return c
