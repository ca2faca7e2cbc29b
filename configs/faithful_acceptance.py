"""Does faithfulness cost speed? Accepted length of n-gram, jump-forward, n-gram+jump-forward,
mtp and dflash under sampling_law="exact-finite" vs "local" on finite constraints (study
"faithful_acceptance"), the embedded SmolLM2-135M-Instruct, K = 4.

  python -m experiments.run --config=configs/faithful_acceptance.py --publish
  python -m experiments.run --config=configs/faithful_acceptance.py:smoke    (CI)
"""

import ml_collections

VARIANTS = ("", "smoke")  # get_config's variants ("": the default)


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.study = "faithful_acceptance"
  c.title = "Does faithfulness cost speed? Accepted length under exact-finite vs local"
  c.question = (
      "Does drafting against the exact-finite law cost accepted length compared with the "
      "local law?")
  c.model = None  # the embedded SmolLM2-135M-Instruct
  c.constraint = "tools"  # a key of faithful_acceptance.CONSTRAINTS: tools | dyck | json
  c.drafter = "ngram"  # a key of faithful_acceptance.DRAFTERS
  c.k = 4  # draft length K
  c.lanes = 8  # B, requests decoded together
  c.capacity = 512  # S, KV positions per lane (the tools prompt is ~250 tokens)
  c.temperature = 0.0  # 0 = greedy; > 0 samples
  c.greedy_prompts = 8  # prompts of a greedy cell (one request each)
  c.sampled_prompts = 4  # prompts of a sampled cell ...
  c.seeds = 3  # ... each decoded with this many seeds
  c.seed = 0  # the first seed
  c.max_tokens = 48  # per request (any tokenization of the longest member fits)
  c.publish_dir = "docs/results/faithful_acceptance"
  c.grid = ml_collections.ConfigDict()
  c.grid.constraint = ("tools", "dyck", "json")
  c.grid.drafter = ("ngram", "jump", "ngram+jump", "mtp", "dflash")
  c.grid.temperature = (0.0, 1.0)
  if variant == "smoke":
    c.constraint = "colors"
    c.drafter = "ngram+jump"
    c.greedy_prompts = 2
    c.sampled_prompts = 1
    c.seeds = 2
    c.max_tokens = 16
    c.capacity = 128
    c.publish_dir = ""
    c.grid = ml_collections.ConfigDict()
    c.grid.temperature = (0.0, 1.0)
  elif variant:
    raise ValueError(f"unknown variant {variant!r}: smoke")
  return c
