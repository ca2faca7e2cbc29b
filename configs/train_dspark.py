"""Training run of the DSpark drafter (block backbone + sequential head) for the embedded
model, on the same teacher-scored corpus as the block drafter. The head is teacher-forced:
position i reads the sequence's own token before it, as drafting reads draft i - 1.

Run:    python -m infernix_jax.train --config=configs/train_dspark.py
Smoke:  python -m infernix_jax.train --config=configs/train_dspark.py:smoke   (CI, < 1 minute)
"""

import ml_collections

from configs import train_mtp

VARIANTS = ("", "smoke")  # get_config's variants ("": the default)


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = train_mtp.base(variant)
  c.drafter = "dspark"
  c.eval_drafter = "dspark"     # greedy chains (sampling and trees share the weights)
  c.layers = 2                  # backbone depth, as the block drafter's
  # Later positions weigh more, as for the block drafter: its backbone predicts them all in
  # one pass; the head then sees the token before each.
  c.position_weights = (1.0, 1.5, 2.0, 2.5)
  c.workdir = "runs/train_dspark" + ("_smoke" if variant == "smoke" else "")
  c.export = ("" if variant == "smoke" else
              "infernix_jax/models/drafters/trained/smollm2-135m-instruct.dspark.safetensors")
  return c
