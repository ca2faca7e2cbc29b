"""Engine benchmark on the embedded SmolLM2 (study "decode"): tokens/s, accepted length and
host time per round for every drafter, constrained (JSON Schema) and free, both host bridges.

  python -m experiments.run --config=configs/engine.py          every drafter
  python -m experiments.run --config=configs/engine.py:quick    three drafters (make bench)

The peer of every constrained cell is the free cell of the same drafter in the same run.
"""

import ml_collections

from configs import acceptance

VARIANTS = ("", "quick")  # get_config's variants ("": the default)


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = acceptance.base()
  c.title = "Engine benchmark"
  c.question = (
      "How fast is each drafter, and how much of a round is host time, on JSON-Schema "
      "requests and on the same prompts unconstrained?")
  c.description = ("Tokens/s and host share per drafter on JSON-Schema requests "
                   "(JSONSchemaBench Github_trivial) and the same prompts unconstrained.")
  c.workloads = ("jsonschema:Github_trivial",)
  c.per_workload = 4
  c.split = ""
  c.max_tokens = 64
  c.publish_dir = "docs/results/engine"
  g = c.grid = ml_collections.ConfigDict()
  g.drafter = ml_collections.ConfigDict()
  if variant == "quick":
    g.drafter.name = ("none", "ngram", "mtp")
    g.drafter.jump_forward = (False, True)
    g.constrained = (False, True)
    c.publish_dir = ""
  elif variant == "":
    g.drafter.name = ("none", "ngram", "mtp", "dflash", "dflash2")
    g.drafter.jump_forward = (False, True)
    g.bridge = ("stages", "callback")
    g.constrained = (False, True)
  else:
    raise ValueError(f"unknown variant {variant!r}: quick")
  return c
