"""Training run of the block (DFlash-style) drafter shipped for the embedded model; the
dflash (greedy, one-hot q) and dflash2 (sparse top-16 q) drafters both use its weights.

Run:    python -m infernix_jax.train --config=configs/train_block.py
Smoke:  python -m infernix_jax.train --config=configs/train_block.py:smoke   (CI, < 1 minute)
"""

import ml_collections

from configs import train_mtp

VARIANTS = ("", "smoke")  # get_config's variants ("": the default)


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = train_mtp.base()
  c.drafter = "block"
  c.eval_drafter = "dflash"     # greedy block drafting (dflash2 shares the weights)
  c.layers = 2
  c.workdir = "runs/train_block"
  c.export = "infernix_jax/models/drafters/trained/smollm2-135m-instruct.block.safetensors"
  if variant == "smoke":
    return train_mtp.smoke(c)
  if variant:
    raise ValueError(f"unknown variant {variant!r} (use '' or 'smoke')")
  return c
