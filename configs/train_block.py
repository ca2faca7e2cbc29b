"""Training run of the block (DFlash-style) drafter shipped for the embedded model; the
dflash (greedy, one-hot q) and dflash2 (sparse top-16 q) drafters both use its weights.

Run:    python -m infernix_jax.train --config=configs/train_block.py
Smoke:  python -m infernix_jax.train --config=configs/train_block.py:smoke   (CI, < 1 minute)
"""

import ml_collections

from configs import train_mtp

VARIANTS = ("", "smoke")  # get_config's variants ("": the default)


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = train_mtp.base(variant)
  c.drafter = "block"
  c.eval_drafter = "dflash"     # greedy block drafting (dflash2 shares the weights)
  c.layers = 2
  # Later positions weigh more: the block drafter predicts them all in one pass from the
  # same features, and with equal weights it learned only its first position.
  c.position_weights = (1.0, 1.5, 2.0, 2.5)
  c.workdir = "runs/train_block" + ("_smoke" if variant == "smoke" else "")
  c.export = ("" if variant == "smoke" else
              "infernix_jax/models/drafters/trained/smollm2-135m-instruct.block.safetensors")
  return c
