"""Grammar-faithful sampling on a bounded Dyck grammar (study "faithful"): the exact distance
of the local law to μ*, exact-finite's engine samples, its cost and accepted length.

  python -m experiments.run --config=configs/faithful.py
  python -m experiments.run --config=configs/faithful.py:smoke    (CI)
"""

import ml_collections

VARIANTS = ("", "smoke")  # get_config's variants ("": the default)

# Balanced brackets, depth <= 2. On SmolLM2's vocabulary every tokenization counts: DYCK is
# 12 strings, 780 token sequences (1,400 trie nodes); DYCK_BRACKETS 42 strings, 831 sequences
# (1,530 nodes); DYCK_SMALL 6 strings, 92 sequences (163 nodes).
DYCK = 'root ::= ("(" inner ")"){1,2}\ninner ::= ("(" ")"){0,2}'
DYCK_BRACKETS = 'root ::= ("(" inner ")" | "[" inner "]"){1,2}\ninner ::= ("(" ")" | "[" "]"){0,1}'
DYCK_SMALL = 'root ::= ("(" inner ")"){1,2}\ninner ::= ("(" ")"){0,1}'


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.study = "faithful"
  c.title = "Grammar-faithful sampling: the local law vs μ* on a bounded Dyck grammar"
  c.question = (
      "How far is the local (token-masked) law from the grammar-faithful law μ* on a "
      "bounded Dyck grammar, and what does exact sampling cost?")
  c.model = None  # the embedded SmolLM2-135M-Instruct
  c.grammar = DYCK
  c.prompt = "Write a short sequence of balanced parentheses."
  c.drafter = "ngram"
  c.k = 4
  c.lanes = 8
  c.temperature = 1.0
  c.samples = 200
  c.max_tokens = 16
  c.max_nodes = 200_000
  c.seed = 0
  c.publish_dir = "docs/results/faithful"
  c.grid = ml_collections.ConfigDict()
  c.grid.grammar = (DYCK, DYCK_BRACKETS)
  c.grid.prompt = ("Write a short sequence of balanced parentheses.",
                   "Write a deeply nested sequence of brackets.")
  if variant == "smoke":
    c.grammar = DYCK_SMALL
    c.samples = 8
    c.max_tokens = 10
    c.grid = ml_collections.ConfigDict()
    c.grid.prompt = ("Write a short sequence of balanced parentheses.",)
    c.publish_dir = ""
  elif variant:
    raise ValueError(f"unknown variant {variant!r}: smoke")
  return c
