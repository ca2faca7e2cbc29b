"""Exactness demonstration: the acceptance rule vs the naive drop-illegal rule, on the design's
a/b/x counter-example and a drafter x masked q grid at T = 1 (tiny random target, FP64 oracle).

  python -m experiments.run --config=configs/exactness.py
  python -m experiments.run --config=configs/exactness.py:smoke    (CI)
"""

import ml_collections

VARIANTS = ("", "smoke")  # get_config's variants ("": the default)


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.study = "exactness"
  c.title = "Exactness: the acceptance rule vs the naive drop-illegal rule"
  c.question = (
      "Does the acceptance rule keep the target's constrained distribution exactly, where "
      "the naive drop-illegal rule does not?")
  c.drafter = "counterexample/dense"  # a counter-example, or a registered drafter [/sampling]
  # The engine cells' drafter options; each drafter takes its own fields (the draft model is a
  # second tiny random model; "/sampling" samples its drafts).
  c.drafter_options = ml_collections.ConfigDict({"k": 3, "n": 2, "weights": "random"})
  c.masked_q = True
  c.rule = "exact"
  c.samples = 4000           # engine requests per cell
  c.counter_samples = 100_000  # draws per counter-example cell
  c.max_tokens = 4
  c.lanes = 64
  c.seed = 0
  c.alpha = 1e-3             # chi-square significance level of the verdicts
  c.publish_dir = "docs/results/exactness"
  c.grid = ml_collections.ConfigDict()
  c.grid.drafter = ("counterexample/dense", "counterexample/sparse", "ngram", "dflash2",
                    "draft/sampling")
  c.grid.masked_q = (True, False)
  c.grid.rule = ("exact", "drop-illegal")
  if variant == "smoke":
    c.samples = 300
    c.counter_samples = 5000
    c.lanes = 32
    c.grid.drafter = ("counterexample/dense", "dflash2")
    c.grid.masked_q = (False,)
    c.publish_dir = ""
  elif variant:
    raise ValueError(f"unknown variant {variant!r}: smoke")
  return c
