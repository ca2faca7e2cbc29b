"""Classification under μ* vs the local law (study "faithful_classification"): greedy
trie-constrained answers of TREC, Banking77 and CLINC150 decoded with sampling_law="local"
and "exact-finite" (the label-level argmax of the target), item by item.

  python -m experiments.run --config=configs/faithful_classification.py
  python -m experiments.run --config=configs/faithful_classification.py:smoke    (CI)
"""

import ml_collections

VARIANTS = ("", "smoke")  # get_config's variants ("": the default)


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.study = "faithful_classification"
  c.title = "Classification under μ* vs the local law: label-level argmax vs token-level greedy"
  c.question = (
      "Does the label-level argmax under μ* classify better than token-level greedy "
      "decoding under the local law?")
  c.model = ""               # "" = embedded SmolLM2
  c.dataset = "trec"
  c.template = "pe"          # the classification study's prompt
  c.limit = 40               # the first 40 of the classification study's 200-example subset
  c.seed = 0
  c.chunks = 2
  c.chunk = 0
  c.max_tokens = 24
  c.backend = "trie"
  c.lanes = 1
  c.capacity = 1024
  c.publish_dir = "docs/results/faithful_classification"
  c.grid = ml_collections.ConfigDict()
  c.grid.dataset = ("trec", "banking77", "clinc150")
  c.grid.chunk = tuple(range(c.chunks))
  if variant == "smoke":
    c.model = "tiny-random"
    c.lanes = 2  # the classification smoke's engine (same drafter, lanes and capacity): its
    # compiled programs are shared through the compilation cache
    c.limit = 1
    c.max_tokens = 12
    c.chunks = 1
    c.grid.chunk = (0,)
    c.grid.dataset = ("trec",)
    c.publish_dir = ""
  elif variant:
    raise ValueError(f"unknown variant {variant!r}: smoke")
  return c
