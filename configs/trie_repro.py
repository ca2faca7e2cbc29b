"""Config of the trie-paper reproduction study (experiments/trie_repro/run.py).

Run: python -m experiments.trie_repro.run --config=configs/trie_repro.py
Override any field: --config.k_values="(10,100,1000)" --config.xgr_max_k=100000
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.data_dir = "../shared/data"          # shared data folder (Qwen3 tokenizer, labels), repo-relative
  c.results = "experiments/trie_repro/results/trie_repro.jsonl"  # raw measurements (one JSON per line)
  c.report = "docs/results/trie.md"      # report regenerated after the run from every results
  # file in the results folder ("" = skip; or run experiments.trie_repro.report by hand)
  c.plots_dir = "docs/results"           # where the PNG plots go
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
  c.sections = ("equivalence", "dispatch", "main", "extra", "gen")  # parts to run ("steps":
  # per-step and batch only, after one compile)
  c.equivalence_walks = 1000            # random walks per (vocabulary, set) for Proposition 1
  c.dispatch_k = (2, 5, 10, 20, 32, 50, 100, 200)  # K values of the dispatch-threshold sweep
  c.dispatch_repeats = 7                 # compiles per (engine, K) in that sweep (median CPU)
  c.seed = 0                             # sampling seed (sets, paths, batch states)
  return c
