"""Classification reproduction of the trie paper ("Trie Automata for Constrained Decoding over
Large Finite Sets", arXiv:2608.12574, Table 6 style): SmolLM2 with prompt engineering only vs
trie-constrained answers, identical prompts, on TREC (42 labels), Banking77 (77) and CLINC150
(150).

  python -m experiments.run --config=configs/classification.py
  python -m experiments.run --config=configs/classification.py:smoke    (CI)
"""

import ml_collections

VARIANTS = ("", "smoke")  # get_config's variants ("": the default)


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.study = "classification"
  c.title = "Classification: prompt engineering vs trie-constrained answers"
  c.question = (
      "Does constraining the answer to the label set with a trie classify better than "
      "prompt engineering alone?")
  c.model = ""               # "" = embedded SmolLM2
  c.dataset = "trec"
  c.mode = "pe"              # pe | trie
  c.template = "pe"          # the paper's single-pass prompt (shared by PE and trie)
  c.limit = 200              # examples per dataset: first `limit` after a seeded shuffle
  c.seed = 0
  c.chunks = 4               # each (dataset, mode) runs as this many cells of limit/chunks
  c.chunk = 0
  c.max_tokens = 24
  c.backend = "trie"
  c.lanes = 4
  c.batch = 16               # requests submitted together (continuous batching)
  c.capacity = 1024           # the longest prompt (CLINC150's 150 options) is ~720 tokens
  c.publish_dir = "docs/results/classification"
  c.grid = ml_collections.ConfigDict()
  c.grid.dataset = ("trec", "banking77", "clinc150")
  c.grid.mode = ("pe", "trie")
  c.grid.chunk = tuple(range(c.chunks))
  if variant == "smoke":
    c.model = "tiny-random"
    c.limit = 2
    c.max_tokens = 12
    c.lanes = 2
    c.batch = 2
    c.chunks = 1
    c.grid.chunk = (0,)
    c.grid.dataset = ("trec", "clinc150")
    c.publish_dir = ""
  elif variant:
    raise ValueError(f"unknown variant {variant!r}: smoke")
  return c
