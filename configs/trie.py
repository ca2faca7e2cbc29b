"""The trie paper's compile and per-step study ("Trie Automata for Constrained Decoding over
Large Finite Sets", arXiv:2608.12574) against XGrammar and LLGuidance (study "trie").

  python -m experiments.run --config=configs/trie.py
  python -m experiments.run --config=configs/trie.py --config.k_values="(10,100,1000)"
  python -m experiments.run --config=configs/trie.py:smoke    (CI)
"""

import ml_collections

VARIANTS = ("", "smoke")  # get_config's variants ("": the default)


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.study = "trie"
  c.title = "Trie automata for large finite sets: compile, per-step and batch costs"
  c.question = (
      "What do trie automata over large finite sets cost to compile, per decode step and "
      "per batch, as in the trie paper?")
  c.section = "main"
  c.data_dir = "../shared/data"          # shared data folder (tokenizers, labels), repo-relative
  c.main_vocab = "qwen3"                 # vocabulary of the main K sweep (the paper's Qwen3-8B)
  c.k_values = (10, 50, 100, 500, 1000, 2000, 5000, 10000, 50000, 100000)  # synthetic tool K
  c.engines = ("trie", "xgrammar-regex", "xgrammar-json", "xgrammar-gbnf", "llguidance")  # peers
  c.xgr_max_k = 10000                    # largest K compiled with XGrammar (K=100k takes minutes)
  c.xgr_big_variants = ("regex",)        # XGrammar variants compiled above K = 10,000 (1 repeat)
  c.xgr_step_variant = "regex"           # XGrammar variant whose per-step/batch cost is measured
  c.llg_max_k = 100000                   # largest K compiled with LLGuidance
  c.warm_repeats = 3                     # warm compiles per (engine, K); the median is reported
  c.paths = 200                          # sampled values whose generation states are timed
  c.batch_sizes = (1, 8, 32, 128)        # B for the batch fill measurement
  c.step_passes = 3                      # per-step passes over all states (lowest median kept)
  c.batch_k = (1000, 10000)              # K values at which batch fill is measured
  c.batch_reps = 20                      # repetitions of each batch fill (median)
  c.extra_sets = ("icd10cm", "labels")   # ICD-10-CM billable codes and shared label sets
  c.gen_vocabs = ("smollm2", "qwen3", "cl100k", "llama3", "o200k")  # generalization sweep
  c.gen_k = (1000, 10000)                # K values of the generalization sweep
  c.equivalence_walks = 1000             # random walks per (vocabulary, set) for Proposition 1
  c.dispatch_k = (2, 5, 10, 20, 32, 50, 100, 200)  # K values of the dispatch-threshold sweep
  c.dispatch_repeats = 7                 # compiles per (engine, K) in that sweep (median CPU)
  c.seed = 0                             # sampling seed (sets, paths, batch states)
  c.publish_dir = "docs/results/trie"
  c.grid = ml_collections.ConfigDict()
  c.grid.section = ("equivalence", "dispatch", "main", "extra", "gen")
  if variant == "smoke":
    c.main_vocab = "smollm2"
    c.k_values = (10, 100)
    c.engines = ("trie", "xgrammar-regex", "llguidance")
    c.warm_repeats = 1
    c.paths = 10
    c.step_passes = 1
    c.batch_k = (100,)
    c.batch_sizes = (1, 8)
    c.batch_reps = 2
    c.dispatch_k = (2, 32)
    c.dispatch_repeats = 1
    c.equivalence_walks = 5
    c.gen_vocabs = ("smollm2",)
    c.gen_k = (100,)
    c.extra_sets = ("labels",)
    c.publish_dir = ""
    c.grid.section = ("dispatch", "main", "gen")
  elif variant:
    raise ValueError(f"unknown variant {variant!r}: smoke")
  return c
